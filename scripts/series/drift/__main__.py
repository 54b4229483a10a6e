"""``python -m scripts.series.drift``: the drift command line (``scripts.series.drift.cli``)."""

import sys

from scripts.series.drift.cli import main

sys.exit(main())
