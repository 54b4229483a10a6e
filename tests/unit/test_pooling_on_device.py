"""MRV2's PoolingRunner (patches 0003, 0004) with the model on a device, run
here with PyTorch's ``meta`` device standing for the GPU.

On the CPU, the "device" tensors a pooling step builds are host tensors: the
prompt token ids copied ``.to(device)`` are the host array itself, the pooling
cursor's indices are host tensors, and reading a device value on the host
(``.tolist()``, ``.item()``, a Python ``if`` on a tensor) costs nothing and
goes unnoticed. With the runner's device, the input batch's device tensors
and the hidden states on ``meta``, a pooling step runs the real vLLM poolers
(built by their own factories from all-MiniLM-L6-v2's config) and:

- fails if anything reads a device value on the host (a meta tensor has no
  data: such a read raises), which on a GPU is a device-to-host
  synchronisation inside the step (DESIGN: "Performance principles");
- fails if a host tensor meets a device tensor in one op, which a GPU
  refuses too (CPU runs never see it).

The finished mask and the host copy of the token ids are checked by value.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from vllm.config import PoolerConfig, set_current_vllm_config
from vllm.model_executor.layers.pooler.special import DispatchPooler
from vllm.pooling_params import PoolingParams
from vllm.v1.worker.gpu.pool.pooling_runner import PoolingRunner

from scripts.validation.stand_ins import StandInPoolingModel
from tests.unit.stand_ins import minilm_engine_config

DEVICE = torch.device("meta")
HIDDEN = 384  # all-MiniLM-L6-v2
MAX_REQS = 8


@pytest.fixture(scope="module")
def minilm_config():
    return minilm_engine_config()


def host_to_device(data, device, dtype=None):
    """vLLM's ``async_tensor_h2d`` as it is where there is a device
    (``vllm/utils/torch_utils.py``): a host tensor copied to ``device``."""
    if isinstance(data, np.ndarray):
        data = torch.from_numpy(data)
    host = data if isinstance(data, torch.Tensor) else torch.tensor(data, dtype=dtype)
    return host.to(device=device, dtype=dtype, non_blocking=True)


@pytest.fixture(autouse=True)
def device_copies(monkeypatch):
    """The CPU worker's set-up (``vllm/v1/worker/cpu/shm.py``, which other
    test modules of this process import) replaces vLLM's host-to-device copy
    with one that stays on the host; the poolers get the device's back."""
    import vllm.model_executor.layers.pooler.seqwise.methods as seqwise

    monkeypatch.setattr(seqwise, "async_tensor_h2d", host_to_device)


class Recording(torch.nn.Module):
    """Delegates to a real pooler and keeps the metadata of each call."""

    def __init__(self, pooler):
        super().__init__()
        self.pooler = pooler
        self.metadata = []

    def get_supported_tasks(self):
        return self.pooler.get_supported_tasks()

    def get_pooling_updates(self, task):
        return self.pooler.get_pooling_updates(task)

    def forward(self, hidden_states, pooling_metadata):
        self.metadata.append(pooling_metadata)
        return self.pooler(hidden_states, pooling_metadata)


def device_runner(config, pooler) -> tuple[PoolingRunner, Recording]:
    recording = Recording(pooler)
    return PoolingRunner(StandInPoolingModel(pooler=recording), config), recording


def step(prompts: list[list[int]], scheduled: list[int]):
    """The hidden states, input batch and request state of one step (the
    arguments of ``PoolingRunner.pool``): request i (slot i) has
    prompt ``prompts[i]`` and gets ``scheduled[i]`` tokens, none computed
    before; ``query_start_loc`` on the device, as MRV2's input buffers."""
    scheduled_np = np.asarray(scheduled, dtype=np.int32)
    qsl = np.concatenate([[0], np.cumsum(scheduled_np)]).astype(np.int32)
    batch = SimpleNamespace(
        num_reqs=len(prompts), req_ids=[f"r{i}" for i in range(len(prompts))],
        idx_mapping_np=np.arange(len(prompts), dtype=np.int32), num_scheduled_tokens=scheduled_np,
        seq_lens_cpu_upper_bound=torch.from_numpy(scheduled_np.copy()),
        query_start_loc=torch.from_numpy(qsl).to(DEVICE), num_tokens=int(qsl[-1]),
    )
    prompt_len = np.zeros(MAX_REQS, dtype=np.int32)
    prompt_len[: len(prompts)] = [len(p) for p in prompts]
    hidden_states = torch.empty(int(qsl[-1]) + 3, HIDDEN, device=DEVICE)  # +3: graph padding
    return hidden_states, batch, SimpleNamespace(prompt_len=SimpleNamespace(np=prompt_len))


PROMPTS = [list(range(101, 106)), list(range(201, 218)), list(range(301, 310))]  # 5, 17, 9 tokens


def shapes(output):
    return [None if t is None else (t.device.type, tuple(t.shape)) for t in output]


@pytest.mark.parametrize("seq_pooling", ["MEAN", "CLS", "LAST"])
def test_embed_and_token_embed_step_stays_on_the_device(minilm_config, seq_pooling):
    with set_current_vllm_config(minilm_config):
        pooler = DispatchPooler.for_embedding(PoolerConfig(seq_pooling_type=seq_pooling, tok_pooling_type="ALL"))
    runner, _ = device_runner(minilm_config, pooler)
    for i, (prompt, task) in enumerate(zip(PROMPTS, ["embed", "token_embed", "embed"])):
        runner.add_request(f"r{i}", i, PoolingParams(task=task), prompt)
    output, finished = runner.pool(*step(PROMPTS, [5, 17, 9]))
    assert finished == [True, True, True]
    assert shapes(output) == [("meta", (HIDDEN,)), ("meta", (17, HIDDEN)), ("meta", (HIDDEN,))]


def test_classify_and_token_classify_step_stays_on_the_device(minilm_config):
    with set_current_vllm_config(minilm_config):
        classifier = torch.nn.Linear(HIDDEN, 3, device=DEVICE)
        pooler = DispatchPooler.for_seq_cls(PoolerConfig(seq_pooling_type="CLS", tok_pooling_type="ALL"), classifier=classifier)
    runner, _ = device_runner(minilm_config, pooler)
    for i, (prompt, task) in enumerate(zip(PROMPTS, ["classify", "token_classify", "classify"])):
        runner.add_request(f"r{i}", i, PoolingParams(task=task), prompt)
    output, finished = runner.pool(*step(PROMPTS, [5, 17, 9]))
    assert finished == [True, True, True]
    assert shapes(output) == [("meta", (3,)), ("meta", (17, 3)), ("meta", (3,))]


def test_partly_scheduled_prompt_is_not_finished(minilm_config):
    """Last-token pooling of a prompt scheduled in part (a decoder model with
    chunked prefill): its output is computed on the device but not finished,
    decided from the host's scheduled and prompt lengths."""
    with set_current_vllm_config(minilm_config):
        pooler = DispatchPooler.for_embedding(PoolerConfig(seq_pooling_type="LAST", tok_pooling_type="ALL"))
    runner, _ = device_runner(minilm_config, pooler)
    for i, prompt in enumerate(PROMPTS):
        runner.add_request(f"r{i}", i, PoolingParams(task="embed"), prompt)
    output, finished = runner.pool(*step(PROMPTS, [5, 8, 9]))
    assert finished == [True, False, True]
    assert shapes(output) == [("meta", (HIDDEN,))] * 3


STEP_PROMPTS = [[7, 5, 7, 9], [7, 1], [3, 3, 3, 7, 2, 7]]


def step_pooling(config):
    """One step of step pooling (token_embed at step tag 7, which asks for the
    prompt token ids) over ``STEP_PROMPTS``: (output, finished mask, the
    pooler's metadata)."""
    with set_current_vllm_config(config):
        pooler = DispatchPooler.for_embedding(PoolerConfig(seq_pooling_type="MEAN", tok_pooling_type="STEP"))
    runner, recording = device_runner(config, pooler)
    for i, prompt in enumerate(STEP_PROMPTS):
        runner.add_request(f"r{i}", i, PoolingParams(task="token_embed", step_tag_id=7), prompt)
    output, finished = runner.pool(*step(STEP_PROMPTS, [4, 2, 6]))
    (metadata,) = recording.metadata
    return output, finished, metadata


def test_token_ids_for_the_pooler_are_on_the_host(minilm_config):
    """Step pooling asks for the prompt token ids: the metadata carries them
    on the host, [num_reqs, longest prompt] int64, each request's row its
    prompt up to its prompt length (what the poolers read,
    ``get_prompt_token_ids_cpu``; the padding past it is read by none)."""
    output, finished, metadata = step_pooling(minilm_config)
    assert finished == [True, True, True]
    # rows at the step tag (token id 7) only
    assert shapes(output) == [("meta", (2, HIDDEN)), ("meta", (1, HIDDEN)), ("meta", (2, HIDDEN))]
    ids_cpu = metadata.prompt_token_ids_cpu
    assert (ids_cpu.device.type, ids_cpu.dtype, tuple(ids_cpu.shape)) == ("cpu", torch.int64, (3, 6))
    assert [ids.tolist() for ids in metadata.get_prompt_token_ids_cpu()] == STEP_PROMPTS
    cursor = metadata.get_pooling_cursor()
    assert cursor.first_token_indices_gpu.device.type == cursor.last_token_indices_gpu.device.type == "meta"


# The base's poolers read a device copy of the token ids too (jina's
# get_prompt_token_ids): the 0.26.0 line's PoolingRunner (0003) makes one and pads as V1
# does; upstream's PoolingRunner pads with 0 (0.27.0) and makes no device copy (0.29.0),
# its poolers reading the host copy only.
@pytest.mark.line("0.26.0")
def test_token_ids_for_the_pooler_are_on_the_device_too(minilm_config):
    """The token ids on the host padded with the vocabulary size, as the V1
    input batch's ``_make_prompt_token_ids_cpu_tensor`` lays them out, and a
    copy on the device."""
    _, _, metadata = step_pooling(minilm_config)
    vocab = minilm_config.model_config.get_vocab_size()
    expected = torch.tensor([[7, 5, 7, 9, vocab, vocab], [7, 1, vocab, vocab, vocab, vocab],
                             [3, 3, 3, 7, 2, 7]], dtype=torch.int64)
    torch.testing.assert_close(metadata.prompt_token_ids_cpu, expected, rtol=0, atol=0)
    device_ids = metadata.prompt_token_ids
    assert (device_ids.device.type, device_ids.dtype, tuple(device_ids.shape)) == ("meta", torch.int64, (3, 6))
