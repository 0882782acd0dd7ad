"""Faust table definitions and their typed access."""
