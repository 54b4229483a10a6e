"""MRV2's native CPU kernels (``vllm/v1/worker/cpu/input_preparation.py``)
compute what its Triton kernels compute, element for element.

Two copies of MRV2's per-request state (``RequestState``, ``BlockTables``,
the input buffers) go through the same random steps: requests added with
mixed prompt lengths (some resumed past their prompt, some with prefix-cache
hits), removed, given new blocks, scheduled in chunks and in random batch
order, decode entries with draft tokens, padded batch rows, dummy entries
(request slot -1, for the slot mappings). One copy runs the Triton kernels under Triton's
interpreter. In the other, every kernel of ``KERNEL_OVERRIDES`` is the
dispatcher's ``KernelOverride`` of its native implementation, put where the
kernel lives for the copy's calls only (what ``register_kernels`` does for
the process), and reached through MRV2's own wrappers and state classes
(``input_batch.prepare_prefill_inputs``, ``BlockTables.gather_block_tables``,
``StagedWriteTensor.apply_write``, ...), so each implementation gets the
launch arguments and grid MRV2 gives its kernel. After every operation every
buffer of both copies is compared exactly. The steps' sizes straddle
``FEW_PROGRAMS``, so both paths of the native functions (per program, and
vectorised) run.

Layouts: one KV-cache group, two groups of different block sizes (the
fused multi-group staged writes, as sliding-window plus full attention
models have), a group without slot mapping (with a prefill lookahead of 3),
and no KV-cache group at all (encoder-only models). Decode context
parallelism has no native slot mapping (and Triton's interpreter cannot run
that branch of the kernel: it loads ``dcp_sharded`` as a mask of an
unsupported dtype): the override refuses it by name.

The Triton side needs Triton: on a CPU that is its interpreter, which vLLM
only takes into account at import (``HAS_TRITON``, the line's first patch).
So when this process runs without ``TRITON_INTERPRET=1``, the one test defined
here runs this module in a fresh process with it and checks that every case
passed.
"""

from __future__ import annotations

import contextlib
import os

import numpy as np
import pytest

# The kernel dispatcher (vllm/triton_utils/dispatcher.py) is upstream's from 0.31.0: the
# 0.32.0 line's 0008 registers its native kernels there (0.26.0's: test_native_kernels.py).
pytestmark = pytest.mark.line("0.32.0")

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"

# name -> (block sizes, slot mapping enabled, dcp sharded, (cp size, rank, interleave),
#          speculative steps, prefill lookahead)
LAYOUTS = {
    "one-group": ([16], None, None, (1, 0, 1), 0, 1),
    "two-groups": ([16, 32], None, None, (1, 0, 1), 2, 1),
    "no-slot-mapping": ([16, 16], [True, False], None, (1, 0, 1), 1, 3),
    "encoder-only": ([], None, None, (1, 0, 1), 0, 1),
}
SEEDS = [0, 1]
MAX_REQS, MAX_LEN, MAX_TOKENS, STEPS = 24, 256, 512, 7
KERNEL_MODULES = ("buffer_utils", "input_batch", "block_table")


if not INTERPRETED:

    def test_native_kernels_match_triton_under_the_interpreter(run_under_interpreter):
        # every layout and seed, the interpreter check and the four edge cases passed
        assert run_under_interpreter(__file__) == {"passed": len(LAYOUTS) * len(SEEDS) + 5}

else:
    import importlib

    import torch

    # The CPU worker's set-up (UVA buffers as plain host tensors), as MRV2 runs
    # on the CPU.
    import vllm.v1.worker.cpu.shm  # noqa: F401
    from vllm.triton_utils import HAS_TRITON
    from vllm.triton_utils.dispatcher import KernelOverride
    from vllm.v1.worker.cpu.input_preparation import FEW_PROGRAMS, KERNEL_OVERRIDES
    from vllm.v1.worker.gpu import input_batch as ib
    from vllm.v1.worker.gpu.block_table import BlockTables
    from vllm.v1.worker.gpu.states import RequestState

    DEVICE = torch.device("cpu")

    def _kernel_homes():
        """(module, attribute, native implementation) of every override."""
        for name, impl in KERNEL_OVERRIDES.items():
            module_name, attr = name.rsplit(".", 1)
            yield importlib.import_module(module_name), attr, impl

    @contextlib.contextmanager
    def native_kernels():
        """MRV2's kernels replaced by the dispatcher's wrappers of the native
        implementations, where MRV2 looks them up, for the block only."""
        saved = []
        for module, attr, impl in _kernel_homes():
            original = getattr(module, attr)
            saved.append((module, attr, original))
            setattr(module, attr, KernelOverride(original, impl))
        try:
            yield
        finally:
            for module, attr, original in saved:
                setattr(module, attr, original)

    def test_triton_side_runs_under_the_interpreter():
        from triton.runtime.interpreter import InterpretedFunction

        assert HAS_TRITON
        for module, attr, _ in _kernel_homes():
            assert isinstance(getattr(module, attr), InterpretedFunction), attr
        assert {m.__name__.rsplit(".", 1)[1] for m, _, _ in _kernel_homes()} == set(
            KERNEL_MODULES)

    class Side:
        """One copy of the state MRV2 prepares a step's inputs from."""

        def __init__(self, native: bool, layout):
            block_sizes, enabled, sharded, cp, spec_steps, lookahead = layout
            self.native = native
            self.rs = RequestState(MAX_REQS, MAX_LEN, MAX_TOKENS, spec_steps, 1000, DEVICE,
                                   num_prefill_lookahead=lookahead)
            cp_size, cp_rank, cp_interleave = cp
            blocks = [-(-MAX_LEN // (bs * cp_size)) + 1 for bs in block_sizes]
            self.bt = BlockTables(block_sizes, MAX_REQS, MAX_TOKENS, blocks, DEVICE,
                                  cp_size=cp_size, cp_rank=cp_rank, cp_interleave=cp_interleave,
                                  slot_mapping_enabled=enabled, dcp_sharded=sharded)
            self.input_ids = torch.zeros(MAX_TOKENS, dtype=torch.int32)
            self.positions = torch.zeros(MAX_TOKENS, dtype=torch.int64)
            self.seq_lens = torch.zeros(MAX_REQS, dtype=torch.int32)
            self.logits_indices = None
            self.gathered = ()
            self.slots = None

        def run(self, call):
            if not self.native:
                return call()
            with native_kernels():
                return call()

        def apply_staged_writes(self):
            self.run(self.rs.apply_staged_writes)
            self.run(self.bt.apply_staged_writes)

        def step(self, idx_mapping, query_start_loc, cu_num_logits, num_logits, pad, prefill):
            rs, n = self.rs, idx_mapping.shape[0]
            if prefill:  # as the runner: only steps with a prefill entry prepare prefill inputs
                self.run(lambda: ib.prepare_prefill_inputs(
                    self.input_ids, rs.next_prefill_tokens, idx_mapping, query_start_loc,
                    rs.all_token_ids.gpu, rs.prefill_len.gpu, rs.num_computed_tokens.gpu))
            self.run(lambda: ib.prepare_pos_seq_lens(
                idx_mapping, query_start_loc, rs.num_computed_tokens.gpu, self.positions,
                self.seq_lens))
            self.logits_indices = self.run(lambda: ib.combine_sampled_and_draft_tokens(
                self.input_ids, idx_mapping, rs.last_sampled_tokens, query_start_loc,
                self.seq_lens[: n + pad], rs.prefill_len.gpu, rs.draft_tokens, cu_num_logits,
                num_logits))
            self.gathered = self.run(
                lambda: self.bt.gather_block_tables(idx_mapping, num_reqs_padded=n + pad))
            num_tokens = int(query_start_loc[n])
            self.slots = self.run(lambda: self.bt.compute_slot_mappings(
                idx_mapping, query_start_loc, self.positions, num_tokens_padded=num_tokens))
            self.run(lambda: ib.post_update_num_computed_tokens(
                idx_mapping, rs.num_computed_tokens.gpu, query_start_loc))

        def buffers(self) -> dict:
            rs, bt = self.rs, self.bt
            out = {
                "input_ids": self.input_ids, "positions": self.positions,
                "seq_lens": self.seq_lens, "next_prefill_tokens": rs.next_prefill_tokens,
                "num_computed_tokens": rs.num_computed_tokens.gpu,
                "all_token_ids": rs.all_token_ids.gpu, "total_len": rs.total_len.gpu,
                "slot_mappings": bt.slot_mappings, "logits_indices": self.logits_indices,
                "num_blocks": bt.num_blocks.gpu,
            }
            for g in range(bt.num_kv_cache_groups):
                out[f"block_table[{g}]"] = bt.block_tables[g].gpu
                out[f"input_block_table[{g}]"] = bt.input_block_tables[g]
            for g, t in enumerate(self.gathered):
                out[f"gathered[{g}]"] = t
            return out

    def assert_same(a: Side, b: Side, when: str):
        ta, tb = a.buffers(), b.buffers()
        assert ta.keys() == tb.keys()
        for name in ta:
            if ta[name] is None:
                assert tb[name] is None, name
                continue
            assert torch.equal(ta[name], tb[name]), f"{name} differs after {when}"

    @pytest.mark.parametrize("seed", SEEDS)
    @pytest.mark.parametrize("layout", list(LAYOUTS))
    def test_native_input_preparation_equals_triton(layout, seed):
        rng = np.random.default_rng(seed)
        sides = (Side(False, LAYOUTS[layout]), Side(True, LAYOUTS[layout]))
        triton_side = sides[0]
        spec_steps = LAYOUTS[layout][4]
        prefill = {}  # req_id -> prefill length
        next_id = 0
        kinds = set()
        few_kinds = set()  # entry kinds of non-empty steps that take the per-program path
        batch_sizes, write_counts = set(), set()
        for step in range(STEPS):
            for req_id in sorted(prefill):
                if rng.random() < 0.2:
                    for s in sides:
                        s.rs.remove_request(req_id)
                    del prefill[req_id]
            free = MAX_REQS - len(prefill)
            added = int(rng.integers(0, min(free, 12) + 1))
            write_counts.add(added)
            for _ in range(added):
                req_id = f"r{next_id}"
                next_id += 1
                length = int(rng.choice([1, 2, 7, 40, 120, int(rng.integers(1, MAX_LEN - 40))]))
                prompt_len = max(1, length - int(rng.integers(0, 3)))  # resumed: output in prefill
                tokens = rng.integers(0, 1000, length).tolist()
                # prefix-cache hit: part of the prompt computed already
                computed = int(rng.integers(0, length)) if rng.random() < 0.25 else 0
                for s in sides:
                    s.rs.add_request(req_id, prompt_len, tokens, computed, max_tokens=16)
                prefill[req_id] = length
            bt = triton_side.bt
            for req_id in prefill:
                slot = triton_side.rs.req_id_to_index[req_id]
                fresh = bool(bt.num_kv_cache_groups and bt.num_blocks.np[0, slot] == 0)
                if bt.num_kv_cache_groups == 0 or (not fresh and rng.random() > 0.3):
                    continue
                ids = []
                for g in range(bt.num_kv_cache_groups):
                    room = bt.block_tables[g].gpu.shape[1] - int(bt.num_blocks.np[g, slot])
                    count = int(rng.integers(1, room // 2 + 1)) if room > 1 else 0
                    ids.append(rng.integers(1, 4000, count).tolist())
                for s in sides:
                    s.bt.append_block_ids(slot, tuple(ids), overwrite=fresh)
            for s in sides:
                s.apply_staged_writes()
            assert_same(*sides, f"staged writes of step {step}")

            last = torch.from_numpy(rng.integers(0, 1000, (MAX_REQS, 1)))
            draft = torch.from_numpy(rng.integers(0, 1000, (MAX_REQS, spec_steps)))
            for s in sides:
                s.rs.last_sampled_tokens.copy_(last)
                s.rs.draft_tokens.copy_(draft)
            nc = triton_side.rs.num_computed_tokens.gpu.numpy()
            order = [r for r in prefill if rng.random() < 0.8]
            if step == 3:
                order = []  # a step with no request of this state (e.g. all aborted)
            rng.shuffle(order)
            if step == STEPS - 1:  # a small last step, when most requests are past their prompt
                order = order[:FEW_PROGRAMS // 2]
            idx, lens, logits, has_prefill = [], [], [], False
            step_kinds = set()
            budget = MAX_TOKENS - 8
            for req_id in order:
                slot = triton_side.rs.req_id_to_index[req_id]
                left = prefill[req_id] - int(nc[slot])
                if left > 0:  # a prefill chunk
                    q = min(left, int(rng.integers(1, 160)))
                    n_logits = 1
                    has_prefill = True
                else:  # past the prompt: one token plus drafts
                    d = int(rng.integers(0, spec_steps + 1))
                    q, n_logits = 1 + d, 1 + d
                if q > budget:
                    continue
                budget -= q
                idx.append(slot)
                lens.append(q)
                logits.append(n_logits)
                step_kinds.add("prefill" if left > 0 else "decode")
            n = len(idx)
            kinds |= step_kinds
            batch_sizes.add(n)
            if 0 < n <= FEW_PROGRAMS:
                few_kinds |= step_kinds
            idx_mapping = torch.tensor(idx, dtype=torch.int64)
            qsl = np.zeros(MAX_REQS + 1, dtype=np.int32)
            np.cumsum(lens, out=qsl[1 : n + 1])
            qsl[n + 1 :] = qsl[n]
            pad = int(rng.integers(0, 3)) if n else 0  # padded batch rows
            query_start_loc = torch.from_numpy(qsl[: n + pad + 1].copy())
            cu = np.zeros(n + 1, dtype=np.int32)
            np.cumsum(logits, out=cu[1:])
            for s in sides:
                s.step(idx_mapping, query_start_loc, torch.from_numpy(cu), int(cu[-1]), pad,
                       has_prefill)
            assert_same(*sides, f"step {step}")
        assert {"prefill"} <= kinds  # the random steps did prefill chunks
        # both paths of the native functions ran: per program (steps of few requests, few
        # staged writes) and vectorised
        # (empty steps and steps without new requests launch nothing: not counted)
        assert min(batch_sizes - {0}) <= FEW_PROGRAMS < max(batch_sizes), sorted(batch_sizes)
        assert min(write_counts - {0}) <= FEW_PROGRAMS < max(write_counts), sorted(write_counts)
        assert few_kinds == {"prefill", "decode"}, few_kinds

    def _override(name):
        module_name, attr = name.rsplit(".", 1)
        module = importlib.import_module(module_name)
        return getattr(module, attr), KernelOverride(getattr(module, attr),
                                                     KERNEL_OVERRIDES[name])

    def test_gather_zeroes_padded_rows_as_the_kernel_does():
        # Rows past the batch (num_reqs <= row < num_reqs_padded) reach the
        # kernel only as its grid: stale ids there must be zeroed, rows past
        # the grid left as they were.
        outs = []
        for native in (False, True):
            kernel, override = _override(
                "vllm.v1.worker.gpu.block_table._gather_block_tables_kernel")
            src = torch.arange(8 * 6, dtype=torch.int32).reshape(8, 6)
            dst = torch.full((8, 6), 77, dtype=torch.int32)
            ptrs = lambda t: torch.tensor([t.data_ptr()], dtype=torch.uint64)  # noqa: E731
            num_blocks = torch.tensor([[3, 6, 0, 2, 1, 5, 4, 6]], dtype=torch.int32)
            launch = override if native else kernel
            launch[(1, 5)](torch.tensor([5, 1, 3], dtype=torch.int64), ptrs(src), ptrs(dst),
                           torch.tensor([6]), num_blocks, num_blocks.stride(0), 3,
                           BLOCK_SIZE=1024)
            outs.append(dst)
        assert torch.equal(outs[0], outs[1])
        assert outs[1][3:5].eq(0).all() and outs[1][5:].eq(77).all()
        assert outs[1][0].tolist() == [30, 31, 32, 33, 34, 77]

    def test_pos_seq_lens_pads_seq_lens_to_the_end():
        outs = []
        for native in (False, True):
            kernel, override = _override(
                "vllm.v1.worker.gpu.input_batch._prepare_pos_seq_lens_kernel")
            pos = torch.full((16,), -5, dtype=torch.int64)
            seq_lens = torch.full((6,), 9, dtype=torch.int32)
            launch = override if native else kernel
            launch[(3,)](pos, seq_lens, torch.tensor([4, 0], dtype=torch.int64),
                         torch.tensor([0, 3, 5], dtype=torch.int32),
                         torch.tensor([2, 0, 0, 0, 7, 0], dtype=torch.int32), 6,
                         BLOCK_SIZE=1024)
            outs.append((pos, seq_lens))
        for a, b in zip(*outs):
            assert torch.equal(a, b)
        assert outs[1][1].tolist() == [10, 4, 0, 0, 0, 0]
        assert outs[1][0][:5].tolist() == [7, 8, 9, 2, 3]

    def test_slot_mappings_of_a_dummy_entry_are_padding():
        # idx_mapping -1 marks a dummy (CUDA-graph padding) entry: its tokens
        # get PAD_ID without reading a block-table row; a group without slot
        # mapping pads every token.
        outs = []
        for native in (False, True):
            kernel, override = _override(
                "vllm.v1.worker.gpu.block_table._compute_slot_mappings_kernel")
            tables = [torch.arange(4 * 8, dtype=torch.int32).reshape(4, 8) + 100 * g
                      for g in range(3)]
            ptrs = torch.tensor([t.data_ptr() for t in tables], dtype=torch.uint64)
            slots = torch.full((3, 24), 55, dtype=torch.int64)
            launch = override if native else kernel
            launch[(3, 4)](20, torch.tensor([2, -1, 0], dtype=torch.int64),
                           torch.tensor([0, 5, 9, 16], dtype=torch.int32),
                           torch.arange(30, dtype=torch.int64) * 3,
                           ptrs, torch.tensor([8, 8, 8]), torch.tensor([4, 4, 2], dtype=torch.int32),
                           torch.tensor([True, False, True]), torch.tensor([True, True, True]),
                           slots, slots.stride(0), 0, CP_SIZE=1, CP_INTERLEAVE=1, PAD_ID=-1,
                           TRITON_BLOCK_SIZE=1024)
            outs.append(slots)
        assert torch.equal(outs[0], outs[1])
        got = outs[1]
        assert got[:, 5:9].eq(-1).all()  # the dummy entry
        assert got[1, :20].eq(-1).all()  # no slot mapping in group 1
        assert got[:, 16:20].eq(-1).all() and got[:, 20:].eq(55).all()  # padding to max_num_tokens
        # entry 0 (slot 2, positions 0, 3, .., 12; block size 4) in group 0
        assert got[0, :5].tolist() == [16 * 4 + 0, 16 * 4 + 3, 17 * 4 + 2, 18 * 4 + 1, 19 * 4 + 0]

    def test_decode_context_parallelism_is_refused_by_name():
        _, override = _override("vllm.v1.worker.gpu.block_table._compute_slot_mappings_kernel")
        table = torch.zeros(2, 4, dtype=torch.int32)
        slots = torch.zeros(1, 8, dtype=torch.int64)
        with pytest.raises(NotImplementedError, match="Decode context parallelism"):
            override[(1, 2)](8, torch.tensor([0]), torch.tensor([0, 2], dtype=torch.int32),
                             torch.arange(8), torch.tensor([table.data_ptr()], dtype=torch.uint64),
                             torch.tensor([4]), torch.tensor([4], dtype=torch.int32),
                             torch.tensor([True]), torch.tensor([True]), slots, 8, 0,
                             CP_SIZE=2, CP_INTERLEAVE=1, PAD_ID=-1, TRITON_BLOCK_SIZE=1024)
