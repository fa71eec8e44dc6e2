"""Benchmarks: each writes bench/results/<name>.json, a markdown table and, where useful, a PNG."""
