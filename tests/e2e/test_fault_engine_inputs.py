"""Issue 28, item 1, offline and at start-up: input that took the whole
engine down.

- Token ids outside the vocabulary ([0, 30522) for every model here, all on
  MiniLM's word pieces): ``-1`` raised ``IndexError`` in the embedding layer
  and killed the engine, ``30522`` (the vocabulary size) was embedded from a
  padding row. Every offline entry that takes token ids (``LLM.embed``,
  ``LLM.encode``, ``LLM.classify``, ``LLMEngine.add_request``) must raise
  vLLM's ``VLLMValidationError`` (a ``ValueError`` up to 0.26.0, a
  ``VLLMClientError`` from 0.27.0: the server's 400) naming the id and the range, and the engine must keep
  serving: the next request gets transformers' value.
- An encoder-only model (no chunked prefill: bidirectional attention needs
  whole prompts) started with ``enable_chunked_prefill=True`` and a step
  budget below ``max_model_len`` accepted prompts it could never schedule
  and waited forever; without the flag the same configuration is refused at
  start-up. It must be refused at start-up the same way; with
  ``max_model_len`` within the budget it serves, and an over-long prompt is
  refused at once. ``long_prefill_token_threshold`` must not cut such a
  model's prompts either (it killed the engine on both runners).

MRV2 (vLLM's default, asserted by ``vllm_runner``) and V1, fp32,
transformers references (1e-4). Engines in this process (``in_process``)."""

from __future__ import annotations

import os
import random

import numpy as np
import pytest

from scripts.common.environ import environ
from scripts.series.lines import get_line
from scripts.validation.engine import close_llm, hf_mean_embed, open_llm, vllm_runner
from scripts.validation.checkpoints.models import MINILM_VOCAB, MODELS, minilm_path
from scripts.validation.checkpoints.zoo import make_tiny_bert
from scripts.validation.references import classify, embed
from tests.e2e.support import call_within

TOL = 1e-4
GOOD = [101, 1037, 4937, 102]  # "a cat"
BAD = {"-1": ([101, -1, 102], -1), "vocabulary size": ([101, 2023, MINILM_VOCAB, 102], MINILM_VOCAB)}
RANGE = f"[0, {MINILM_VOCAB})"
BUDGET = 32
# How the line's base words the refusal of a 40-token prompt over max_model_len=32
# (the renderer's check; upstream reworded it after 0.26.0).
TOO_LONG = {
    "0.26.0": rf"maximum context length is {BUDGET} tokens. However, you requested 0 output tokens and your "
              r"prompt contains 40 input tokens, for a total of 40 tokens\.",
    "0.32.0": rf"maximum context length is {BUDGET} tokens. However, your prompt contains 40 input tokens, "
              r"which exceeds this limit even without any output tokens\.",
}
TOO_LONG["0.34.0"] = TOO_LONG["0.32.0"]  # 0.34.0 words it as 0.32.0 ("at least" only for max + 1 tokens)
TOO_LONG = TOO_LONG[get_line().name]


@pytest.fixture(scope="module", params=["default", "v1"])
def runner(request):
    return request.param


@pytest.fixture(scope="module")
def classifier():
    return make_tiny_bert(MODELS / "tiny-bert-seq-cls", head="seq_cls", num_labels=3)


@pytest.fixture(scope="module")
def encoder():
    return make_tiny_bert(MODELS / "tiny-bert-base")


def tokens(*prompts):
    return [{"prompt_token_ids": list(p)} for p in prompts]


def assert_refused(name, call, case):
    """``call(prompts)`` (the entry ``name``) for a good prompt and the bad
    one of ``case`` raises a VLLMValidationError naming the bad id and the range."""
    from vllm.exceptions import VLLMValidationError

    ids, bad = BAD[case]
    with pytest.raises(VLLMValidationError) as e:
        call(tokens(GOOD, ids))
    assert f"Token id {bad} is out of vocabulary" in str(e.value), name
    assert RANGE in str(e.value), name


def test_token_ids_outside_the_vocabulary_embed_encode(in_process, runner):
    """MiniLM: ``LLM.embed``, ``LLM.encode`` and ``LLMEngine.add_request``
    refuse each bad id; the engine keeps serving: the good prompts
    ``add_request`` took before each refusal, and the calls after them, give
    transformers' embedding."""
    from vllm import PoolingParams

    with vllm_runner(minilm_path(), runner) as llm:
        engine = llm.llm_engine

        def add_requests(prompts):
            for prompt in prompts:
                engine.add_request(f"r{engine.get_num_unfinished_requests()}", prompt, PoolingParams(task="embed"))

        calls = {"LLM.embed": lambda p: llm.embed(p, use_tqdm=False),
                 "LLM.encode": lambda p: llm.encode(p, pooling_task="embed", use_tqdm=False),
                 "LLMEngine.add_request": add_requests}
        for name, call in calls.items():
            for case in BAD:
                assert_refused(name, call, case)
        done = {}
        while engine.has_unfinished_requests():
            done.update({o.request_id: o for o in engine.step() if o.finished})
        vector = llm.embed(tokens(GOOD), use_tqdm=False)[0].outputs.embedding
        encoded = llm.encode(tokens(GOOD), pooling_task="embed", use_tqdm=False)[0].outputs.data
    assert sorted(done) == ["r0", "r1"]  # one good prompt added before each refused one
    want = hf_mean_embed(minilm_path(), [GOOD])[0]
    for output in done.values():
        np.testing.assert_allclose(output.outputs.data.numpy(), want, rtol=0, atol=TOL)
    np.testing.assert_allclose(np.asarray(vector), want, rtol=0, atol=TOL)
    np.testing.assert_allclose(encoded.numpy(), want, rtol=0, atol=TOL)


def test_token_ids_outside_the_vocabulary_classify(in_process, runner, classifier):
    """A tiny BERT classifier: ``LLM.classify`` refuses each bad id; then the
    good prompt's probabilities equal transformers'."""
    with vllm_runner(classifier, runner) as llm:
        for case in BAD:
            assert_refused("LLM.classify", lambda p: llm.classify(p, use_tqdm=False), case)
        probs = llm.classify(tokens(GOOD), use_tqdm=False)[0].outputs.probs
    np.testing.assert_allclose(probs, classify(classifier, [GOOD])[0], rtol=0, atol=TOL)


def test_encoder_only_budget_below_max_model_len_refused_at_startup(in_process, runner, encoder):
    """``enable_chunked_prefill=True``, ``max_num_batched_tokens=32``, the
    model's 512 positions: ``LLM(...)`` fails at start-up with the error the
    base gives without the flag, and says why the flag does not help. (In
    this process the engine core's error reaches the caller; a separate
    engine core process logs it, and ``vllm serve`` shows it:
    ``test_fault_server_budget.py``.)"""
    from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

    try:  # open_llm sets the runner's VLLM_USE_V2_MODEL_RUNNER; restored after, as vllm_runner does
        with environ(VLLM_USE_V2_MODEL_RUNNER=os.environ.get("VLLM_USE_V2_MODEL_RUNNER")):
            close_llm(open_llm(encoder, runner, enable_chunked_prefill=True, max_num_batched_tokens=BUDGET))
    except ValueError as e:
        cleanup_dist_env_and_memory()  # the worker of the refused engine had set it up
        message = str(e)
    else:
        pytest.fail("the engine started")
    assert message.startswith(f"max_num_batched_tokens ({BUDGET}) is smaller than max_model_len (512)")
    assert "Chunked prefill, which was enabled, cannot help: this model's prompts cannot run in chunks" in message


def test_encoder_only_budget_holding_max_model_len_serves_and_refuses_longer(in_process, runner, encoder):
    """The same flags with ``max_model_len=32``: it starts, prompts of up to
    32 tokens get transformers' CLS embeddings, a 40-token prompt is refused
    at once (a hang fails the test instead of blocking the run)."""
    from vllm.exceptions import VLLMValidationError

    rng = random.Random(28)
    prompts = [[101] + [rng.randrange(1000, 29000) for _ in range(n - 2)] + [102] for n in (BUDGET, 17, BUDGET, 5)]
    with vllm_runner(encoder, runner, enable_chunked_prefill=True, max_num_batched_tokens=BUDGET,
                     max_model_len=BUDGET) as llm:
        got = call_within(lambda: llm.embed(tokens(*prompts), use_tqdm=False), 300)
        with pytest.raises(VLLMValidationError, match=TOO_LONG):
            llm.embed(tokens([101] + [2000] * 38 + [102]), use_tqdm=False)
    want = np.stack(embed(encoder, prompts, pooling="CLS"))
    np.testing.assert_allclose(np.asarray([o.outputs.embedding for o in got]), want, rtol=0, atol=TOL)


def test_long_prefill_threshold_does_not_cut_encoder_prompts(in_process, runner, encoder):
    """``long_prefill_token_threshold=16`` on an encoder-only model: its
    50-token prompts run whole (before, the scheduler cut them and the
    worker failed: MRV2 'scheduled part of a prompt', V1 'partial prefill is
    not supported with CLS pooling')."""
    rng = random.Random(29)
    prompts = [[101] + [rng.randrange(1000, 29000) for _ in range(48)] + [102] for _ in range(3)]
    with vllm_runner(encoder, runner, long_prefill_token_threshold=16) as llm:
        got = call_within(lambda: llm.embed(tokens(*prompts), use_tqdm=False), 300)
    want = np.stack(embed(encoder, prompts, pooling="CLS"))
    np.testing.assert_allclose(np.asarray([o.outputs.embedding for o in got]), want, rtol=0, atol=TOL)
