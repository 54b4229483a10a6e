"""Mechanisms the series tooling, the validation jobs and the benchmarks share."""
