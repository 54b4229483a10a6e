"""The distribution's tooling, by role:

- ``scripts.series``: the patch series on the pinned base (``base``: fetch and
  verify the pinned release; ``patches``: apply, status, new, refresh, lint;
  ``drift``: the series against newer upstream releases). Users and CI run it.
- ``scripts.validation``: engines on a chosen runner, transformers references,
  checkpoints, the HF-comparison matrix, the smoke jobs and the server harness.
  The jobs ``make``, ``make matrix`` and the tests use it.
- ``scripts.bench``: ``make bench`` and the profilers.
- ``scripts.common``: what the three share (paths, reports, environment, quiet
  logging).
"""
