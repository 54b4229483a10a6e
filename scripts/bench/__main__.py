"""``python -m scripts.bench``: the benchmark job of ``scripts.bench.cli``."""

import sys

from scripts.bench.cli import main

sys.exit(main())
