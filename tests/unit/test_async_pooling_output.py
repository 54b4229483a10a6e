"""MRV2's pooler-output hand-off on a GPU (patch 0003 on the 0.26.0 line,
upstream's from 0.27.0), run here with CPU stand-ins for CUDA's streams,
events and device tensors.

``GPUModelRunner.pool`` hands a step's pooler output to
``AsyncPoolingOutput`` (``vllm/v1/worker/gpu/async_utils.py``), which copies
the finished requests' outputs to the host on the runner's output copy stream
and records an event there; ``get_output()`` waits for that event. On the CPU
the streams and events are no-ops (``vllm/v1/worker/cpu/shm.py``) and the
"copy" is the tensor itself, so nothing of that order shows. Here:

- ``Stream`` and ``Event`` stand-ins log every call (``wait_stream``,
  ``record``, ``synchronize``), and ``torch.cuda.set_stream`` logs which
  stream is current;
- ``DeviceTensor`` (a ``torch.Tensor`` subclass) stands for device memory:
  a copy of it to the host is logged with the stream current at that moment
  and its ``non_blocking`` flag (non-blocking copies from CUDA land in pinned
  host memory, ATen's ``_to_copy``), and returns a plain host tensor.

What a GPU adds beyond this (the copy running concurrently with the next
step, pinned allocation) is listed in docs/gpu-only.md.
"""

from __future__ import annotations

import gc
import math
import weakref

import pytest
import torch

# The CPU worker's set-up, as MRV2 runs on the CPU (replaced below per test).
import vllm.v1.worker.cpu.shm  # noqa: F401
from vllm.v1.worker.gpu.async_utils import AsyncPoolingOutput

from tests.unit.upstream_names import model_runner_output

LOG: list[tuple] = []
COPIED: list[tuple[int, ...]] = []  # the shape of each device-to-host copy, in order
CURRENT = ["main"]


def _is_host(device) -> bool:
    return device is not None and torch.device(device).type == "cpu"


class DeviceTensor(torch.Tensor):
    """A tensor standing for device memory: ops on it stay "on the device"
    (results are DeviceTensors); ``.to("cpu", ...)`` is the device-to-host
    copy, logged as ("copy", current stream, non_blocking), its shape in
    ``COPIED``."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.to:
            target = kwargs.get("device", args[1] if len(args) > 1 else None)
            if _is_host(target):
                LOG.append(("copy", CURRENT[0], kwargs.get("non_blocking", False)))
                COPIED.append(tuple(args[0].shape))
                with torch._C.DisableTorchFunctionSubclass():
                    return args[0].clone()
        return super().__torch_function__(func, types, args, kwargs)


def on_device(t: torch.Tensor) -> DeviceTensor:
    return t.as_subclass(DeviceTensor)


class Stream:
    def __init__(self, name):
        self.name = name

    def wait_stream(self, other):
        LOG.append(("wait", self.name, other.name))


class Event:
    def __init__(self, **kwargs):
        LOG.append(("event", kwargs))

    def record(self, stream=None):
        LOG.append(("record", stream.name if stream is not None else CURRENT[0]))

    def synchronize(self):
        LOG.append(("synchronize",))


def set_stream(stream):
    CURRENT[0] = stream.name
    LOG.append(("set_stream", stream.name))


@pytest.fixture(autouse=True)
def cuda_stand_ins(monkeypatch):
    LOG.clear()
    COPIED.clear()
    CURRENT[0] = "main"
    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "set_stream", set_stream)


def hand_off(pooler_output, finished_mask):
    """The hand-off MRV2's ``GPUModelRunner.pool`` makes on a GPU
    (``AsyncPoolingOutput``), with a main stream and an output copy stream."""
    req_ids = [f"r{i}" for i in range(len(finished_mask))]
    output = model_runner_output(req_ids)
    return AsyncPoolingOutput(model_runner_output=output, pooler_output=pooler_output,
                              finished_mask=finished_mask, main_stream=Stream("main"),
                              copy_stream=Stream("copy"))


def expected_log(num_copies: int) -> list[tuple]:
    """Blocking event; the copy stream current while it waits for the main
    stream, then copies non-blocking, then records the event; main again."""
    return ([("event", {"blocking": True}), ("set_stream", "copy"), ("wait", "copy", "main")]
            + [("copy", "copy", True)] * num_copies
            + [("record", "copy"), ("set_stream", "main")])


def test_some_finished_rows_of_a_batch_tensor():
    """Only the finished rows cross to the host, on the copy stream."""
    host = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    out = hand_off(on_device(host), [True, False, True])
    assert isinstance(out, AsyncPoolingOutput)
    assert COPIED and LOG == expected_log(len(COPIED))
    assert sum(math.prod(shape) for shape in COPIED) == 2 * 4  # two rows of 4, not the third
    result = out.get_output()
    assert LOG[-1] == ("synchronize",)
    assert result.pooler_output[1] is None
    for i in (0, 2):
        assert type(result.pooler_output[i]) is torch.Tensor  # host memory
        torch.testing.assert_close(result.pooler_output[i], host[i], rtol=0, atol=0)


# The 0.26.0 line's hand-off (0003) copies as V1's _copy_pooler_output_to_cpu does;
# upstream's AsyncPoolingOutput (0.27.0 on) copies each finished row alone.
@pytest.mark.line("0.26.0")
def test_some_finished_rows_are_gathered_on_the_device_into_one_copy():
    out = hand_off(on_device(torch.arange(12, dtype=torch.float32).reshape(3, 4)), [True, False, True])
    assert LOG == expected_log(1) and COPIED == [(2, 4)]
    result = out.get_output().pooler_output
    assert result[1] is None
    torch.testing.assert_close(torch.stack([result[0], result[2]]),
                               torch.tensor([[0.0, 1, 2, 3], [8, 9, 10, 11]]), rtol=0, atol=0)


def test_a_batch_tensor_all_finished_is_copied_once():
    host = torch.randn(4, 8)
    out = hand_off(on_device(host), [True] * 4)
    assert LOG == expected_log(1)
    result = out.get_output().pooler_output
    assert [type(t) for t in result] == [torch.Tensor] * 4
    torch.testing.assert_close(torch.stack(result), host, rtol=0, atol=0)


def test_no_request_finished_copies_nothing():
    out = hand_off(on_device(torch.randn(2, 8)), [False, False])
    assert LOG == expected_log(0)
    assert out.get_output().pooler_output == [None, None]


def test_token_level_outputs_are_copied_one_by_one():
    """One tensor per request (lengths differ), a request without output, an
    unfinished one, and the 0-d scores late interaction leaves."""
    host = [torch.randn(5, 3), None, torch.randn(2, 3), torch.tensor(0.25)]
    device = [None if t is None else on_device(t) for t in host]
    out = hand_off(device, [True, True, False, True])
    assert LOG == expected_log(2)
    result = out.get_output().pooler_output
    assert result[1] is None and result[2] is None
    for i in (0, 3):
        assert type(result[i]) is torch.Tensor
        torch.testing.assert_close(result[i], host[i], rtol=0, atol=0)


def test_device_output_is_kept_alive_until_the_copy_is_waited_for():
    """The copy runs on another stream: the device tensor must not be freed
    (and its memory reused by the main stream) before the event is waited for."""
    pooled = on_device(torch.randn(2, 4))
    ref = weakref.ref(pooled)
    out = hand_off(pooled, [True, True])
    del pooled
    gc.collect()
    assert ref() is not None
    out.get_output()
    assert LOG[-1] == ("synchronize",)
