"""Patch 0019: on the CPU, ``RotaryEmbedding`` rotates query and key given
per head (``[num_tokens, num_heads, head_size]``) as it rotates them given
flat (``[num_tokens, num_heads * head_size]``), as transformers does.

The base's ``RotaryEmbedding.forward_cpu``
(``vllm/model_executor/layers/rotary_embedding/base.py``) handed both
layouts to the CPU kernel ``torch.ops._C.rotary_embedding``, which reads a
3-D tensor as one head per token with a token stride of ``head_size``: with
more than one head, head ``h`` of token ``t`` was rotated at position
``t * num_heads + h`` and the last tokens not at all; a per-head view whose
token stride is not ``head_size`` (of a fused qkv split) was wrong with one
head too, and one whose heads are not adjacent made the kernel abort the
process (out-of-bounds access). LFM2 (and LFM2-MoE)
give their query per head (the q/k RMSNorm is per head): wrong attention
from the first attention layer on, on V1 and MRV2 alike (the validation
matrix's colbert-lfm2 row: max abs error 0.317). Expected values: transformers'
own LFM2 rotary embedding (``Lfm2RotaryEmbedding`` and
``apply_rotary_pos_emb``)."""

from __future__ import annotations

import pytest
import torch

HEAD = 64
THETA = 1e6
N = 8


@pytest.fixture(scope="module")
def rope():
    """vLLM's rotary embedding for LFM2's attention (neox style, theta 1e6),
    with custom ops enabled as in an ``enforce_eager`` engine, so that it
    runs the CPU kernel (``forward_cpu``)."""
    from vllm.config import CompilationConfig, VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.rotary_embedding import get_rope

    with set_current_vllm_config(VllmConfig(compilation_config=CompilationConfig(custom_ops=["all"]))):
        r = get_rope(HEAD, max_position=512, rope_parameters={"rope_theta": THETA, "rope_type": "default"},
                     is_neox_style=True)
    assert r._forward_method == r.forward_cpu  # the CPU kernel path under test
    return r


def transformers_rope(q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' LFM2 rotary embedding of ``q`` [N, heads, HEAD] and
    ``k`` [N, kv_heads, HEAD] at positions 0..N-1, in the same layout."""
    from transformers import Lfm2Config
    from transformers.models.lfm2.modeling_lfm2 import Lfm2RotaryEmbedding, apply_rotary_pos_emb

    config = Lfm2Config(hidden_size=q.shape[1] * HEAD, num_attention_heads=q.shape[1], head_dim=HEAD,
                        rope_parameters={"rope_theta": THETA, "rope_type": "default"})
    cos, sin = Lfm2RotaryEmbedding(config)(q, torch.arange(N)[None])
    q_hf, k_hf = apply_rotary_pos_emb(q.transpose(0, 1)[None], k.transpose(0, 1)[None], cos, sin)
    return q_hf[0].transpose(0, 1), k_hf[0].transpose(0, 1)


def qk(heads: int, kv_heads: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(N, heads, HEAD, generator=g), torch.randn(N, kv_heads, HEAD, generator=g)


@pytest.mark.parametrize("heads, kv_heads", [(2, 1), (4, 2), (1, 1)])
@pytest.mark.parametrize("layout", ["per head", "flat", "per head, views of a fused qkv",
                                    "per head, heads not adjacent"])
def test_cpu_rotary_embedding_matches_transformers_in_every_layout(rope, heads, kv_heads, layout):
    """LFM2's layout (per head, 2 query heads, 1 KV head) is the failing
    input: error 3.9 on the query before the fix."""
    q, k = qk(heads, kv_heads)
    q_hf, k_hf = transformers_rope(q, k)
    if layout == "flat":
        q_in, k_in = q.reshape(N, -1).clone(), k.reshape(N, -1).clone()
    elif layout == "per head":
        q_in, k_in = q.clone(), k.clone()
    elif layout == "per head, heads not adjacent":  # [heads, N, HEAD] transposed: flattening copies
        q_in, k_in = q.transpose(0, 1).contiguous().transpose(0, 1), k.transpose(0, 1).contiguous().transpose(0, 1)
    else:  # split views of one [N, (heads + 2 kv_heads) * HEAD] tensor, then viewed per head: not contiguous
        qkv = torch.cat([q.reshape(N, -1), k.reshape(N, -1), torch.zeros(N, kv_heads * HEAD)], dim=-1)
        q_in, k_in, _ = qkv.split([heads * HEAD, kv_heads * HEAD, kv_heads * HEAD], dim=-1)
        q_in, k_in = q_in.view(N, heads, HEAD), k_in.view(N, kv_heads, HEAD)
    shapes = (q_in.shape, k_in.shape)
    q_out, k_out = rope(torch.arange(N), q_in, k_in)
    assert (q_out.shape, k_out.shape) == shapes
    torch.testing.assert_close(q_out.reshape(N, heads, HEAD), q_hf, rtol=0, atol=1e-5)
    torch.testing.assert_close(k_out.reshape(N, kv_heads, HEAD), k_hf, rtol=0, atol=1e-5)
    # in place, as the kernel's callers expect (``ops.rotary_embedding`` updates query and key)
    torch.testing.assert_close(q_in.reshape(N, heads, HEAD), q_hf, rtol=0, atol=1e-5)
    torch.testing.assert_close(k_in.reshape(N, kv_heads, HEAD), k_hf, rtol=0, atol=1e-5)
