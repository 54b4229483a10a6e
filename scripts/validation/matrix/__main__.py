"""``python -m scripts.validation.matrix``: the matrix's command line (``scripts.validation.matrix.runner``)."""

import sys

from scripts.validation.matrix.runner import main

sys.exit(main())
