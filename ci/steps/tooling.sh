#!/usr/bin/env bash
# Lint (ruff on our Python; series listing, DEP-3 headers, strict apply to both flavors), then the
# tooling tests: fetch/verify, apply, refresh, wheel version/RECORD/reproducibility.
set -euo pipefail
cd "$(dirname "$0")/../.."
make lint
make test-not-e2e PYTEST_ARGS="--junitxml=reports/junit-tooling.xml"
