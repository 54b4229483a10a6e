"""The CPU wheel stays a general vLLM: a generating model on MRV2 without
Triton (on the 0.34.0 line upstream's standalone CPU runner, which its
patches 0065 and 0066 bring to x86) gives transformers' greedy tokens.

A tiny random-weight Qwen3 (``make_tiny_qwen3``), fp32, greedy decoding
(``temperature=0``) of 24 new tokens for four prompts, ``ignore_eos`` so that
every prompt yields all of them; the reference is transformers'
``generate(do_sample=False)`` of the same checkpoint. The engine runs in a
child process (vLLM decides ``HAS_TRITON`` at import, and a generating
model's engine core runs in a process of its own)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from scripts.series.base import REPO

pytestmark = [pytest.mark.e2e, pytest.mark.line("0.34.0")]

PROMPTS = ["hello world", "The capital of France is", "1 2 3 4", "vLLM on a CPU"]
NEW_TOKENS = 24

ENGINE = """
import json, sys
sys.path.insert(0, {repo!r})
from scripts.validation.engine import GPU_MEMORY_UTILIZATION, assert_runner, close_llm, engine_env, input_preparation

if __name__ == "__main__":
    engine_env()
    from vllm import LLM, SamplingParams
    llm = LLM(model={model!r}, runner="generate", dtype="float32", enforce_eager=True,
              gpu_memory_utilization=GPU_MEMORY_UTILIZATION, seed=0)
    assert_runner(llm, "MRV2")  # and the input preparation this machine should use
    out = llm.generate({prompts!r}, SamplingParams(max_tokens={new}, temperature=0, ignore_eos=True))
    print("RESULT", json.dumps({{"preparation": input_preparation(llm),
                                 "tokens": [list(o.outputs[0].token_ids) for o in out]}}))
    close_llm(llm)
"""


def transformers_greedy(model) -> list[list[int]]:
    """transformers' greedy continuation (token ids, ``NEW_TOKENS`` each) of
    every prompt, one prompt at a time (no padding), fp32 on the CPU."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model)
    hf = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
    result = []
    with torch.no_grad():
        for prompt in PROMPTS:
            ids = tokenizer(prompt, return_tensors="pt").input_ids
            out = hf.generate(ids, do_sample=False, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                              pad_token_id=tokenizer.pad_token_id or 0)
            result.append(out[0, ids.shape[1]:].tolist())
    return result


def test_tiny_qwen3_greedy_tokens_are_transformers(tmp_path):
    from scripts.validation.checkpoints.zoo import make_tiny_qwen3
    from scripts.validation.engine import expected_input_preparation

    model = str(make_tiny_qwen3(tmp_path / "qwen3"))
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "VLLM_USE_V2_MODEL_RUNNER")}
    script = ENGINE.format(repo=str(REPO), model=model, prompts=PROMPTS, new=NEW_TOKENS)
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    (line,) = [s for s in proc.stdout.splitlines() if s.startswith("RESULT ")]
    got = json.loads(line.removeprefix("RESULT "))
    assert got["preparation"] == expected_input_preparation() == "native"
    assert got["tokens"] == transformers_greedy(model)
