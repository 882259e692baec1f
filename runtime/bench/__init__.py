"""Benchmarks behind ``lerobot-runtime bench``: ratios measured side by side in one run."""
