"""Checkpoints and data the jobs and the tests use, all local: made at run
time with transformers (random weights, small sizes) or shipped by a package.

Modules: ``models`` (all-MiniLM-L6-v2 from its package, the STS-B test pairs,
the small sizes, ``atomic_dir``; imports no other module here), ``zoo`` (the
checkpoint factory ``make_hf`` / ``make_custom`` and the makers built on it),
``zoo_published`` (checkpoints in published remote-code layouts) and
``st_saved`` (checkpoints saved by sentence-transformers itself). The package
imports none of them: import the module whose names you use.
"""
