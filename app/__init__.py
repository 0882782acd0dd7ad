"""hubstream: a Kafka-native stream processor."""

__all__ = ["__version__"]
__version__ = "0.1.0"
