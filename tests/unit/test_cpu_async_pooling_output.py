"""Patch 0009: MRV2's CPU runner hands a step's pooler output over without
``AsyncPoolingOutput``'s streams and events.

``GPUModelRunner.pool`` builds the hand-off from the runner's class attribute
``async_pooling_output_cls`` (``AsyncPoolingOutput``); ``CPUModelRunner``
sets ``CPUAsyncPoolingOutput`` (``vllm/v1/worker/cpu/async_utils.py``): the
same arguments and the same pooler output as upstream's hand-off gives, the
finished requests' outputs on the host and ``None`` for the others, ready
when it is built, as the V1 CPU runner's ``_pool`` does."""

from __future__ import annotations

import types

import pytest
import torch
import vllm.v1.worker.cpu.shm  # noqa: F401  (the CPU worker's stream and event placeholders)
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.worker.cpu.model_runner import CPUModelRunner
from vllm.v1.worker.gpu.async_utils import AsyncPoolingOutput
from vllm.v1.worker.gpu.model_runner import GPUModelRunner

from tests.unit.upstream_names import model_runner_output

EMB = torch.arange(12, dtype=torch.float32).reshape(3, 4)
TOKENS = [torch.ones(2, 4), None, torch.full((5, 4), 3.0)]  # one tensor per request, or none
SCORES = [torch.tensor(0.5), torch.tensor(0.25), None]  # the 0-d outputs late interaction leaves

CASES = {
    "tensor, all finished": (EMB, [True, True, True]),
    "tensor, some finished": (EMB, [True, False, True]),
    "tensor, none finished": (EMB, [False, False, False]),
    "list, some finished": (TOKENS, [True, False, True]),
    "list, one unfinished": (TOKENS, [True, False, False]),
    "0-d scores": (SCORES, [True, True, False]),
}


def cpu_hand_off_cls():
    from vllm.v1.worker.cpu.async_utils import CPUAsyncPoolingOutput

    return CPUAsyncPoolingOutput


def step_output() -> ModelRunnerOutput:
    return model_runner_output(["a", "b", "c"])


def hand_off(cls, pooler_output, finished_mask):
    stream = torch.cuda.Stream()
    return cls(model_runner_output=step_output(), pooler_output=pooler_output,
               finished_mask=finished_mask, main_stream=stream, copy_stream=stream)


@pytest.mark.parametrize("case", list(CASES))
def test_cpu_hand_off_gives_upstreams_pooler_output(case):
    pooler_output, mask = CASES[case]
    got = hand_off(cpu_hand_off_cls(), pooler_output, mask).get_output().pooler_output
    want = hand_off(AsyncPoolingOutput, pooler_output, mask).get_output().pooler_output
    assert len(got) == len(want) == 3
    for g, w, finished in zip(got, want, mask):
        if not finished or w is None:
            assert g is None and w is None
        else:
            assert g.device.type == "cpu" and g.shape == w.shape and torch.equal(g, w)


def test_cpu_hand_off_makes_no_event_and_switches_no_stream(monkeypatch):
    def refused(*args, **kwargs):
        raise AssertionError("the CPU hand-off has no copy to wait for")

    monkeypatch.setattr(torch.cuda, "Event", refused)
    monkeypatch.setattr(torch.cuda, "set_stream", refused)
    out = hand_off(cpu_hand_off_cls(), EMB, [False, True, True])
    pooled = out.get_output().pooler_output
    assert pooled[0] is None and torch.equal(pooled[1], EMB[1]) and torch.equal(pooled[2], EMB[2])


def test_cpu_hand_off_refuses_a_mask_of_another_batch():
    with pytest.raises(ValueError, match="does not match finished mask size"):
        hand_off(cpu_hand_off_cls(), EMB, [True, True])


def test_runners_choose_their_hand_off():
    assert GPUModelRunner.async_pooling_output_cls is AsyncPoolingOutput
    assert CPUModelRunner.async_pooling_output_cls is cpu_hand_off_cls()


def test_cpu_runners_pool_hands_off_through_its_class_attribute():
    """``GPUModelRunner.pool`` of a CPU runner (its construction left out: it
    needs a whole engine), given only what ``pool()`` reads."""
    calls = []
    runner = object.__new__(CPUModelRunner)
    vars(runner).update(
        execute_model_state=types.SimpleNamespace(
            input_batch=types.SimpleNamespace(req_ids=["a", "b", "c"]), hidden_states=None,
            finished_req_ids=set(), ec_connector_output=None),
        kv_connector=types.SimpleNamespace(post_forward=lambda ids: None),
        is_last_pp_rank=True,
        pooling_runner=types.SimpleNamespace(pool=lambda hidden, batch, states: (EMB, [True, False, True])),
        req_states=None, main_stream=None, output_copy_stream=None,
        postprocess_num_computed_tokens=calls.append,
        eplb=types.SimpleNamespace(step=lambda **kwargs: None),  # pool() steps expert load balancing
    )
    out = runner.pool()
    assert type(out) is cpu_hand_off_cls()
    pooled = out.get_output().pooler_output
    assert torch.equal(pooled[0], EMB[0]) and pooled[1] is None and torch.equal(pooled[2], EMB[2])
    assert len(calls) == 1
