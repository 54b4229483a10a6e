"""The compiled CPU ops the pooling path calls, run on fixed random inputs by
the ``vllm`` first on ``sys.path`` (``python -m tests.e2e.compiled_ops
OUT.pt``): their outputs and the library the platform loaded are saved to
``OUT.pt`` for tests/e2e/test_cpu_from_sdist.py, which runs this once with
the extensions compiled from the sdist and once with the published wheel's.

The ops are those of an encoder (BERT: encoder-only attention through the
CPU attention backend's kernels, slot mapping, GELU, oneDNN linear layers)
and a decoder embedding model (Qwen3: RMSNorm, fused residual RMSNorm,
rotary embedding, SiLU-and-mul), called the way ``vllm/_custom_ops.py``
and ``vllm/v1/attention/backends/cpu_attn.py`` call them, in float32 and
bfloat16."""

from __future__ import annotations

import sys

import torch


def run() -> dict[str, torch.Tensor]:
    from vllm import _custom_ops as ops
    from vllm.platforms import current_platform
    from vllm.v1.attention.backends.cpu_attn import _get_attn_isa

    current_platform.import_kernels()
    g = torch.Generator().manual_seed(0)

    def rand(*shape, dtype=torch.float32):
        return torch.randn(*shape, generator=g).to(dtype)

    out: dict[str, torch.Tensor] = {}
    for dtype in (torch.float32, torch.bfloat16):
        name = str(dtype).removeprefix("torch.")
        x, w = rand(7, 384, dtype=dtype), rand(384, dtype=dtype)
        y = torch.empty_like(x)
        ops.rms_norm(y, x, w, 1e-6)
        out[f"rms_norm/{name}"] = y
        xr, res = x.clone(), rand(7, 384, dtype=dtype)
        ops.fused_add_rms_norm(xr, res, w, 1e-6)
        out[f"fused_add_rms_norm/{name}"] = xr
        out[f"fused_add_rms_norm.residual/{name}"] = res
        q, k = rand(7, 4 * 64, dtype=dtype), rand(7, 2 * 64, dtype=dtype)
        cache = rand(128, 64, dtype=dtype)
        for neox in (True, False):
            qq, kk = q.clone(), k.clone()
            ops.rotary_embedding(torch.arange(3, 10), qq, kk, 64, cache, neox)
            out[f"rotary_embedding.neox={neox}/{name}"] = torch.cat([qq, kk], dim=1)
        gate = rand(7, 2 * 256, dtype=dtype)
        for act in ("silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul"):
            y = torch.empty(7, 256, dtype=dtype)
            getattr(torch.ops._C, act)(y, gate)
            out[f"{act}/{name}"] = y
        weight, bias = rand(384, 1536, dtype=dtype), rand(1536, dtype=dtype)
        handler = ops.create_onednn_mm(weight, 16)
        out[f"onednn_mm/{name}"] = ops.onednn_mm(handler, x, bias)
        out[f"attention/{name}"] = _encoder_attention(ops, _get_attn_isa, rand, dtype)
    # the platform imports the extension as a Python module that fails to
    # initialise (vllm/platforms/cpu.py, import_kernels): the process's map of
    # shared objects says which file was loaded
    with open("/proc/self/maps") as f:
        out["loaded"] = sorted({ln.split()[-1] for ln in f if "/vllm/_C" in ln and ln.rstrip().endswith(".so")})
    return out


def _encoder_attention(ops, get_isa, rand, dtype) -> torch.Tensor:
    """Encoder-only (non-causal) attention of two sequences (5 and 9 tokens,
    12 heads of 32: MiniLM's shape) as the CPU backend runs it: slot mapping,
    scheduler metadata, the cache write and the attention kernel."""
    heads, head_dim, block_size = 12, 32, 32
    seq_lens = torch.tensor([5, 9], dtype=torch.int32)
    qsl = torch.tensor([0, 5, 14], dtype=torch.int32)
    positions = torch.cat([torch.arange(5), torch.arange(9)]).to(torch.int64)
    n = int(seq_lens.sum())
    query, key, value = (rand(n, heads, head_dim, dtype=dtype) for _ in range(3))
    isa = get_isa(dtype, block_size, head_dim)
    block_table = torch.tensor([[0], [1]], dtype=torch.int32)
    slots = torch.empty(n, dtype=torch.int64)
    torch.ops._C.compute_slot_mapping_kernel_impl(qsl, positions, block_table, slots, block_size)
    metadata = ops.cpu_attn_get_scheduler_metadata(
        num_reqs=2, num_heads=heads, num_kv_heads=heads, head_dim=head_dim, seq_lens=seq_lens, dtype=dtype,
        query_start_loc=qsl, causal=False, sliding_window_size=-1, isa=isa, enable_kv_split=False)
    kv = torch.zeros(2, heads, block_size, 2 * head_dim, dtype=dtype).view(2, heads, 2 * block_size, head_dim)
    key_cache, value_cache = kv.chunk(2, dim=2)
    ops.cpu_attn_reshape_and_cache(key, value, key_cache, value_cache, slots, isa)
    output = torch.empty_like(query)
    ops.cpu_attention_with_kv_cache(
        query=query, key_cache=key_cache, value_cache=value_cache, output=output, query_start_loc=qsl,
        seq_lens=seq_lens, scale=head_dim ** -0.5, causal=False, alibi_slopes=None, sliding_window=-1,
        block_table=block_table, softcap=0.0, scheduler_metadata=metadata, s_aux=None)
    return torch.cat([output.flatten(), slots.to(dtype)])


if __name__ == "__main__":
    torch.save(run(), sys.argv[1])
