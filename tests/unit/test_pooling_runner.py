"""PoolingRunner (MRV2) on CPU tensors: task sets, metadata of mixed batches,
removal on finish and abort, late interaction. On the 0.26.0 line the runner
is its patches' (0003, 0004, 0006, 0011, 0012), on the 0.32.0 line
upstream's (PR 50574, from 0.27.0) with the 0.32.0 line's 0006. A stand-in
model whose pooler records what it is given; stand-ins for the configs, the
input batch and the request state carry only the fields PoolingRunner reads.
The runner is built as upstream PR 50574 builds it,
``PoolingRunner(model, vllm_config)``.

The tests named ``test_behaviour_*`` and the late-interaction tests are what
the lines' tests.toml map: they use only names upstream's MRV2 PoolingRunner
has too (``add_request``, ``remove_request``, ``pool``, ``supported_tasks``,
``on_requests_finished``, ``late_interaction_runner``), so that ``python -m
scripts.series.drift test-upstream`` can run them on unpatched releases. The
others pin the implementation's details (error texts, token-id padding).
Where the lines differ: the 0.26.0 line's runner serves token-level tasks
for encoder-only models only (upstream's did up to 0.27.1; from 0.28.0 it
serves decoders' too), and refuses a request for a task it does not serve
with a ``VLLMValidationError`` of its own; each line's rule is tested on its
line (``line`` marker). Upstream's own tests of PR 50574 run in
test_upstream_pr50574.py.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from vllm.config import ModelConfig
from vllm.model_executor.layers.pooler.common import PoolingParamsUpdate
from vllm.pooling_params import PoolingParams
from vllm.v1.pool.late_interaction import (build_late_interaction_doc_params,
                                           build_late_interaction_query_params)
from vllm.v1.worker.gpu.model_runner import GPUModelRunner
from vllm.v1.worker.gpu.pool.pooling_runner import PoolingRunner

from scripts.series.lines import get_line
from scripts.validation.stand_ins import StandInPoolingModel
from tests.unit.upstream_names import pooling_runner_tasks

VOCAB = 50
MAX_REQS = 8
LINE = get_line().name

# The 0.26.0 line's rule (its patches 0004 and 0011): MRV2 serves token-level tasks for
# encoder-only models only. Upstream's pooling runner serves decoders' token tasks from 0.28.0.
ONLY_ENCODERS_TOKEN_TASKS = pytest.mark.line("0.26.0")
# Upstream's rule from 0.28.0 (the 0.32.0 and 0.34.0 lines' bases): MRV2 serves decoders' token-level tasks.
DECODERS_TOKEN_TASKS = pytest.mark.line("0.32.0", "0.34.0")


class RecordingPooler:
    """Pools the last token of each request (hidden size 2), or every token for
    token tasks (a list of [n_tokens, 2]), and keeps the metadata."""

    def __init__(self, tasks):
        self.tasks = set(tasks)
        self.calls = []

    def get_supported_tasks(self):
        return self.tasks

    def get_pooling_updates(self, task):
        return PoolingParamsUpdate(requires_token_ids=(task == "classify"))

    def __call__(self, hidden_states, pooling_metadata):
        self.calls.append((hidden_states, pooling_metadata))
        cursor = pooling_metadata.get_pooling_cursor()
        if all(t.startswith("token_") for t in pooling_metadata.tasks):
            return [hidden_states[f:l + 1] for f, l in zip(cursor.first_token_indices_gpu.tolist(),
                                                          cursor.last_token_indices_gpu.tolist())]
        return hidden_states[cursor.last_token_indices_gpu]


def make_runner(attn_type="encoder_only", tasks=("embed", "classify", "token_classify", "token_embed"),
                task=None):
    model = StandInPoolingModel(pooler=RecordingPooler(tasks))
    model_config = SimpleNamespace(attn_type=attn_type, pooler_config=SimpleNamespace(task=task),
                                   architectures=["BertModel"], get_vocab_size=lambda: VOCAB)
    model_config.get_pooling_task = lambda supported: ModelConfig.get_pooling_task(model_config, supported)
    vllm_config = SimpleNamespace(model_config=model_config,
                                  scheduler_config=SimpleNamespace(max_num_seqs=MAX_REQS))
    return PoolingRunner(model, vllm_config), model.pooler


def batch(slots, scheduled, computed, req_ids=None):
    """A step of requests in ``slots`` with ``scheduled`` new tokens each after
    ``computed`` tokens already computed."""
    scheduled = np.asarray(scheduled, dtype=np.int32)
    qsl = np.concatenate([[0], np.cumsum(scheduled)]).astype(np.int32)
    return SimpleNamespace(
        num_reqs=len(slots), req_ids=req_ids or [f"r{s}" for s in slots],
        idx_mapping_np=np.asarray(slots, dtype=np.int32), num_scheduled_tokens=scheduled,
        seq_lens_cpu_upper_bound=torch.from_numpy(scheduled + np.asarray(computed, dtype=np.int32)),
        query_start_loc=torch.from_numpy(qsl), num_tokens=int(qsl[-1]),
    )


def req_states(prompt_lens: dict[int, int]):
    arr = np.zeros(MAX_REQS, dtype=np.int32)
    for slot, n in prompt_lens.items():
        arr[slot] = n
    return SimpleNamespace(prompt_len=SimpleNamespace(np=arr))


@ONLY_ENCODERS_TOKEN_TASKS
def test_decoder_pooler_with_token_tasks_serves_its_sequence_tasks_only():
    """Beyond the behavioural tests below (whole task sets per attention type):
    a decoder pooler offering embed and token_embed serves embed alone."""
    only_embed, _ = make_runner("decoder", tasks=("embed", "token_embed"))
    assert only_embed.supported_tasks == {"embed"}


def test_a_module_without_a_pooler_serves_nothing():
    assert pooling_runner_tasks(torch.nn.Module(), SimpleNamespace(attn_type="decoder")) == []


# The texts of the 0.26.0 line's runner (patches 0003, 0011), whose refusals of a decoder's
# token tasks upstream's runner does not make from 0.28.0.
@pytest.mark.line("0.26.0")
def test_refusal_at_construction_says_what_is_served_and_the_fallback():
    """The whole message of the start-up refusal (the behavioural tests below
    check that it happens, through names upstream has too)."""
    with pytest.raises(ValueError) as e:
        make_runner("decoder", task="token_classify")
    assert str(e.value) == (
        "Model Runner V2 serves the pooling tasks ['classify', 'embed'] for this model, "
        "but it selects 'token_classify' from ['embed', 'classify', 'token_embed', "
        "'token_classify']. Set VLLM_USE_V2_MODEL_RUNNER=0 to use the V1 model runner.")
    with pytest.raises(ValueError) as e:
        make_runner("decoder", tasks=("token_embed",))
    assert str(e.value) == (
        "Model Runner V2 serves the pooling tasks ['classify', 'embed'] for this model, "
        "but it selects 'token_embed' from ['token_embed']. Set VLLM_USE_V2_MODEL_RUNNER=0 "
        "to use the V1 model runner.")


# The 0.26.0 line's runner refuses such a request itself (patch 0012); upstream's (0.27.0 on)
# raises a plain ValueError there, its input processor refusing the request first with a
# VLLMValidationError (0012's behaviour, upstream from 0.27.0).
@pytest.mark.line("0.26.0")
def test_request_for_a_task_mrv2_does_not_serve_is_refused_with_a_validation_error():
    from vllm.exceptions import VLLMValidationError

    runner, pooler = make_runner("decoder")
    with pytest.raises(VLLMValidationError) as e:
        runner.add_request("t", 0, PoolingParams(task="token_embed"), [1, 2])
    assert e.value.parameter == "task" and e.value.value == "token_embed"
    assert "Supported tasks: ['classify', 'embed']" in str(e.value)
    assert "VLLM_USE_V2_MODEL_RUNNER=0" in str(e.value)
    assert runner.pooling_params == {} and pooler.calls == []


# What the prompt token ids are padded with: the 0.26.0 line's runner (patch 0003) pads with the
# vocabulary size, an id no token has; upstream's (0.27.0 on) with zeros.
TOKEN_ID_PAD = {"0.26.0": VOCAB, "0.32.0": 0, "0.34.0": 0}[LINE]


def test_metadata_for_a_mixed_batch():
    """The runner's details beyond test_behaviour_pooler_runs_on_a_mixed_batch:
    the cursor's finished flags, token ids for the request that asked only,
    padded (TOKEN_ID_PAD)."""
    _, meta, _, _ = pool_mixed_batch(("embed", "classify", "token_classify"))
    assert meta.get_pooling_cursor().is_finished().tolist() == [True, True, False]
    pad = TOKEN_ID_PAD
    assert meta.prompt_token_ids_cpu.tolist() == [[pad] * 10, [4, 5, 6, 7, 8, 9] + [pad] * 4, [pad] * 10]


def test_no_token_ids_when_no_request_needs_them():
    runner, pooler = make_runner()
    runner.add_request("a", 1, PoolingParams(task="embed"), [1, 2])
    runner.pool(torch.zeros(2, 2), batch([1], [2], [0], ["a"]), req_states({1: 2}))
    meta = pooler.calls[0][1]
    assert meta.prompt_token_ids is None and meta.prompt_token_ids_cpu is None


# --- behavioural (tests.toml): names upstream has too -----------------------------


def test_behaviour_tasks_are_the_poolers_that_mrv2_serves():
    """Patch 0003: the runner serves the model pooler's tasks."""
    enc, _ = make_runner("encoder_only", tasks=("embed", "classify"))
    assert set(enc.supported_tasks) == {"embed", "classify"}
    dec, _ = make_runner("decoder", tasks=("embed",))
    assert set(dec.supported_tasks) == {"embed"}


# The hint names V1 (VLLM_USE_V2_MODEL_RUNNER=0), which bases from 0.34.0 no longer have: there
# the refusal is upstream's own ("Set an explicitly supported task").
@pytest.mark.line("0.26.0", "0.32.0")
def test_behaviour_configured_task_mrv2_cannot_serve_fails_at_construction():
    """Patch 0003: a configured task MRV2 does not run fails at start-up, naming
    the task and the fallback."""
    with pytest.raises(ValueError) as e:
        make_runner("decoder", tasks=("embed", "plugin"), task="plugin")
    assert "'plugin'" in str(e.value) and "VLLM_USE_V2_MODEL_RUNNER=0" in str(e.value)


def pool_mixed_batch(tasks):
    """One decoder step over three requests: slot 5 embed, finishing (3 of 3
    tokens); slot 0 classify (needs token ids), 2 more of 6 after 4 computed,
    finishing; slot 2 raw embed, first chunk of 4 of 10, not finished.
    Returns (pooler output, the metadata the pooler saw, finished, hidden)."""
    runner, pooler = make_runner("decoder", tasks=tasks)
    runner.add_request("a", 5, PoolingParams(task="embed"), [1, 2, 3])
    runner.add_request("b", 0, PoolingParams(task="classify"), [4, 5, 6, 7, 8, 9])
    runner.add_request("c", 2, PoolingParams(task="embed", use_activation=False), list(range(10)))
    states = req_states({5: 3, 0: 6, 2: 10})
    step = batch([5, 0, 2], [3, 2, 4], [0, 4, 0], ["a", "b", "c"])
    hidden = torch.arange(9 * 2, dtype=torch.float32).reshape(9, 2)
    out, finished = runner.pool(hidden, step, states)
    (seen_hidden, meta), = pooler.calls
    torch.testing.assert_close(seen_hidden, hidden)
    return out, meta, finished, hidden


def test_behaviour_pooler_runs_on_a_mixed_batch():
    """Patch 0003: the model's own pooler runs on the step, with each request's
    params (pooler updates applied), prompt lengths, token positions, token
    ids for the requests that need them; finished = whole prompt computed."""
    out, meta, finished, hidden = pool_mixed_batch(("embed", "classify"))
    assert list(finished) == [True, True, False]
    torch.testing.assert_close(out, hidden[[2, 4, 8]])  # the pooler's output, unchanged
    assert meta.prompt_lens.tolist() == [3, 6, 10]
    assert [p.task for p in meta.pooling_params] == ["embed", "classify", "embed"]
    assert [p.use_activation for p in meta.pooling_params] == [None, None, False]
    assert meta.pooling_params[1].requires_token_ids and not meta.pooling_params[0].requires_token_ids
    cursor = meta.get_pooling_cursor()
    assert cursor.first_token_indices_gpu.tolist() == [0, 3, 5]
    assert cursor.last_token_indices_gpu.tolist() == [2, 4, 8]
    assert cursor.seq_lens_cpu.tolist() == [3, 6, 4]
    assert meta.prompt_token_ids_cpu[1, :6].tolist() == [4, 5, 6, 7, 8, 9]


def test_behaviour_removed_request_frees_its_slot():
    """Patch 0003: removal cleans the request's pooling states and forgets its
    params; the slot takes a new request."""
    runner, pooler = make_runner()
    runner.add_request("aborted", 4, PoolingParams(task="token_classify"), [1, 2, 3])
    states = runner.pooling_states[4]
    states.hidden_states_cache.append(torch.ones(1))
    runner.remove_request(4)
    assert states.hidden_states_cache == []
    assert 4 not in runner.pooling_params and 4 not in runner.pooling_states
    runner.add_request("next", 4, PoolingParams(task="embed"), [7])
    out, finished = runner.pool(torch.ones(1, 2), batch([4], [1], [0], ["next"]), req_states({4: 1}))
    assert list(finished) == [True] and out.shape == (1, 2)


def test_behaviour_encoder_only_models_serve_token_tasks():
    """Patch 0004: an encoder-only model serves token_embed, token_classify
    and embed&token_classify, one output per prompt token."""
    runner, _ = make_runner("encoder_only")
    assert set(runner.supported_tasks) == {"embed", "classify", "token_embed", "token_classify"}
    every_task, _ = make_runner("encoder_only", tasks=("embed", "token_embed", "token_classify",
                                                       "embed&token_classify"))
    assert set(every_task.supported_tasks) == {"embed", "token_embed", "token_classify", "embed&token_classify"}
    runner.add_request("t", 0, PoolingParams(task="token_embed"), [1, 2, 3])
    hidden = torch.arange(6, dtype=torch.float32).reshape(3, 2)
    out, finished = runner.pool(hidden, batch([0], [3], [0], ["t"]), req_states({0: 3}))
    assert list(finished) == [True] and len(out) == 1
    torch.testing.assert_close(out[0], hidden)


@ONLY_ENCODERS_TOKEN_TASKS
def test_behaviour_decoder_models_do_not_serve_token_tasks():
    """Patch 0004: token tasks need the whole prompt in one step: not served
    for decoder models (chunked prefill), and a decoder model configured for
    one fails at start-up naming the task and the fallback."""
    dec, _ = make_runner("decoder")
    assert set(dec.supported_tasks) == {"embed", "classify"}
    for attn_type in ("decoder", "encoder_decoder", "hybrid"):
        enabled = PoolingRunner._get_enabled_tasks(SimpleNamespace(attn_type=attn_type))
        assert not enabled & {"token_embed", "token_classify", "embed&token_classify"}
        assert {"embed", "classify"} <= enabled
    with pytest.raises(ValueError) as e:
        make_runner("decoder", task="token_embed")
    assert "'token_embed'" in str(e.value) and "VLLM_USE_V2_MODEL_RUNNER=0" in str(e.value)


@DECODERS_TOKEN_TASKS
def test_behaviour_decoder_models_serve_token_tasks():
    """A decoder model serves token_embed, token_classify and
    embed&token_classify, one output per prompt token, and starts when
    configured for one of them."""
    dec, _ = make_runner("decoder")
    assert set(dec.supported_tasks) == {"embed", "classify", "token_embed", "token_classify"}
    every_task, _ = make_runner("decoder", tasks=("embed", "token_embed", "token_classify", "embed&token_classify"))
    assert set(every_task.supported_tasks) == {"embed", "token_embed", "token_classify", "embed&token_classify"}
    runner, _ = make_runner("decoder", task="token_embed")
    runner.add_request("t", 0, PoolingParams(task="token_embed"), [1, 2, 3])
    hidden = torch.arange(6, dtype=torch.float32).reshape(3, 2)
    out, finished = runner.pool(hidden, batch([0], [3], [0], ["t"]), req_states({0: 3}))
    assert list(finished) == [True] and len(out) == 1
    torch.testing.assert_close(out[0], hidden)


# --- late interaction (patch 0004) -------------------------------------------------------

Q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])  # query token embeddings


def query_params(uses):
    return PoolingParams(task="token_embed", late_interaction_params=build_late_interaction_query_params("q", uses))


def doc_params():
    return PoolingParams(task="token_embed", late_interaction_params=build_late_interaction_doc_params("q"))


def li_runner(uses):
    """An encoder-only runner whose late-interaction cache holds query "q" with ``uses`` documents."""
    runner, _ = make_runner("encoder_only", tasks=("token_embed",))
    runner.add_request("query", 0, query_params(uses), [1, 2])
    out, _ = runner.pool(Q, batch([0], [2], [0], ["query"]), req_states({0: 2}))
    assert out[0].shape == () and float(out[0]) == 0.0  # a query returns no embedding
    runner.remove_request(0)
    runner.on_requests_finished({"query"})
    li = runner.late_interaction_runner
    assert set(li._query_cache) == {"q"} and li._query_uses == {"q": uses}
    return runner, li


def score_doc(runner, req_id, slot, doc):
    runner.add_request(req_id, slot, doc_params(), list(range(len(doc))))
    out, finished = runner.pool(doc, batch([slot], [len(doc)], [0], [req_id]), req_states({slot: len(doc)}))
    assert finished == [True]
    return float(out[0])


def test_documents_are_scored_by_maxsim_against_the_cached_query():
    runner, li = li_runner(uses=2)
    doc = torch.tensor([[0.6, 0.8], [1.0, 0.0], [0.0, -1.0]])
    # MaxSim: query token 0 -> max(0.6, 1.0, 0) = 1.0; token 1 -> max(0.8, 0, -1) = 0.8
    assert score_doc(runner, "d1", 1, doc) == pytest.approx(1.8)
    assert li._query_uses == {"q": 1}
    assert score_doc(runner, "d2", 2, doc[:1]) == pytest.approx(0.6 + 0.8)
    assert li._query_cache == {} and li._query_uses == {}


def test_aborted_documents_release_their_query_use():
    runner, li = li_runner(uses=2)
    runner.add_request("d1", 1, doc_params(), [1, 2, 3])
    runner.add_request("d2", 2, doc_params(), [1, 2])
    # d1 aborted while scheduled: the runner drops its slot, the finished ids
    # release its use of the query.
    runner.remove_request(1)
    runner.on_requests_finished({"d1"})
    assert li._query_uses == {"q": 1} and "d1" not in li._doc_query_keys
    runner.remove_request(2)
    runner.on_requests_finished({"d2"})
    assert li._query_cache == {} and li._query_uses == {} and li._doc_query_keys == {}


def runner_host(runner):
    """What GPUModelRunner.finish_requests / reset_*_cache read of their runner
    (``speculator`` from 0.34.0: none here)."""
    removed = []
    host = SimpleNamespace(pooling_runner=runner, encoder_cache=None, speculator=None, removed=removed,
                           _remove_request=lambda req_id: removed.append(req_id))
    return host


def step_end(finished=(), preempted=(), unscheduled=None):
    """The SchedulerOutput fields finish_requests reads."""
    return SimpleNamespace(finished_req_ids=set(finished), preempted_req_ids=set(preempted),
                           finished_unscheduled_late_interaction_docs=unscheduled)


def test_documents_aborted_before_they_ran_release_their_use():
    """Patch 0006: the scheduler names documents the worker never saw."""
    runner, li = li_runner(uses=3)
    host = runner_host(runner)
    GPUModelRunner.finish_requests(host, step_end(finished={"unseen"}))
    assert li._query_uses == {"q": 3}  # an unknown id alone cannot be mapped
    GPUModelRunner.finish_requests(host, step_end(finished={"unseen", "unseen-2"},
                                                  unscheduled={"unseen": "q", "unseen-2": "q"}))
    assert li._query_uses == {"q": 1} and li._doc_query_keys == {}


def test_preempted_document_keeps_its_reservation_until_it_finishes():
    runner, li = li_runner(uses=2)
    host = runner_host(runner)
    runner.add_request("d1", 1, doc_params(), [1, 2, 3])
    runner.add_request("d2", 2, doc_params(), [1, 2])
    # d1 is preempted: removed from the runner's slots, not finished.
    GPUModelRunner.finish_requests(host, step_end(preempted={"d1"}))
    runner.remove_request(1)
    assert host.removed == ["d1"]
    assert li._query_uses == {"q": 2} and li._doc_query_keys["d1"] == "q"
    # d2 finishes normally; d1 is rescheduled (new slot) and finishes.
    assert score_doc(runner, "d2", 2, torch.tensor([[1.0, 0.0]])) == pytest.approx(1.0)
    GPUModelRunner.finish_requests(host, step_end(finished={"d2"}))
    assert li._query_uses == {"q": 1}
    assert score_doc(runner, "d1", 5, torch.tensor([[0.0, 1.0]])) == pytest.approx(1.0)
    assert li._query_cache == {} and li._query_uses == {}


def test_encoder_cache_reset_drops_cached_queries_mm_reset_keeps_them():
    runner, li = li_runner(uses=3)
    host = runner_host(runner)
    GPUModelRunner.reset_mm_cache(host)  # multimodal cache reset: state kept
    assert set(li._query_cache) == {"q"} and li._query_uses == {"q": 3}
    GPUModelRunner.reset_encoder_cache(host)  # weights reloaded: cached queries are stale
    assert li._query_cache == {} and li._query_uses == {}
