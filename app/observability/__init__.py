"""Prometheus-format metrics of this process and the scrape of its peers' (`/metrics`)."""
