"""The `hubstream` console script."""
