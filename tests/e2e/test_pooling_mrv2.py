"""MRV2 pooling, part 1 (patches 0002, 0003, 0011): what the validation
matrix's rows (``tests/e2e/test_matrix.py``, generated from
``scripts/validation/matrix/rows.py``) do not cover: a task MRV2 cannot serve
refused per request and at start-up, and batches as users send them (many
requests in one step, prompt lengths up to ``max_model_len``, arrivals across
steps, aborts, chunked prefill, the chunking flags of an encoder), through
the engine on the CPU against transformers / sentence-transformers on the
same weights (fp32). Every engine is opened by ``vllm_runner``, which asserts
that MRV2 ran (by vLLM's default for ``default``, as asked for ``v2``)."""

from __future__ import annotations

import random
import subprocess
import sys

import numpy as np
import pytest

from scripts.series.base import REPO
from scripts.validation.engine import (embed, forward, hf_last_token_embed, hf_mean_embed, l2_normalize,
                                       rowwise_cosine, st_embed, vllm_runner)
from scripts.validation.checkpoints.models import minilm_path
from scripts.validation.checkpoints.zoo import make_tiny_qwen3
from tests.e2e.support import drain, random_prompt

TOL = 1e-4
MIN_COSINE = 0.99999


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory):
    return make_tiny_qwen3(tmp_path_factory.mktemp("models") / "tiny-qwen3")


# --- refusals ----------------------------------------------------------------------------


# The 0.26.0 line's rule (patch 0011): MRV2 serves token-level tasks for encoder-only models
# only. From 0.28.0 upstream's pooling runner serves a decoder's token tasks on MRV2.
@pytest.mark.line("0.26.0")
def test_unsupported_task_is_refused_while_engine_serves_others(qwen3):
    """token_classify and token_embed on a decoder: each refused for that
    request, with the task, the supported tasks and the fallback; a request
    already queued and one sent after them are served."""
    from vllm import PoolingParams
    from vllm.exceptions import VLLMValidationError

    prompts = [[1000 + i for i in range(n)] for n in (5, 9)]

    def scenario(llm):
        eng = llm.llm_engine
        eng.add_request("good-0", {"prompt_token_ids": prompts[0]}, PoolingParams(task="embed"))
        messages = {}
        for task in ("token_classify", "token_embed"):
            with pytest.raises(VLLMValidationError) as e:
                eng.add_request(f"bad-{task}", {"prompt_token_ids": prompts[0]}, PoolingParams(task=task))
            messages[task] = str(e.value)
        eng.add_request("good-1", {"prompt_token_ids": prompts[1]}, PoolingParams(task="embed"))
        outs = {}
        while eng.has_unfinished_requests():
            outs.update({o.request_id: o for o in eng.step() if o.finished})
        return messages, outs

    with vllm_runner(qwen3, "v2") as llm:
        messages, outs = scenario(llm)
    for task, message in messages.items():
        assert message.startswith(f"Unsupported task: '{task}' Supported tasks: ['embed']")
        assert "VLLM_USE_V2_MODEL_RUNNER=0" in message and "parameter=task" in message
    assert sorted(outs) == ["good-0", "good-1"]
    ref = hf_last_token_embed(qwen3, prompts)
    got = np.stack([outs[f"good-{i}"].outputs.data.numpy() for i in range(2)])
    np.testing.assert_allclose(got, ref, rtol=0, atol=TOL)


@pytest.mark.line("0.26.0")
def test_startup_with_task_mrv2_cannot_serve_fails_clearly(qwen3):
    """A decoder configured for token_classify does not start on a forced
    MRV2 (patch 0011); the error names the task and the fallback."""
    code = (
        "import sys; sys.path.insert(0, %r)\n"
        "from scripts.validation.engine import open_llm\n"
        "if __name__ == '__main__':\n"
        "    try:\n"
        "        open_llm(%r, runner='v2', pooler_config={'task': 'token_classify'})\n"
        "    except Exception as e:\n"
        "        print('STARTUP FAILED', type(e).__name__, e)\n"
        "    else:\n"
        "        print('STARTED')\n"
    ) % (str(REPO), str(qwen3))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert "STARTUP FAILED" in out and "STARTED\n" not in out
    assert "Model Runner V2 does not yet support: the configured pooling task 'token_classify'" in out
    assert "VLLM_USE_V2_MODEL_RUNNER=0" in out


# --- batches as users send them ----------------------------------------------------------


def test_encoder_batches_lengths_arrivals_params_aborts(monkeypatch):
    """MiniLM on MRV2: 256 requests in one step; prompt lengths 1 to
    max_model_len (256); requests arriving across steps; normalised and raw
    embeddings in one batch; aborts in the middle of a batch.

    The engine core runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0),
    so a step schedules exactly what was added before it."""
    from vllm import PoolingParams

    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    rng = random.Random(0)
    many = [random_prompt(rng, rng.randrange(4, 24)) for _ in range(256)]
    lengths = [random_prompt(rng, n) for n in (1, 2, 3, 17, 64, 255, 256)]
    first = [random_prompt(rng, rng.randrange(5, 40)) for _ in range(10)]
    later = [random_prompt(rng, rng.randrange(5, 40)) for _ in range(10)]
    doomed = [random_prompt(rng, rng.randrange(5, 40)) for _ in range(5)]

    def scenario(llm):
        eng = llm.llm_engine
        for i, p in enumerate(many):
            eng.add_request(f"many-{i}", {"prompt_token_ids": p}, PoolingParams(task="embed"))
        many_out, many_steps = drain(eng)
        for i, p in enumerate(lengths):
            eng.add_request(f"len-{i}", {"prompt_token_ids": p}, PoolingParams(task="embed"))
        len_out, _ = drain(eng)
        for i, p in enumerate(first):
            eng.add_request(f"first-{i}", {"prompt_token_ids": p}, PoolingParams(task="embed"))
        mixed = {o.request_id: o for o in eng.step() if o.finished}
        for i, p in enumerate(later):  # half raw, half normalised, arriving now
            params = PoolingParams(task="embed", use_activation=(i % 2 == 0))
            eng.add_request(f"later-{i}", {"prompt_token_ids": p}, params)
        for i, p in enumerate(doomed):
            eng.add_request(f"doomed-{i}", {"prompt_token_ids": p}, PoolingParams(task="embed"))
        eng.abort_request([f"doomed-{i}" for i in range(0, 5, 2)])
        rest, _ = drain(eng)
        mixed.update(rest)
        return many_out, many_steps, len_out, mixed

    with vllm_runner(minilm_path(), "v2", max_num_seqs=256, max_num_batched_tokens=16384) as llm:
        many_out, many_steps, len_out, mixed = scenario(llm)

    assert max(many_steps) == 256  # all 256 finished in one engine step
    got = np.stack([many_out[f"many-{i}"].outputs.data.numpy() for i in range(256)])
    np.testing.assert_allclose(got, hf_mean_embed(minilm_path(), many), rtol=0, atol=TOL)

    got = np.stack([len_out[f"len-{i}"].outputs.data.numpy() for i in range(len(lengths))])
    np.testing.assert_allclose(got, hf_mean_embed(minilm_path(), lengths), rtol=0, atol=TOL)

    expected = {f"first-{i}" for i in range(10)} | {f"later-{i}" for i in range(10)} \
        | {f"doomed-{i}" for i in (1, 3)}
    assert set(mixed) == expected
    raw = np.stack([h.mean(axis=0) for h in forward(minilm_path(), later)])
    for i in range(10):
        want = l2_normalize(raw[i]) if i % 2 == 0 else raw[i]
        np.testing.assert_allclose(mixed[f"later-{i}"].outputs.data.numpy(), want, rtol=0, atol=TOL)
    got = np.stack([mixed[f"first-{i}"].outputs.data.numpy() for i in range(10)])
    np.testing.assert_allclose(got, hf_mean_embed(minilm_path(), first), rtol=0, atol=TOL)


def test_decoder_chunked_prefill_with_abort_and_slot_reuse(qwen3, monkeypatch):
    """Qwen3 on MRV2 with 64-token steps: long prompts span several steps; two
    are aborted mid-prefill; the rest and later requests (reusing their
    slots) match transformers. Engine core in this process, as above."""
    from vllm import PoolingParams

    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    rng = random.Random(1)
    long = [random_prompt(rng, n) for n in (150, 300, 90, 200, 70, 500)]
    after = [random_prompt(rng, rng.randrange(3, 120)) for _ in range(8)]

    def scenario(llm):
        eng = llm.llm_engine
        for i, p in enumerate(long):
            eng.add_request(f"long-{i}", {"prompt_token_ids": p}, PoolingParams(task="embed"))
        outs = {o.request_id: o for o in eng.step() if o.finished}
        eng.abort_request(["long-1", "long-3"])
        more, steps = drain(eng)
        outs.update(more)
        for i, p in enumerate(after):
            eng.add_request(f"after-{i}", {"prompt_token_ids": p}, PoolingParams(task="embed"))
        more, _ = drain(eng)
        outs.update(more)
        return outs, steps

    with vllm_runner(qwen3, "v2", max_num_batched_tokens=64, max_num_seqs=8, enable_chunked_prefill=True) as llm:
        outs, steps = scenario(llm)
    assert len(steps) >= 5  # 1,010 prompt tokens left in 64-token steps
    assert set(outs) == {f"long-{i}" for i in (0, 2, 4, 5)} | {f"after-{i}" for i in range(8)}
    kept = [long[i] for i in (0, 2, 4, 5)]
    got = np.stack([outs[f"long-{i}"].outputs.data.numpy() for i in (0, 2, 4, 5)])
    np.testing.assert_allclose(got, hf_last_token_embed(qwen3, kept), rtol=0, atol=TOL)
    got = np.stack([outs[f"after-{i}"].outputs.data.numpy() for i in range(8)])
    np.testing.assert_allclose(got, hf_last_token_embed(qwen3, after), rtol=0, atol=TOL)


def test_encoder_only_with_chunking_flags_set_runs_on_mrv2(sts):
    """Patch 0002: MiniLM with enable_chunked_prefill and enable_prefix_caching
    set explicitly runs on MRV2 by default, as without them (the engine turns
    chunked prefill off for a model without KV-cache groups); the same
    sentences sent twice (a prefix cache would hit the second time) give
    sentence-transformers' embeddings both times."""
    sentences = sts.sentences[:64]

    def twice(llm):
        return embed(llm, sentences)[0], embed(llm, sentences)[0]

    with vllm_runner(minilm_path(), "default", enable_chunked_prefill=True, enable_prefix_caching=True) as llm:
        first, second = twice(llm)
    ref = st_embed(minilm_path(), sentences)
    assert rowwise_cosine(first, ref).min() >= MIN_COSINE
    np.testing.assert_allclose(second, first, rtol=0, atol=TOL)
