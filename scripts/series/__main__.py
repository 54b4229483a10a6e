"""``python -m scripts.series``: the series commands of ``scripts.series.patches``."""

import sys

from scripts.series.patches import main

sys.exit(main())
