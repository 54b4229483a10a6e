#!/usr/bin/env bash
# The patched engine on the CPU against transformers / sentence-transformers,
# and the smoke job over the STS-B test sentences.
set -euo pipefail
cd "$(dirname "$0")/../.."
make test-e2e PYTEST_ARGS="--junitxml=reports/junit-e2e.xml"
make smoke
