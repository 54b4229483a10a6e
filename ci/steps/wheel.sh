#!/usr/bin/env bash
# Build the distribution wheel of one flavor (cpu or cuda) into dist/.
set -euo pipefail
cd "$(dirname "$0")/../.."
flavor="${1:?usage: ci/steps/wheel.sh cpu|cuda}"
make wheel FLAVOR="$flavor"
ls -l dist/
