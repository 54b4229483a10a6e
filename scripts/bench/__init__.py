"""``make bench`` (``python -m scripts.bench``): engines measured side by side
in one run, the serving benchmark and the profilers."""
