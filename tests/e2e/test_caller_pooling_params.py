"""The offline API leaves the caller's ``PoolingParams`` as they were
(issue 28 item 5). On the base ``LLM.score`` wrote its task into the caller's
object, ``LLM.embed`` / ``LLM.encode`` / ``LLM.classify`` did the same, and
the engine (``LLMEngine.add_request``) wrote the task it chose and the
model's defaults into it before making its own copy: an object reused for
another call, task or model then carried them (``LLM.classify`` after
``LLM.score`` with the same object: "You cannot overwrite
param.task='embed'..."). all-MiniLM-L6-v2 (real weights) on both runners,
values against sentence-transformers; the engine runs in the test's process,
so the worker sees what the engine core sends it."""

from __future__ import annotations

import numpy as np
import pytest

from scripts.validation.engine import embed, rowwise_cosine, st_embed, vllm_runner
from scripts.validation.checkpoints.models import minilm_path

QUERY = "A man is playing a guitar."
DOCS = ["A man plays the guitar.", "A woman is slicing an onion.", "The cat sleeps on the sofa."]
MIN_COSINE = 0.99999


def test_offline_calls_leave_the_callers_pooling_params_as_they_were_on_mrv2(in_process):
    check_callers_pooling_params("default")


@pytest.mark.v1
def test_offline_calls_leave_the_callers_pooling_params_as_they_were_on_v1(in_process):
    check_callers_pooling_params("v1")


def check_callers_pooling_params(runner: str) -> None:
    """The calls of the module docstring on ``runner`` (``vllm_runner``'s
    choice, which it asserts ran)."""
    from vllm import PoolingParams

    model = minilm_path()
    ref = st_embed(model, [QUERY, *DOCS])
    ref_scores = ref[1:] @ ref[0]  # sentence-transformers' vectors are unit length
    # an encoder-only model keeps no KV cache: a small reservation leaves the machine's memory to others
    with vllm_runner(model, runner, gpu_memory_utilization=0.1) as llm:  # asserts the runner that ran
        given = PoolingParams()
        scores = [o.outputs.score for o in llm.score(QUERY, DOCS, pooling_params=given, use_tqdm=False)]
        assert given == PoolingParams()
        np.testing.assert_allclose(scores, ref_scores, rtol=0, atol=1e-5)

        got, _ = embed(llm, [QUERY, *DOCS], pooling_params=given)
        assert given == PoolingParams()
        assert rowwise_cosine(got, ref).min() >= MIN_COSINE

        per_prompt = [PoolingParams(), PoolingParams(use_activation=False)]
        out = llm.embed([QUERY, DOCS[0]], pooling_params=per_prompt, use_tqdm=False)
        assert per_prompt == [PoolingParams(), PoolingParams(use_activation=False)]
        raw = out[1].outputs.embedding
        assert abs(float(np.linalg.norm(raw)) - 1.0) > 1e-3  # use_activation=False: not normalised

        # the engine's own entry: the caller's object keeps its unset task and defaults
        engine = llm.llm_engine
        direct = PoolingParams()
        engine.add_request("direct", {"prompt_token_ids": [101, 7592, 2088, 102]}, direct)
        while engine.has_unfinished_requests():
            engine.step()
        assert direct == PoolingParams()

        # the same object serves another call afterwards
        again = [o.outputs.score for o in llm.score(QUERY, DOCS, pooling_params=given, use_tqdm=False)]
        np.testing.assert_allclose(again, scores, rtol=0, atol=1e-6)
