"""Benchmarks. Run ``python -m bench`` (or ``make bench``); figures go in BENCHMARKS.md."""
