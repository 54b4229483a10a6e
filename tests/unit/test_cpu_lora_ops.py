"""The PyTorch LoRA ops the CPU platform runs (``vllm/lora/ops/torch_ops``,
through ``PunicaWrapperCPU``) on a batch that mixes tokens with a LoRA and
tokens without one (issue 28 item 5). A token's LoRA index is its adapter's
slot, and -1 for none (``PunicaWrapperBase``: "an index of -1 means no lora
should be applied"): such a token gets no LoRA delta, and its rows of the
output are left as they were, as the Triton kernels leave them. On the base
the ops gathered the adapter weights with the index as it was, so -1 took
the last slot: with one slot (``max_loras=1``, the default) every token
without a LoRA got the adapter of the one with it.

Expected values: the LoRA computation written out per token, ``x @ A.T *
scale`` (shrink) and ``x @ B.T`` (expand), from the stacked weights' layout
``[slots, 1, out, in]``."""

from __future__ import annotations

import pytest
import torch

from vllm.lora.ops.torch_ops import (bgmv_expand, bgmv_expand_slice, bgmv_shrink, sgmv_expand,
                                     sgmv_expand_slice, sgmv_shrink)
from vllm.lora.punica_wrapper.utils import compute_meta

HIDDEN, RANK, OUT = 16, 4, 24
# tokens: two of a LoRA request (slot 0), three without, one of the slot-1 request, two without
TOKEN_SLOTS = [0, 0, -1, -1, -1, 1, -1, -1]


def weights(slots: int, out: int, inp: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(slots, 1, out, inp, generator=g)


def per_token(x: torch.Tensor, w: torch.Tensor, slots: list[int]) -> torch.Tensor:
    """Row i: ``x[i] @ w[slot].T`` for a token with a slot, zeros without."""
    rows = [x[i] @ w[s, 0].T if s >= 0 else torch.zeros(w.shape[2]) for i, s in enumerate(slots)]
    return torch.stack(rows)


def prefill_meta(slots: list[int]):
    """The sgmv ops' metadata for the tokens' slots, as ``PunicaWrapperBase``
    computes it for a prefill step (``compute_meta``)."""
    starts, lengths, indices, batches, max_len, tokens, _ = compute_meta(torch.tensor(slots))
    return starts, lengths, indices, batches, max_len, tokens


@pytest.mark.parametrize("max_loras", [1, 2])
@pytest.mark.parametrize("path", ["bgmv", "sgmv"])
def test_shrink_gives_tokens_without_a_lora_nothing(max_loras, path):
    slots = [min(s, max_loras - 1) for s in TOKEN_SLOTS]  # one slot: both requests use it
    x = torch.randn(len(slots), HIDDEN, generator=torch.Generator().manual_seed(0))
    a = weights(max_loras, RANK, HIDDEN, seed=1)
    out = torch.zeros(len(slots), RANK)
    if path == "bgmv":
        bgmv_shrink(x, a, out, torch.tensor(slots), 0.5)
    else:
        sgmv_shrink(x, a, out, *prefill_meta(slots), 0.5)
    torch.testing.assert_close(out, 0.5 * per_token(x, a, slots))


@pytest.mark.parametrize("max_loras", [1, 2])
@pytest.mark.parametrize("path", ["bgmv", "sgmv"])
def test_expand_adds_nothing_to_tokens_without_a_lora(max_loras, path):
    slots = [min(s, max_loras - 1) for s in TOKEN_SLOTS]
    x = torch.randn(len(slots), RANK, generator=torch.Generator().manual_seed(2))
    b = weights(max_loras, OUT, RANK, seed=3)
    base = torch.randn(len(slots), OUT, generator=torch.Generator().manual_seed(4))
    out = base.clone()
    if path == "bgmv":
        bgmv_expand(x, b, out, torch.tensor(slots), add_inputs=True)
    else:
        sgmv_expand(x, b, out, *prefill_meta(slots), add_inputs=True)
    torch.testing.assert_close(out, base + per_token(x, b, slots))


@pytest.mark.parametrize("add_inputs", [True, False])
@pytest.mark.parametrize("path", ["bgmv", "sgmv"])
def test_expand_slice_leaves_the_rows_of_tokens_without_a_lora(add_inputs, path):
    slots = [min(s, 0) for s in TOKEN_SLOTS]  # one slot, as max_loras=1
    x = torch.randn(len(slots), RANK, generator=torch.Generator().manual_seed(5))
    b = weights(1, 8, RANK, seed=6)
    base = torch.randn(len(slots), OUT, generator=torch.Generator().manual_seed(7))
    out = base.clone()
    if path == "bgmv":
        bgmv_expand_slice(x, b, out, torch.tensor(slots), 8, 8, add_inputs)
    else:
        sgmv_expand_slice(x, b, out, *prefill_meta(slots), 8, 8, add_inputs)
    delta = per_token(x, b, slots)
    want = base.clone()
    with_lora = torch.tensor([s >= 0 for s in slots])
    if add_inputs:
        want[:, 8:16] += delta
    else:
        want[with_lora, 8:16] = delta[with_lora]
    torch.testing.assert_close(out, want)


def test_a_batch_without_any_lora_is_left_alone():
    """Every token without a LoRA (the decode path runs the bgmv ops even
    then): nothing is added, whatever the slots hold."""
    x = torch.randn(3, HIDDEN)
    a, b = weights(1, RANK, HIDDEN, seed=8), weights(1, OUT, RANK, seed=9)
    buffer = torch.zeros(3, RANK)
    bgmv_shrink(x, a, buffer, torch.tensor([-1, -1, -1]), 1.0)
    assert torch.count_nonzero(buffer) == 0
    base = torch.randn(3, OUT)
    out = base.clone()
    bgmv_expand(torch.randn(3, RANK), b, out, torch.tensor([-1, -1, -1]), add_inputs=True)
    torch.testing.assert_close(out, base)
