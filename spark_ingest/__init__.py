"""PySpark job producing DataAvailable events from files into composite topics (see docs/spark_ingest.md)."""

__all__: list[str] = []
