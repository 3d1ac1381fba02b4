"""Odradek benchmarks. `python -m bench [NAME ...] [--quick]` runs them and writes the results
into docs/performance.md (one section per benchmark module `bench/<name>_bench.py`)."""
