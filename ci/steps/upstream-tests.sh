#!/usr/bin/env bash
# Upstream vLLM's own pooling tests from the current line's pinned sdist, unmodified,
# offline, against the line's tree; each failure again on unpatched vLLM of the same
# release (scripts/validation/upstream_pooling.py). Exit status 1 when a test fails
# only on the line. Reports in reports/upstream-pooling.{md,json}, pytest's output
# in reports/logs/upstream-pooling.log.
set -euo pipefail
cd "$(dirname "$0")/../.."
make upstream-tests
