"""The patch series on the pinned base: ``base`` (the pinned release),
``patches`` (apply, status, new, refresh, lint: ``python -m scripts.series``)
and ``drift`` (the series against newer upstream releases)."""
