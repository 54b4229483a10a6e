"""The lines: a patch series on each pinned upstream base (``patches/<base>/``).

- ``lines``: the lines, the default line (``patches/lines.toml``), patch numbers.
- ``base``: a line's pinned release (its ``base.toml``), fetch/verify/cache
  through pip (and the bundled Debian packages through apt-get), wheel
  extraction and metadata (standard library only at import: the Makefile
  runs it with the system python3).
- ``bundled``: the files a flavor's wheel bundles, read from the pinned
  Debian packages.
- ``patchfile``: the ``series`` file, patch files (DEP-3 header and diff),
  ``Applied-Upstream``, ``lint``.
- ``diff``: the diff parser (files and hunks).
- ``tree``: a tree of the base with patches applied strictly; ``apply``, ``status``.
- ``refresh``: ``new`` and ``refresh``.
- ``testmap``: the vLLM names a mapped test reaches, against the unpatched base.
- ``rebase``: a line moved onto a newer release as a new line.
- ``patches``: the command line ``python -m scripts.series`` (apply, status,
  new, refresh, lint, rebase), re-exporting the names above.
- ``drift``: a line's series against newer upstream releases (``python -m scripts.series.drift``).
"""
