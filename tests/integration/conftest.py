"""Integration fixtures: the service fixtures (stack, settings, metadata, cosmos) are in
tests/conftest.py, shared with the reliability suite."""
