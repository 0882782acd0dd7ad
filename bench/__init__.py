"""Benchmarks: each prints hubstream and a plain baseline side by side, then a JSON line."""
