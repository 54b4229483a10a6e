"""Patch 0008: MRV2's native input preparation computes what its Triton
kernels compute, element for element.

Two copies of MRV2's per-request state (``RequestState``, ``BlockTables``, the
input buffers) go through the same random steps: requests added with mixed
prompt lengths (some resumed past their prompt), removed, given new blocks,
scheduled in chunks and in random batch order, decode entries with draft
tokens. One copy is MRV2's own (``RequestState``, ``BlockTables`` and
``input_batch``'s kernel wrappers: Triton kernels), the other what the CPU
runner sets in their place where Triton has no backend
(``vllm/v1/worker/cpu/input_preparation.py``: ``NativeRequestState``,
``NativeBlockTables`` and its four input-batch functions). After every step
every buffer is compared exactly (``torch.testing.assert_close`` with rtol =
atol = 0).

The Triton side needs Triton: on a CPU that is its interpreter, which vLLM
only takes into account at import (``HAS_TRITON``). So when this process runs
without ``TRITON_INTERPRET=1``, the one test defined here runs this module in
a fresh interpreter process with it and checks that every case passed.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

# The native state classes and functions the CPU runner sets as its class attributes: the
# 0.26.0 line's 0008; upstream launches kernels through its dispatcher from 0.31.0, where the
# 0.32.0 line registers them (tests/unit/test_mrv2_native_kernels.py).
pytestmark = pytest.mark.line("0.26.0")

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"

# (name, KV-cache block sizes, kernel block sizes, context parallelism, draft tokens)
LAYOUTS = [
    ("one-group", [16], [16], (1, 0, 1), 0),
    ("two-groups", [16, 32], [16, 16], (1, 0, 1), 2),
    ("context-parallel", [16], [16], (2, 1, 4), 1),
]
SEEDS = [0, 1, 2]
MAX_REQS, MAX_LEN, MAX_TOKENS, STEPS = 48, 384, 1024, 8


if not INTERPRETED:

    def test_native_kernels_match_triton_under_the_interpreter(run_under_interpreter):
        # every case passed (each layout and seed, and the interpreter check), none skipped or failed
        assert run_under_interpreter(__file__) == {"passed": len(LAYOUTS) * len(SEEDS) + 1}

else:
    import torch

    # The CPU worker's set-up (pinned memory and UVA buffers as plain host
    # tensors, host-to-device copies as host tensors), as MRV2 runs on the CPU.
    import vllm.v1.worker.cpu.shm  # noqa: F401
    from vllm.triton_utils import HAS_TRITON
    from vllm.v1.worker.cpu import input_preparation
    from vllm.v1.worker.gpu import input_batch as ib
    from vllm.v1.worker.gpu.block_table import BlockTables
    from vllm.v1.worker.gpu.states import RequestState

    DEVICE = torch.device("cpu")

    def test_triton_side_runs_under_the_interpreter():
        # (TRITON_VIA_INTERPRETER is patch 0001's business: where Triton has a
        # GPU backend it stays false, yet the kernels below are interpreted.)
        from triton.runtime.interpreter import InterpretedFunction

        from vllm.v1.worker.gpu.input_batch import _prepare_prefill_inputs_kernel

        assert HAS_TRITON
        assert isinstance(_prepare_prefill_inputs_kernel, InterpretedFunction)

    class Side:
        """One copy of the state MRV2 prepares a step's inputs from."""

        def __init__(self, native: bool, block_sizes, kernel_block_sizes, cp, drafts):
            # the input-batch functions: input_batch.py's or their native counterparts
            self.kernels = input_preparation if native else ib
            request_state_cls = input_preparation.NativeRequestState if native else RequestState
            block_tables_cls = input_preparation.NativeBlockTables if native else BlockTables
            self.rs = request_state_cls(MAX_REQS, MAX_LEN, MAX_TOKENS, drafts, 1000, DEVICE)
            cp_size, cp_rank, cp_interleave = cp
            blocks = [-(-MAX_LEN // (bs * cp_size)) for bs in block_sizes]
            self.bt = block_tables_cls(block_sizes, MAX_REQS, MAX_TOKENS, blocks, DEVICE,
                                       kernel_block_sizes, cp_size, cp_rank, cp_interleave)
            self.input_ids = torch.zeros(MAX_TOKENS, dtype=torch.int32)
            self.positions = torch.zeros(MAX_TOKENS, dtype=torch.int64)
            self.seq_lens = torch.zeros(MAX_REQS, dtype=torch.int32)
            self.logits_indices = None

        def apply_staged_writes(self):
            self.rs.apply_staged_writes()
            self.bt.apply_staged_writes()

        def step(self, idx_mapping, query_start_loc, cu_num_logits, num_logits, pad):
            rs, n, k = self.rs, idx_mapping.shape[0], self.kernels
            k.prepare_prefill_inputs(
                self.input_ids, rs.next_prefill_tokens, idx_mapping, query_start_loc,
                rs.all_token_ids.gpu, rs.prefill_len.gpu, rs.num_computed_tokens.gpu)
            k.prepare_pos_seq_lens(
                idx_mapping, query_start_loc, rs.num_computed_tokens.gpu, self.positions,
                self.seq_lens)
            self.logits_indices = k.combine_sampled_and_draft_tokens(
                self.input_ids, idx_mapping, rs.last_sampled_tokens, query_start_loc,
                self.seq_lens[: n + pad], rs.prefill_len.gpu, rs.draft_tokens, cu_num_logits,
                num_logits)
            self.bt.gather_block_tables(idx_mapping, num_reqs_padded=n + pad)
            num_tokens = int(query_start_loc[n])
            self.bt.compute_slot_mappings(
                idx_mapping, query_start_loc, self.positions, num_tokens_padded=num_tokens)
            k.post_update_num_computed_tokens(idx_mapping, rs.num_computed_tokens.gpu, query_start_loc)

        def buffers(self) -> dict:
            rs, bt = self.rs, self.bt
            out = {
                "input_ids": self.input_ids, "positions": self.positions,
                "seq_lens": self.seq_lens, "next_prefill_tokens": rs.next_prefill_tokens,
                "num_computed_tokens": rs.num_computed_tokens.gpu,
                "all_token_ids": rs.all_token_ids.gpu, "total_len": rs.total_len.gpu,
                "slot_mappings": bt.slot_mappings, "logits_indices": self.logits_indices,
            }
            for g in range(bt.num_kv_cache_groups):
                out[f"block_table[{g}]"] = bt.block_tables[g].gpu
                out[f"input_block_table[{g}]"] = bt.input_block_tables[g]
            return out

    @pytest.mark.parametrize("seed", SEEDS)
    @pytest.mark.parametrize("layout", LAYOUTS, ids=[layout[0] for layout in LAYOUTS])
    def test_native_input_preparation_equals_triton(layout, seed):
        _, block_sizes, kernel_block_sizes, cp, drafts = layout
        rng = np.random.default_rng(seed)
        triton_side = Side(False, block_sizes, kernel_block_sizes, cp, drafts)
        native_side = Side(True, block_sizes, kernel_block_sizes, cp, drafts)
        sides = (triton_side, native_side)
        prefill = {}  # req_id -> prefill length
        next_id = 0
        steps_with_decode = 0
        for step in range(STEPS):
            # Remove some requests, add new ones (mixed lengths, some resumed
            # with output tokens already in their prefill).
            active = sorted(prefill)
            for req_id in active:
                if rng.random() < 0.2:
                    for s in sides:
                        s.rs.remove_request(req_id)
                    del prefill[req_id]
            free = MAX_REQS - len(prefill)
            for _ in range(int(rng.integers(0, min(free, 20) + 1))):
                req_id = f"r{next_id}"
                next_id += 1
                length = int(rng.choice([1, 2, 7, 64, 200, int(rng.integers(1, MAX_LEN - 40))]))
                prompt_len = max(1, length - int(rng.integers(0, 3)))
                tokens = rng.integers(0, 1000, length).tolist()
                computed = int(rng.integers(0, length)) if rng.random() < 0.2 else 0
                for s in sides:
                    s.rs.add_request(req_id, prompt_len, tokens, computed, max_tokens=32)
                prefill[req_id] = length
            # Block ids: a fresh table for new requests, more blocks for some
            # others (within the table's width, as the KV-cache manager does).
            bt = triton_side.bt
            for req_id in prefill:
                slot = triton_side.rs.req_id_to_index[req_id]
                fresh = bool(bt.num_blocks.np[0, slot] == 0)
                if not fresh and rng.random() > 0.3:
                    continue
                ids = []
                for g in range(len(block_sizes)):
                    room = (bt.block_tables[g].gpu.shape[1] - bt.num_blocks.np[g, slot]) \
                        // bt.blocks_per_kv_block[g]
                    count = int(rng.integers(1, room // 2 + 1)) if room > 1 else 0
                    ids.append(rng.integers(1, 4000, count).tolist())
                for s in sides:
                    s.bt.append_block_ids(slot, tuple(ids), overwrite=fresh)
            for s in sides:
                s.apply_staged_writes()
            # Random draft and last sampled tokens, identical on both sides.
            last = torch.from_numpy(rng.integers(0, 1000, (MAX_REQS, 1)))
            draft = torch.from_numpy(rng.integers(0, 1000, (MAX_REQS, drafts)))
            for s in sides:
                s.rs.last_sampled_tokens.copy_(last)
                s.rs.draft_tokens.copy_(draft)
            # Schedule a random subset in random order: prefill chunks, or one
            # token plus drafts for requests past their prefill.
            nc = triton_side.rs.num_computed_tokens.gpu.numpy()
            order = [r for r in prefill if rng.random() < 0.8]
            if step == 3:
                order = []  # a step with no request of this state (e.g. all aborted)
            rng.shuffle(order)
            idx, lens, logits = [], [], []
            budget = MAX_TOKENS - 8
            for req_id in order:
                slot = triton_side.rs.req_id_to_index[req_id]
                left = prefill[req_id] - int(nc[slot])
                if left > 0:
                    q = int(rng.integers(1, left + 1)) if rng.random() < 0.5 else left
                    n_logits = 1
                else:
                    n_logits = 1 + int(rng.integers(0, drafts + 1))
                    q = n_logits
                if int(nc[slot]) + q > MAX_LEN - 1 or q > budget:
                    continue
                budget -= q
                idx.append(slot)
                lens.append(q)
                logits.append(n_logits)
                steps_with_decode += left <= 0
            idx_mapping = torch.tensor(idx, dtype=torch.int32)
            query_start_loc = torch.zeros(MAX_REQS + 1, dtype=torch.int32)
            query_start_loc[1 : len(lens) + 1] = torch.tensor(np.cumsum(lens), dtype=torch.int32)
            query_start_loc[len(lens) + 1 :] = int(sum(lens))
            cu_num_logits = torch.tensor([0, *np.cumsum(logits)], dtype=torch.int32)
            pad = int(rng.integers(0, 4))
            for s in sides:
                s.step(idx_mapping, query_start_loc, cu_num_logits, int(sum(logits)), pad)
            expected, actual = triton_side.buffers(), native_side.buffers()
            for name, value in expected.items():
                # exact (rtol = atol = 0); a failure names the indices that differ
                torch.testing.assert_close(actual[name], value, rtol=0, atol=0,
                                           msg=lambda m, name=name, step=step: f"step {step}: {name}, native vs triton: {m}")
        assert next_id > 20
        if drafts:
            assert steps_with_decode > 0
