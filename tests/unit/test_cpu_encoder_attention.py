"""Patch 0036 through upstream's own seams (``CPUAttentionMetadataBuilder``,
``CPUAttentionBackendImpl``, ``EncoderOnlyAttentionSpec``,
``CommonAttentionMetadata``): CPU attention of encoder-only layers over
several steps equals torch's scaled-dot-product attention of each sequence
alone, and a step's encoder cache holds small blocks in storage that later
steps reuse instead of allocating and zeroing a cache each step."""

from __future__ import annotations

import types

import pytest
import torch

from vllm.config import set_current_vllm_config
from vllm.model_executor.layers.attention.encoder_only_attention import EncoderOnlyAttention
from vllm.v1.attention.backend import AttentionType, CommonAttentionMetadata
from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackendImpl, CPUAttentionMetadataBuilder
from vllm.v1.kv_cache_interface import EncoderOnlyAttentionSpec


@pytest.fixture
def encoder_attention(real_config, minilm):
    """(builder, impl, heads, head_size) for MiniLM's encoder-only attention
    (12 heads of 32, fp32), on an engine's VllmConfig."""
    config = real_config(minilm, "pooling", dtype="float32")
    heads = config.model_config.get_num_attention_heads(config.parallel_config)
    head_size = config.model_config.get_head_size()
    spec = EncoderOnlyAttentionSpec(block_size=config.cache_config.block_size, num_kv_heads=heads,
                                    head_size=head_size, dtype=torch.float32)
    with set_current_vllm_config(config):
        # The model's layer, registered in the config's static forward context as a model's
        # layers are: from 0.34.0 the builder tells encoder-only attention by its layers'
        # attn_type (get_layers_from_vllm_config), no longer by the spec's class.
        EncoderOnlyAttention(heads, head_size, head_size**-0.5, num_kv_heads=heads, prefix="layer.0")
        builder = CPUAttentionMetadataBuilder(spec, ["layer.0"], config, torch.device("cpu"))
        impl = CPUAttentionBackendImpl(heads, head_size, head_size**-0.5, heads, None, None, "auto",
                                       attn_type=AttentionType.ENCODER_ONLY)
    return builder, impl, heads, head_size


def _step(builder, lengths: list[int]):
    seq_lens = torch.tensor(lengths, dtype=torch.int32)
    qsl = torch.zeros(len(lengths) + 1, dtype=torch.int32)
    qsl[1:] = torch.cumsum(seq_lens, 0)
    n = int(qsl[-1])
    common = CommonAttentionMetadata(
        query_start_loc=qsl, query_start_loc_cpu=qsl.clone(), seq_lens=seq_lens, num_reqs=len(lengths),
        num_actual_tokens=n, max_query_len=max(lengths), max_seq_len=max(lengths),
        block_table_tensor=torch.zeros(len(lengths), 1, dtype=torch.int32),
        slot_mapping=torch.zeros(n, dtype=torch.int64), causal=False,
        positions=torch.cat([torch.arange(length) for length in lengths]))
    return builder.build(0, common)


def _reference(q, k, v, lengths):
    out, start = [], 0
    for length in lengths:
        sl = slice(start, start + length)
        # [heads, tokens, head_size], bidirectional
        o = torch.nn.functional.scaled_dot_product_attention(q[sl].transpose(0, 1), k[sl].transpose(0, 1),
                                                             v[sl].transpose(0, 1))
        out.append(o.transpose(0, 1))
        start += length
    return torch.cat(out)


def test_encoder_only_attention_equals_sdpa_over_steps(encoder_attention):
    """A long step, then shorter ones reusing what the first left behind:
    every step equals SDPA of each sequence alone."""
    builder, impl, heads, head_size = encoder_attention
    # The layer as its group's builder leaves it: from 0.29.0 the builder sets the ISA it
    # chose on its layers (``_set_isa_to_layers``) and ``forward`` reads ``layer.isa``;
    # the base's ``forward`` does not read it.
    layer = types.SimpleNamespace(_k_scale_float=1.0, _v_scale_float=1.0, isa=builder.isa)
    gen = torch.Generator().manual_seed(0)
    for lengths in ([130, 7, 64, 1], [5, 3], [17, 16, 33]):
        meta = _step(builder, lengths)
        n = sum(lengths)
        q, k, v = (torch.randn(n, heads, head_size, generator=gen) for _ in range(3))
        out = torch.empty(n, heads, head_size)
        impl.forward(layer, q, k, v, torch.empty(0), meta, out)
        torch.testing.assert_close(out, _reference(q, k, v, lengths), rtol=1e-5, atol=1e-5)


def test_encoder_cache_uses_small_blocks_reused_across_steps(encoder_attention):
    """Two sentences of 5 and 3 tokens take one block of 16 slots each (the
    base: 128), and the next step's cache lives in the same storage."""
    builder = encoder_attention[0]
    first = _step(builder, [300, 40]).encoder_cache
    second = _step(builder, [5, 3]).encoder_cache
    assert tuple(second.shape[:1]) + tuple(second.shape[2:3]) == (2, 16)
    assert second.untyped_storage().data_ptr() == first.untyped_storage().data_ptr()
    assert int(second.count_nonzero()) == 0  # zeroed for the kernels, as a fresh cache was
