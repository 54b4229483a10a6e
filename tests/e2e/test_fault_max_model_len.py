"""Issue 18, item 1 (patch 0020): a pooling prompt of exactly
``max_model_len`` tokens finishes when it is chunked.

Tiny Qwen3 embedder (last-token pooling, normalised), ``max_model_len=64``,
``max_num_batched_tokens=16``, chunked prefill and prefix caching on: before
0020 the 64-token prompt was scheduled forever on V1 and MRV2 alike (the
scheduler kept room for a sampled token). Each engine embeds prompts of 64,
63 and 17 tokens twice (the second time from the prefix cache) and must
return transformers' values within 1e-4, inside a generous time limit so
that a hang fails the test instead of blocking the run."""

from __future__ import annotations

import random

import numpy as np
import pytest

from scripts.validation.engine import hf_last_token_embed, vllm_runner
from scripts.validation.checkpoints.zoo import make_tiny_qwen3
from tests.e2e.support import call_within

MAX_MODEL_LEN = 64
TOL = 1e-4
# Seconds for one embed call of a few prompts; a healthy call takes well
# under a second, a hang never ends.
TIMEOUT = 300


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return make_tiny_qwen3(tmp_path_factory.mktemp("fault-max-len") / "tiny-qwen3")


@pytest.fixture(scope="module", params=["v2", "v1"])
def engine(request, model):
    """The tiny Qwen3 on MRV2 (asked) or V1 (``vllm_runner`` asserts which ran), 16-token steps."""
    with vllm_runner(model, request.param, max_model_len=MAX_MODEL_LEN, max_num_batched_tokens=16,
                     enable_chunked_prefill=True, enable_prefix_caching=True) as llm:
        assert llm.llm_engine.vllm_config.scheduler_config.enable_chunked_prefill
        yield llm


def test_prompt_of_max_model_len_finishes_with_transformers_value(engine, model):
    rng = random.Random(18)
    prompts = [[rng.randrange(1000, 30000) for _ in range(n)] for n in (MAX_MODEL_LEN, MAX_MODEL_LEN - 1, 17)]
    ref = hf_last_token_embed(model, prompts)
    for attempt in ("computed", "from the prefix cache"):
        outputs = call_within(lambda: engine.embed([{"prompt_token_ids": p} for p in prompts],
                                                   use_tqdm=False), TIMEOUT)
        got = np.asarray([o.outputs.embedding for o in outputs], dtype=np.float32)
        assert got.shape == ref.shape, attempt
        np.testing.assert_allclose(got, ref, rtol=0, atol=TOL, err_msg=str(attempt))
