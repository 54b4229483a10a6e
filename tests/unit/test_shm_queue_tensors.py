"""Patch 0035 through upstream's ``MessageQueue`` (the shared-memory queue
between the engine core and its workers): a pooling step's outputs, a list
of row views of one [N, hidden] tensor, cross it at their own size (the base
pickled every view with the whole batch: N copies) and come out equal and
independent; other tensors keep their type, dtype, shape, values and
autograd flag, also past the ring's reuse."""

from __future__ import annotations

import pytest
import torch

from vllm.distributed.device_communicators.shm_broadcast import MessageQueue


class _Recorder:
    """Wraps the writer's socket: records what goes the overflow way."""

    def __init__(self, sock):
        self.sock, self.sent = sock, []

    def send_multipart(self, frames, **kwargs):
        self.sent.append(sum(len(memoryview(f)) for f in frames))
        return self.sock.send_multipart(frames, **kwargs)

    def __getattr__(self, name):
        return getattr(self.sock, name)


@pytest.fixture
def queue():
    """(writer, reader, recorder) of a queue with two 4 MiB chunks, in this process."""
    writer = MessageQueue(n_reader=1, n_local_reader=1, max_chunk_bytes=4 * 2**20, max_chunks=2)
    reader = MessageQueue.create_from_handle(writer.export_handle(), 0)
    writer.wait_until_ready()
    reader.wait_until_ready()
    recorder = _Recorder(writer.local_socket)
    writer.local_socket = recorder
    yield writer, reader, recorder
    del writer, reader


def test_pooled_rows_cross_at_their_size(queue):
    writer, reader, recorder = queue
    batch = torch.randn(256, 384)
    writer.enqueue({"pooler_output": list(batch)})  # as _copy_pooler_output_to_cpu hands a step over
    got = reader.dequeue(timeout=60)["pooler_output"]
    # 384 KiB of data fit one 4 MiB chunk (the base: 256 x 384 KiB went the overflow way)
    assert recorder.sent == []
    assert len(got) == 256 and all(torch.equal(g, b) for g, b in zip(got, batch))
    assert got[7].untyped_storage().nbytes() == 384 * 4
    batch.zero_()
    assert float(got[7].abs().sum()) > 0  # independent of the sender's tensor


def test_other_tensors_keep_what_they_are(queue):
    writer, reader, _ = queue
    big = torch.randn(600, 600)  # 1.4 MB: an out-of-band buffer in the ring
    sent = {
        "big": big,
        "param": torch.nn.Parameter(torch.ones(3)),
        "grad": torch.ones(2, requires_grad=True),
        "bf16": torch.arange(5, dtype=torch.bfloat16),
        "int": torch.arange(6, dtype=torch.int64).reshape(2, 3),
        "bool": torch.tensor([True, False, True]),
        "empty": torch.empty(0, 4),
        "scalar": torch.tensor(3.5),
        "transposed": torch.arange(12.0).reshape(3, 4).t(),
    }
    writer.enqueue(sent)
    got = reader.dequeue(timeout=60)
    for _ in range(3):  # the ring's chunks are written again: what was read stays intact
        writer.enqueue({"filler": torch.full((600, 600), float("nan"))})
        reader.dequeue(timeout=60)
    assert set(got) == set(sent)
    for name, t in sent.items():
        assert type(got[name]) is type(t), name
        assert got[name].dtype == t.dtype and got[name].shape == t.shape, name
        assert got[name].requires_grad == t.requires_grad, name
        assert torch.equal(got[name].detach(), t.detach()), name
