"""Patch 0009: MRV2's CPU runner hands a step's pooler output over directly.

``cpu_pooling_output`` (``vllm/v1/worker/cpu/model_runner.py``) takes
``AsyncPoolingOutput``'s arguments and returns the ``ModelRunnerOutput``
itself, with the finished requests' outputs on the host and ``None`` for the
others, as the V1 CPU runner's ``_pool`` does. The CPU MRV2 runner puts it in
place of ``AsyncPoolingOutput`` from the CPU side; GPUs keep the
asynchronous copy. Patch 0008's native input preparation is installed the
same way, where Triton has no backend.

The 0.32.0 line ports 0009 as a runner class attribute
(tests/unit/test_cpu_async_pooling_output.py) and 0008 onto the kernel
dispatcher (tests/unit/test_mrv2_pooling_kernels_without_triton.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

# The CPU worker's set-up (placeholder streams and events), as MRV2 runs on the CPU.
import vllm.v1.worker.cpu.shm  # noqa: F401
import vllm.v1.worker.gpu.model_runner as gpu_model_runner
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.worker.cpu import model_runner as cpu_model_runner
from vllm.v1.worker.gpu.async_utils import AsyncPoolingOutput

# cpu_pooling_output, swapped into the GPU runner's module by CPUModelRunner.__init__ with
# 0008's install(): the 0.26.0 line's 0009; 0.32.0's is a class attribute (see above).
on_the_0_26_0_line = pytest.mark.line("0.26.0")


def step_output(n: int) -> ModelRunnerOutput:
    req_ids = [f"r{i}" for i in range(n)]
    return ModelRunnerOutput(req_ids=req_ids, req_id_to_index={r: i for i, r in enumerate(req_ids)})


@on_the_0_26_0_line
def test_cpu_hand_off_returns_the_output_with_finished_requests_only():
    pooled = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    out = cpu_model_runner.cpu_pooling_output(
        model_runner_output=step_output(3), pooler_output=pooled, finished_mask=[True, False, True],
        main_stream=None, copy_stream=None)
    assert type(out) is ModelRunnerOutput
    assert out.pooler_output[1] is None
    torch.testing.assert_close(out.pooler_output[0], pooled[0])
    torch.testing.assert_close(out.pooler_output[2], pooled[2])


@on_the_0_26_0_line
def test_cpu_hand_off_list_output_with_none_and_token_level_entries():
    """Token-level outputs (one tensor per request, lengths differ) and the
    0-d outputs late interaction leaves; a request with no output."""
    tokens = [torch.ones(5, 3), torch.zeros(()), None, torch.full((2, 3), 7.0)]
    out = cpu_model_runner.cpu_pooling_output(step_output(4), tokens, [True, True, True, False])
    assert [None if t is None else tuple(t.shape) for t in out.pooler_output] == [(5, 3), (), None, None]
    torch.testing.assert_close(out.pooler_output[0], tokens[0])


def test_gpu_hand_off_keeps_the_asynchronous_copy():
    pooled = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    out = AsyncPoolingOutput(model_runner_output=step_output(2), pooler_output=pooled,
                             finished_mask=[False, True], main_stream=torch.cuda.current_stream(),
                             copy_stream=torch.cuda.Stream())
    result = out.get_output()
    assert result.pooler_output[0] is None
    torch.testing.assert_close(result.pooler_output[1], pooled[1])


@on_the_0_26_0_line
def test_cpu_runner_installs_its_hand_off_and_native_input_preparation(monkeypatch):
    """Building the CPU MRV2 runner without Triton swaps in the CPU hand-off
    and the native input preparation (the GPU runner's own construction is
    left out: it needs a whole engine)."""
    from vllm.v1.worker.cpu import input_preparation
    from vllm.v1.worker.gpu import input_batch

    # An in-process MRV2 engine of an earlier test installs the native
    # functions for good; start from the Triton wrappers and leave them so.
    was_installed = input_preparation.installed()
    input_preparation.uninstall()
    triton_prefill = input_batch.prepare_prefill_inputs
    assert gpu_model_runner.prepare_prefill_inputs is triton_prefill
    monkeypatch.setattr(gpu_model_runner, "AsyncPoolingOutput", AsyncPoolingOutput)
    monkeypatch.setattr(cpu_model_runner, "HAS_TRITON", False)
    monkeypatch.setattr(gpu_model_runner.GPUModelRunner, "__init__", lambda self, config, device: None)
    config = SimpleNamespace(model_config=SimpleNamespace(runner_type="pooling"))
    try:
        cpu_model_runner.CPUModelRunner(config, torch.device("cpu"))
        assert gpu_model_runner.AsyncPoolingOutput is cpu_model_runner.cpu_pooling_output
        assert input_preparation.installed()
        assert gpu_model_runner.prepare_prefill_inputs is input_preparation.prepare_prefill_inputs
    finally:
        input_preparation.uninstall()
    assert gpu_model_runner.prepare_prefill_inputs is triton_prefill
    if was_installed:
        input_preparation.install()
