"""Celery tasks of the benchmarks app (imports run in the request or CLI today)."""
