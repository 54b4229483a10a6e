"""MRV2's dummy batches (profiling, warm-up, CUDA-graph capture) split their
tokens evenly over their requests (issue 28 item 5): no dummy request gets
more than its fair share, ``ceil(num_tokens / num_reqs)`` tokens, so none is
longer than ``max_model_len`` whenever the batch could hold real requests
(``num_tokens <= num_reqs * max_model_len``). On the base the whole
remainder went to the last request: 496 tokens over 256 requests gave one
request 241 tokens, more than a block-table row of a small ``max_model_len``
holds (upstream fixed the same in 0.27.1 after out-of-bounds block-table
reads during CUDA-graph capture).

Three places build the same split and must agree, because the LoRA mapping
of a dummy batch assigns tokens to requests by it: ``InputBatch.make_dummy``
(the batch and its attention inputs), ``GPUModelRunner._dummy_run`` (the
dummy scheduler output: per-request counts, the LoRA mapping) and the LoRA
capture hook (``create_lora_capture_hook``). CPU tensors, no engine.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from vllm.v1.worker.gpu.input_batch import InputBatch, InputBuffers
from vllm.v1.worker.gpu.lora_utils import create_lora_capture_hook
from vllm.v1.worker.gpu.model_runner import GPUModelRunner

# The base's dummy-batch builders (0049): a test of the 0.26.0 line; 0.27.1 carries the fix
# (0049 dropped there), in its own builders.
pytestmark = pytest.mark.line("0.26.0")

# (num_reqs, num_tokens): the capture size (496 tokens, max_num_seqs 256),
# sizes with and without a remainder, one request, one token per request
SPLITS = [(256, 496), (256, 512), (3, 10), (4, 8), (7, 7), (1, 9), (5, 4097)]


def assert_fair(counts, num_reqs: int, num_tokens: int) -> None:
    counts = np.asarray(counts)
    assert counts.shape == (num_reqs,)
    assert int(counts.sum()) == num_tokens
    assert int(counts.max()) == math.ceil(num_tokens / num_reqs)
    assert int(counts.min()) == num_tokens // num_reqs


@pytest.mark.parametrize(("num_reqs", "num_tokens"), SPLITS)
def test_make_dummy_gives_no_request_more_than_its_fair_share(num_reqs, num_tokens):
    buffers = InputBuffers(max_num_reqs=256, max_num_tokens=8192, device=torch.device("cpu"))
    batch = InputBatch.make_dummy(num_reqs, num_tokens, buffers)
    counts = batch.num_scheduled_tokens
    assert_fair(counts, num_reqs, num_tokens)
    # every per-request view of the batch says the same (fresh prefill: seq_len == query_len)
    assert batch.seq_lens.tolist() == counts.tolist()
    assert batch.seq_lens_cpu_upper_bound.tolist() == counts.tolist()
    starts = [0, *np.cumsum(counts).tolist()]
    assert batch.query_start_loc.tolist() == starts
    assert batch.query_start_loc_np.tolist() == starts
    assert batch.logits_indices.tolist() == [s - 1 for s in starts[1:]]
    # padding rows for full CUDA graphs: no tokens
    assert buffers.seq_lens[num_reqs:].tolist() == [0] * (256 - num_reqs)


def test_capture_size_over_small_max_model_len_fits_every_request():
    """The issue's case: capture size 496, max_num_seqs 256, max_model_len 16:
    every dummy request fits a block-table row (at most 16 tokens)."""
    buffers = InputBuffers(max_num_reqs=256, max_num_tokens=512, device=torch.device("cpu"))
    batch = InputBatch.make_dummy(256, 496, buffers)
    assert int(batch.num_scheduled_tokens.max()) == 2
    assert int(batch.seq_lens.max()) <= 16


def dummy_runner(max_num_reqs: int) -> tuple[GPUModelRunner, list[dict[str, int]], list[np.ndarray]]:
    """An MRV2 runner made without __init__, carrying what ``_dummy_run`` reads
    before and around ``execute_model``; returns it, the dummy scheduler
    outputs' per-request token counts it executes, and the per-request counts
    its LoRA dummy mapping is made from."""
    runner = GPUModelRunner.__new__(GPUModelRunner)
    runner.max_num_reqs = max_num_reqs
    runner.decode_query_len = 1
    runner.is_first_pp_rank = True
    runner.is_last_pp_rank = False  # _dummy_run returns right after the model step
    runner.lora_config = None
    runner.kv_connector = SimpleNamespace(set_disabled=lambda disabled: None)
    runner.eplb = SimpleNamespace(step=lambda **kwargs: None)
    executed: list[dict[str, int]] = []
    lora_counts: list[np.ndarray] = []

    def execute_model(scheduler_output, **kwargs):
        assert sum(scheduler_output.num_scheduled_tokens.values()) == scheduler_output.total_num_scheduled_tokens
        executed.append(dict(scheduler_output.num_scheduled_tokens))

    class Lora:
        def __init__(self, num_scheduled_tokens):
            lora_counts.append(np.asarray(num_scheduled_tokens))

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    runner.execute_model = execute_model
    runner.maybe_dummy_run_with_lora = lambda lora_config, num_scheduled_tokens, **kwargs: Lora(num_scheduled_tokens)
    return runner, executed, lora_counts


@pytest.mark.parametrize(("num_reqs", "num_tokens"), SPLITS)
def test_dummy_run_schedules_the_split_make_dummy_builds(num_reqs, num_tokens):
    runner, executed, lora_counts = dummy_runner(max_num_reqs=num_reqs)
    assert runner._dummy_run(num_tokens) == (None, None)
    (scheduled,) = executed
    counts = list(scheduled.values())
    assert_fair(counts, num_reqs, num_tokens)
    buffers = InputBuffers(max_num_reqs=256, max_num_tokens=8192, device=torch.device("cpu"))
    assert counts == InputBatch.make_dummy(num_reqs, num_tokens, buffers).num_scheduled_tokens.tolist()
    (lora,) = lora_counts
    assert lora.tolist() == counts


@pytest.mark.parametrize(("num_reqs", "num_tokens"), SPLITS)
def test_lora_capture_hook_maps_the_split_make_dummy_builds(num_reqs, num_tokens):
    seen: list[np.ndarray] = []

    class Selected:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    def maybe_select_dummy_loras(lora_config, num_scheduled, num_active_loras):
        seen.append(np.asarray(num_scheduled))
        return Selected()

    hook = create_lora_capture_hook(SimpleNamespace(max_loras=1),
                                    SimpleNamespace(maybe_select_dummy_loras=maybe_select_dummy_loras))
    hook(1, num_reqs, num_tokens)
    (counts,) = seen
    assert_fair(counts, num_reqs, num_tokens)
    buffers = InputBuffers(max_num_reqs=256, max_num_tokens=8192, device=torch.device("cpu"))
    assert counts.tolist() == InputBatch.make_dummy(num_reqs, num_tokens, buffers).num_scheduled_tokens.tolist()
