#!/usr/bin/env bash
# The whole validation matrix on the CPU: every pooling task of the series on
# every DESIGN.md model row, MRV2 (default) and V1, plus MTEB STS. Reports in
# reports/matrix.{md,json} and reports/matrix-junit.xml.
set -euo pipefail
cd "$(dirname "$0")/../.."
make matrix
