"""Runner selection through the engine, without and with Triton.

- Patch 0008: where Triton has no backend (this CPU, ``TRITON_INTERPRET``
  unset) a pooling model still runs on MRV2, by default, with native
  input preparation, and says so in the log; a generation model keeps the
  base behaviour (V1, with upstream's warning).
- Where Triton works (here: its interpreter, ``TRITON_INTERPRET=1``) MRV2 keeps
  its Triton kernels: the native path is not announced.
- From 0.34.0 (no V1, 0008 withdrawn) the pooling model runs on upstream's
  standalone CPU runner without Triton (0066) and on the Triton runner under
  the interpreter (0001); ``vllm_runner`` asserts the runner and the input
  preparation of each; generation without Triton is
  ``tests/e2e/test_generation_greedy.py``'s.

Each case runs in a fresh process: vLLM decides ``HAS_TRITON`` at import.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from scripts.series.base import REPO
from scripts.series.lines import get_line

# The lines whose runner selection is 0008's (V1 fallback, its log lines)
SELECTION_0008 = get_line().name in ("0.26.0", "0.32.0")

NATIVE_LOG = "Model Runner V2 prepares inputs with native CPU kernels instead (pooling steps only"
V1_FALLBACK_LOG = "Model Runner V2 requires Triton; using the V1 model runner instead."
INTERPRETER_LOG = "TRITON_INTERPRET=1: running Triton kernels under Triton's interpreter"

POOLING = """
import sys
sys.path.insert(0, {repo!r})
from scripts.validation.engine import embed, rowwise_cosine, runner_in_use, st_embed, vllm_runner
from scripts.validation.checkpoints.models import minilm_path, sts_test

if __name__ == "__main__":
    sentences = sts_test().sentences[:64]
    with vllm_runner(minilm_path(), runner="default") as llm:  # asserts MRV2 and its input preparation
        print("RUNNER", runner_in_use(llm))
        got, _ = embed(llm, sentences)
    print("MIN_COSINE", float(rowwise_cosine(got, st_embed(minilm_path(), sentences)).min()))
"""

GENERATION = """
import sys, tempfile
from pathlib import Path
sys.path.insert(0, {repo!r})
from scripts.validation.engine import GPU_MEMORY_UTILIZATION, close_llm, engine_env, runner_in_use
from scripts.validation.checkpoints.zoo import make_tiny_qwen3

if __name__ == "__main__":
    engine_env()
    from vllm import LLM, SamplingParams
    with tempfile.TemporaryDirectory() as tmp:
        path = make_tiny_qwen3(Path(tmp) / "qwen3")
        llm = LLM(model=str(path), runner="generate", dtype="float32", enforce_eager=True,
                  gpu_memory_utilization=GPU_MEMORY_UTILIZATION, seed=0)
        print("RUNNER", runner_in_use(llm), llm.llm_engine.vllm_config.use_v2_model_runner)
        out = llm.generate(["hello world"], SamplingParams(max_tokens=4, temperature=0))
        print("TOKENS", len(out[0].outputs[0].token_ids))
        close_llm(llm)
"""


def run(script: str, interpret: bool) -> tuple[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("TRITON_INTERPRET", "VLLM_USE_V2_MODEL_RUNNER")}
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    proc = subprocess.run([sys.executable, "-c", script.format(repo=str(REPO))], env=env,
                          capture_output=True, text=True, timeout=900)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    return proc.stdout, out


@pytest.mark.parametrize("interpret", [False, True], ids=["no-triton", "triton-interpreter"])
def test_pooling_model_runs_mrv2_by_default(interpret):
    stdout, out = run(POOLING, interpret)
    assert "RUNNER MRV2" in stdout
    if SELECTION_0008:
        assert V1_FALLBACK_LOG not in out
        assert (NATIVE_LOG in out) is not interpret
    assert (INTERPRETER_LOG in out) is interpret
    cos = float(stdout.split("MIN_COSINE")[1].split()[0])
    assert cos >= 0.99999


@pytest.mark.line("0.26.0", "0.32.0")  # 0.34.0 has no V1: test_generation_greedy.py
def test_generation_model_without_triton_falls_back_to_v1():
    stdout, out = run(GENERATION, interpret=False)
    assert V1_FALLBACK_LOG in out
    assert NATIVE_LOG not in out
    assert "RUNNER V1 False" in stdout
    assert "TOKENS 4" in stdout
