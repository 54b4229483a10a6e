#!/usr/bin/env bash
# The whole validation matrix on the CPU: the base registry's pooling
# architectures (inventory), every instantiable one on its default runner
# (MRV2 unless vLLM's selector keeps it on V1) and on V1 against transformers,
# the runner-selection rows, all-MiniLM-L6-v2 and MTEB STS. Reports in
# reports/matrix.{md,json} and reports/matrix-junit.xml.
set -euo pipefail
cd "$(dirname "$0")/../.."
make matrix
