"""Without Triton, every MRV2 kernel a pooling step launches runs natively.

This process is what a CPU without triton-cpu runs: ``HAS_TRITON`` is false
and MRV2's ``@triton.jit`` kernels are plain functions (``TritonPlaceholder``),
so a launch of any Triton kernel, ``kernel[grid](...)``, raises
``TypeError: 'function' object is not subscriptable``. The tests drive what
MRV2's CPU runner prepares a pooling step with (``cpu_step_api``: on the
0.26.0 line the runner's class attributes, set by patch 0008 to native state
classes and functions; from 0.31.0 on MRV2's own, whose launches upstream's
kernel dispatcher sends to the overrides the CPU platform registers, as the
worker does) through the calls a pooling step makes, written out here in
the order ``GPUModelRunner``'s ``add_requests``, ``update_requests``,
``prepare_inputs``, ``prepare_attn`` and ``postprocess_num_computed_tokens``
make them (that the runner itself calls through these seams is shown by the
engine runs without Triton: the matrix rows and the smoke job on MRV2), for
an encoder-only model (no KV-cache
group), a decoder (one group, a chunked prompt and a prefix-cache hit) and a
decoder with sliding-window and full-attention layers (two groups: the fused
staged writes). Each step's buffers are checked against values computed
here by hand. On the 0.32.0 line every other launched MRV2 kernel must
belong to a feature such a step leaves out.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import numpy as np
import pytest
import torch

import vllm.v1.worker.cpu.shm  # noqa: F401  (the CPU worker's buffers)
from scripts.series.lines import get_line
from vllm.triton_utils import HAS_TRITON
from vllm.v1.worker.cpu.model_runner import CPUModelRunner
from vllm.v1.worker.gpu import input_batch as ib
from vllm.v1.worker.gpu.block_table import BlockTables
from vllm.v1.worker.gpu.states import RequestState

# The kernel dispatcher (vllm/triton_utils/dispatcher.py) is upstream's from 0.31.0: the
# 0.32.0 line's 0008 registers its native kernels there; the 0.26.0 line's 0008 sets them
# as the CPU runner's class attributes.
ON_DISPATCHER = pytest.mark.line("0.32.0")
# From 0.34.0 MRV2 without Triton is upstream's standalone CPU runner, which prepares its inputs
# with the CPU extension's ops (test_cpu_standalone_runner_x86.py; upstream's own tests of it run
# with make upstream-tests), not with MRV2's Triton kernels driven here.
pytestmark = pytest.mark.line("0.26.0", "0.32.0")

MAX_REQS, MAX_LEN, MAX_TOKENS = 8, 64, 32

# The launched MRV2 kernels without a native implementation, by module (and the
# generation kernels of input_batch by name): none is reached by a pooling step of a
# model that VllmConfig sends to MRV2 without Triton (every launch recorded under
# Triton's interpreter, issue 25: BERT's five tasks, ColBERT, Qwen3 embed and
# token_embed, Gemma3 embed).
NOT_REACHED_BY_POOLING = {
    "vllm.v1.worker.gpu.cp_utils": "decode context parallelism",
    "vllm.v1.worker.gpu.metrics.logits": "generation (logits NaN count)",
    "vllm.v1.worker.gpu.mm.rope": "M-RoPE positions",
    "vllm.v1.worker.gpu.model_states.mamba_hybrid": "hybrid models (Mamba state)",
    "vllm.v1.worker.gpu.model_states.prompt_embeds": "prompt embeddings",
    "vllm.v1.worker.gpu.model_states.recoverssm": "hybrid models (RecoverSSM)",
    "vllm.v1.worker.gpu.structured_outputs": "generation (grammar bitmask)",
    "vllm.v1.worker.gpu.sample": "generation (sampling)",
    "vllm.v1.worker.gpu.spec_decode": "speculative decoding",
    "vllm.v1.worker.gpu.input_batch._get_num_sampled_and_rejected_kernel": "generation",
    "vllm.v1.worker.gpu.input_batch._post_update_kernel": "generation (sampled tokens)",
    "vllm.v1.worker.gpu.input_batch._expand_idx_mapping_kernel": "speculative decoding",
}


def kernel_overrides() -> dict:
    """``KERNEL_OVERRIDES`` of the native input preparation (0.32.0's 0008)."""
    from vllm.v1.worker.cpu.input_preparation import KERNEL_OVERRIDES

    return KERNEL_OVERRIDES


@pytest.fixture(scope="module", autouse=True)
def overrides_registered():
    """On the 0.32.0 line, the CPU platform's overrides, registered as a CPU
    worker registers them when it starts (``WorkerWrapperBase``); they stay
    for the process, as after any in-process engine."""
    assert not HAS_TRITON, "this test is about a CPU without a Triton backend"
    if get_line().name != "0.26.0":
        from vllm.platforms.cpu import CpuPlatform

        CpuPlatform.register_triton_kernel_overrides()


def cpu_step_api():
    """What MRV2's CPU runner prepares a pooling step with here: ``(request
    state class, block tables class, namespace of prepare_prefill_inputs,
    prepare_pos_seq_lens, combine_sampled_and_draft_tokens,
    post_update_num_computed_tokens)``. On the 0.26.0 line the runner's class
    attributes (``GPUModelRunner.request_state_cls``, ``block_tables_cls`` and
    the four functions); on the 0.32.0 line MRV2's own classes and
    ``input_batch``'s functions (the runner sets none of its own)."""
    if get_line().name == "0.26.0":
        return CPUModelRunner.request_state_cls, CPUModelRunner.block_tables_cls, CPUModelRunner
    assert not hasattr(CPUModelRunner, "request_state_cls")
    return RequestState, BlockTables, ib


@pytest.mark.line("0.26.0")
def test_input_preparation_kind_reads_the_runner_class():
    """What the smoke job and the bench report: native for the CPU MRV2 runner
    here; a V1 runner (no ``block_tables_cls``) prepares no MRV2 inputs."""
    from types import SimpleNamespace

    from scripts.validation.engine import input_preparation_kind
    from vllm.v1.worker.cpu_model_runner import CPUModelRunner as V1CPUModelRunner

    def worker(cls):
        return SimpleNamespace(model_runner=object.__new__(cls))

    assert input_preparation_kind(worker(CPUModelRunner)) == "native"
    assert input_preparation_kind(worker(V1CPUModelRunner)) == "triton"


@pytest.mark.line("0.26.0")
def test_cpu_runner_sets_native_input_preparation_without_triton():
    from vllm.v1.worker.cpu import input_preparation as native
    from vllm.v1.worker.gpu.model_runner import GPUModelRunner

    assert GPUModelRunner.request_state_cls is RequestState
    assert GPUModelRunner.block_tables_cls is BlockTables
    assert CPUModelRunner.request_state_cls is native.NativeRequestState
    assert CPUModelRunner.block_tables_cls is native.NativeBlockTables
    for name in ("prepare_prefill_inputs", "prepare_pos_seq_lens",
                 "combine_sampled_and_draft_tokens", "post_update_num_computed_tokens"):
        assert getattr(GPUModelRunner, name) is getattr(ib, name)
        assert getattr(CPUModelRunner, name) is getattr(native, name)


def _triton_kernels() -> dict[str, bool]:
    """Every ``@triton.jit`` function under ``vllm/v1/worker/gpu/``: qualified
    name -> whether it is launched (``name[...]`` somewhere in its module)
    rather than only called from other kernels."""
    root = Path(importlib.import_module("vllm.v1.worker.gpu").__file__).parent
    found = {}
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text())
        module = "vllm." + ".".join(path.relative_to(root.parents[2]).with_suffix("").parts)
        launched = {node.value.id for node in ast.walk(tree)
                    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)}
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and any(
                    "jit" in ast.unparse(d) for d in node.decorator_list):
                found[f"{module}.{node.name}"] = node.name in launched
    return found


@ON_DISPATCHER
def test_every_override_is_an_mrv2_kernel_and_registered():
    from vllm.triton_utils.dispatcher import KernelOverride

    kernels = _triton_kernels()
    assert len(kernels) >= 90  # 96 top-level @triton.jit functions there on 0.32.0
    for name in kernel_overrides():
        assert kernels.get(name) is True, f"{name} is not a launched MRV2 kernel"
        module_name, attr = name.rsplit(".", 1)
        assert isinstance(getattr(importlib.import_module(module_name), attr), KernelOverride)


@ON_DISPATCHER
def test_every_other_mrv2_kernel_is_off_the_pooling_path():
    """A launched MRV2 kernel that is neither native nor of a feature the
    pooling steps without Triton leave out (a new kernel of a later release,
    say) would launch Triton: it needs a native implementation, or its place
    in ``NOT_REACHED_BY_POOLING`` shown by a recorded run."""
    other = [name for name, launched in _triton_kernels().items()
             if launched and name not in kernel_overrides()]
    unplaced = [name for name in other if not any(
        name == known or name.startswith(known + ".") for known in NOT_REACHED_BY_POOLING)]
    assert other
    assert not unplaced, f"launched MRV2 kernels neither native nor off the pooling path: {unplaced}"


def _state(block_sizes):
    request_state_cls, block_tables_cls, _ = cpu_step_api()
    rs = request_state_cls(MAX_REQS, MAX_LEN, MAX_TOKENS, 0, 1000, torch.device("cpu"))
    # 0.26.0's BlockTables takes the attention kernels' block sizes too (here the same)
    extra = {"kernel_block_sizes": block_sizes} if get_line().name == "0.26.0" else {}
    bt = block_tables_cls(block_sizes, MAX_REQS, MAX_TOKENS,
                          [MAX_LEN // bs for bs in block_sizes], torch.device("cpu"), **extra)
    return rs, bt


def _step(rs, bt, schedule):
    """One pooling step of MRV2's runner: ``schedule`` lists (request slot,
    tokens); returns the step's buffers."""
    idx = torch.tensor([slot for slot, _ in schedule], dtype=torch.int64)
    n = len(schedule)
    qsl = np.zeros(MAX_REQS + 1, dtype=np.int32)
    np.cumsum([q for _, q in schedule], out=qsl[1 : n + 1])
    qsl[n + 1 :] = qsl[n]
    query_start_loc = torch.from_numpy(qsl[: n + 1].copy())
    input_ids = torch.zeros(MAX_TOKENS, dtype=torch.int32)
    positions = torch.zeros(MAX_TOKENS, dtype=torch.int64)
    seq_lens = torch.full((MAX_REQS,), 99, dtype=torch.int32)
    kernels = cpu_step_api()[2]
    kernels.prepare_prefill_inputs(input_ids, rs.next_prefill_tokens, idx, query_start_loc,
                                   rs.all_token_ids.gpu, rs.prefill_len.gpu, rs.num_computed_tokens.gpu)
    kernels.prepare_pos_seq_lens(idx, query_start_loc, rs.num_computed_tokens.gpu, positions, seq_lens)
    logits_indices = kernels.combine_sampled_and_draft_tokens(
        input_ids, idx, rs.last_sampled_tokens, query_start_loc, seq_lens[:n],
        rs.prefill_len.gpu, rs.draft_tokens, torch.arange(n + 1, dtype=torch.int32), n)
    tables = bt.gather_block_tables(idx, num_reqs_padded=n)
    slots = bt.compute_slot_mappings(idx, query_start_loc, positions, num_tokens_padded=int(qsl[n]))
    kernels.post_update_num_computed_tokens(idx, rs.num_computed_tokens.gpu, query_start_loc)
    t = int(qsl[n])
    return dict(input_ids=input_ids[:t].tolist(), positions=positions[:t].tolist(),
                seq_lens=seq_lens.tolist(), logits_indices=logits_indices.tolist(),
                tables=[x.tolist() for x in tables], slots=slots.tolist())


def test_encoder_only_pooling_step():
    rs, bt = _state([])  # encoder-only attention: no KV-cache group
    prompts = {"a": [5, 6, 7], "b": [9, 8, 7, 6, 5]}
    for req_id, tokens in prompts.items():
        rs.add_request(req_id, len(tokens), tokens, 0, max_tokens=1)
    rs.apply_staged_writes()
    bt.apply_staged_writes()
    a, b = rs.req_id_to_index["a"], rs.req_id_to_index["b"]
    out = _step(rs, bt, [(b, 5), (a, 3)])
    assert out["input_ids"] == [9, 8, 7, 6, 5, 5, 6, 7]
    assert out["positions"] == [0, 1, 2, 3, 4, 0, 1, 2]
    assert out["seq_lens"] == [5, 3] + [0] * (MAX_REQS - 2)
    assert out["logits_indices"] == [4, 7]
    assert out["tables"] == [] and out["slots"] == []
    assert rs.num_computed_tokens.gpu[[a, b]].tolist() == [3, 5]


@pytest.mark.parametrize("block_sizes", [[4], [4, 8]], ids=["one-group", "two-groups"])
def test_decoder_pooling_steps_chunked_and_prefix_cached(block_sizes):
    rs, bt = _state(block_sizes)
    long = list(range(100, 120))  # 20 tokens: 16 this step, 4 the next
    cached = [50, 51, 52, 53, 54, 55]  # 4 tokens computed already (a prefix-cache hit)
    rs.add_request("long", 20, long, 0, max_tokens=1)
    rs.add_request("cached", 6, cached, 4, max_tokens=1)
    slots = {r: rs.req_id_to_index[r] for r in ("long", "cached")}
    blocks = {"long": [7, 3, 9, 2, 11], "cached": [5, 6]}
    for req_id, ids in blocks.items():
        bt.append_block_ids(slots[req_id], tuple(ids for _ in block_sizes), overwrite=True)
    rs.apply_staged_writes()
    bt.apply_staged_writes()
    out = _step(rs, bt, [(slots["cached"], 2), (slots["long"], 16)])
    assert out["input_ids"] == [54, 55] + long[:16]
    assert out["positions"] == [4, 5] + list(range(16))
    assert out["seq_lens"][:2] == [6, 16] and set(out["seq_lens"][2:]) == {0}
    assert out["logits_indices"] == [1, 17]
    # [max_num_reqs] on 0.26.0, [rows, max_num_reqs] later: row 0 either way
    next_prefill = rs.next_prefill_tokens.reshape(-1, MAX_REQS)[0]
    assert next_prefill[slots["long"]].item() == long[16]
    for g, bs in enumerate(block_sizes):
        assert out["tables"][g][0][:2] == blocks["cached"]
        assert out["tables"][g][1][:5] == blocks["long"]
        want = [blocks["cached"][p // bs] * bs + p % bs for p in (4, 5)]
        want += [blocks["long"][p // bs] * bs + p % bs for p in range(16)]
        assert out["slots"][g] == want, f"group {g}"
    # the long prompt's last chunk, after one more block in every group
    bt.append_block_ids(slots["long"], tuple([13] for _ in block_sizes), overwrite=False)
    bt.apply_staged_writes()
    out = _step(rs, bt, [(slots["long"], 4)])
    assert out["input_ids"] == long[16:]
    assert out["positions"] == [16, 17, 18, 19]
    assert out["seq_lens"][0] == 20
    assert out["logits_indices"] == [3]
    for g, bs in enumerate(block_sizes):
        assert out["tables"][g][0][:6] == blocks["long"] + [13]
        assert out["slots"][g] == [blocks["long"][p // bs] * bs + p % bs for p in range(16, 20)]
    assert rs.num_computed_tokens.gpu[slots["long"]].item() == 20
