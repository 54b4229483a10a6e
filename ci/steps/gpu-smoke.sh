#!/usr/bin/env bash
# The GPU smoke job, on an agent of the `gpu` queue (NVIDIA GPU and driver):
# `make gpu-smoke` builds the CUDA wheel into its own venv and runs
# scripts/validation/gpu_smoke.py: MRV2 with CUDA graphs and V1 against transformers
# (reports/gpu-smoke.{json,md} and gpu-smoke-junit.xml).
# Exit status 77: the agent has no GPU. The job is then reported as skipped (an
# annotation, and a JUnit test case marked skipped), never as passed, and ends
# with 77, on which the step soft-fails. Reports go to $GPU_SMOKE_OUT (reports/).
set -uo pipefail
cd "$(dirname "$0")/../.."
export GPU_SMOKE_OUT="${GPU_SMOKE_OUT:-$PWD/reports}"

python3 -m scripts.validation.gpu_smoke --check-gpu
status=$?
if [ "$status" -eq 77 ]; then
  if command -v buildkite-agent >/dev/null 2>&1; then
    buildkite-agent annotate --style warning --context gpu-smoke \
      "GPU smoke job **skipped**: agent $(hostname) has no GPU (reports/gpu-smoke.json)."
  fi
  exit 77
fi
[ "$status" -eq 0 ] || exit "$status"
make gpu-smoke GPU_SMOKE_OUT="$GPU_SMOKE_OUT"
