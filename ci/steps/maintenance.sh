#!/usr/bin/env bash
# Every maintenance line (patches/lines.toml): its lint, its whole test suite and
# its smoke job and its whole validation matrix (make test of the current line runs only their share:
# unit tests, one matrix row per family, the smoke job). Reports per line.
set -euo pipefail
cd "$(dirname "$0")/../.."
for line in $(python3 -m scripts.series.lines maintenance); do
  echo "--- maintenance line $line"
  make LINE="$line" lint
  make LINE="$line" test PYTEST_ARGS="--junitxml=reports/junit-$line.xml"
  make LINE="$line" smoke
  mv reports/smoke.json "reports/smoke-$line.json"
  make LINE="$line" matrix
  for f in reports/matrix.md reports/matrix.json reports/matrix-junit.xml; do
    mv "$f" "${f/matrix/matrix-$line}"
  done
done
