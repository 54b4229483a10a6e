"""Patch 0009: MRV2's CPU runner hands a step's pooler output over directly.

``CPUModelRunner._pooling_output`` (``vllm/v1/worker/cpu/model_runner.py``)
returns the ``ModelRunnerOutput`` itself, with the finished requests' outputs
on the host and ``None`` for the others, as the V1 CPU runner's ``_pool``
does; ``GPUModelRunner._pooling_output`` keeps ``AsyncPoolingOutput``."""

from __future__ import annotations

from types import SimpleNamespace

import torch

# The CPU worker's set-up (placeholder streams and events), as MRV2 runs on the CPU.
import vllm.v1.worker.cpu.shm  # noqa: F401
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.worker.cpu.model_runner import CPUModelRunner
from vllm.v1.worker.gpu.async_utils import AsyncPoolingOutput
from vllm.v1.worker.gpu.model_runner import GPUModelRunner


def step_output(n: int) -> ModelRunnerOutput:
    req_ids = [f"r{i}" for i in range(n)]
    return ModelRunnerOutput(req_ids=req_ids, req_id_to_index={r: i for i, r in enumerate(req_ids)})


def test_cpu_runner_returns_the_output_with_finished_requests_only():
    pooled = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    out = CPUModelRunner._pooling_output(SimpleNamespace(), step_output(3), pooled, [True, False, True])
    assert type(out) is ModelRunnerOutput
    assert out.pooler_output[1] is None
    assert torch.equal(out.pooler_output[0], pooled[0])
    assert torch.equal(out.pooler_output[2], pooled[2])


def test_cpu_runner_list_output_with_none_and_token_level_entries():
    """Token-level outputs (one tensor per request, lengths differ) and the
    0-d outputs late interaction leaves; a request with no output."""
    tokens = [torch.ones(5, 3), torch.zeros(()), None, torch.full((2, 3), 7.0)]
    out = CPUModelRunner._pooling_output(SimpleNamespace(), step_output(4), tokens,
                                         [True, True, True, False])
    assert [None if t is None else tuple(t.shape) for t in out.pooler_output] == [(5, 3), (), None, None]
    assert torch.equal(out.pooler_output[0], tokens[0])


def test_gpu_runner_keeps_the_asynchronous_copy():
    pooled = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    runner = SimpleNamespace(main_stream=torch.cuda.current_stream(),
                             output_copy_stream=torch.cuda.Stream())
    out = GPUModelRunner._pooling_output(runner, step_output(2), pooled, [False, True])
    assert isinstance(out, AsyncPoolingOutput)
    result = out.get_output()
    assert result.pooler_output[0] is None
    assert torch.equal(result.pooler_output[1], pooled[1])
