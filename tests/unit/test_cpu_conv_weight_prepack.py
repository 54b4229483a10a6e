"""Patch 0018: on a CPU with AMX tiles, causal-conv weights are packed for
the AMX kernel only at the width that kernel takes (4); LFM2's ShortConv
(width 3) keeps its plain weight, and ShortConv's torch path reads the plain
copy when a width-4 weight was packed.

The base packed every 3-D linear weight (``dispatch_cpu_unquantized_gemm``,
``vllm/model_executor/layers/utils.py``), so LFM2 failed at load on AMX
CPUs ("support only width of 4"), on V1 and MRV2 alike."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cpu._is_amx_tile_supported(),
                                reason="packing happens on CPUs with AMX tiles only")


def conv_layer(dim: int, width: int, dtype=torch.float32) -> torch.nn.Module:
    """A stand-in for the ColumnParallelLinear a ShortConv / GDN layer uses as
    its conv: weight [dim, 1, width]."""
    layer = torch.nn.Module()
    weight = torch.randn(dim, 1, width, generator=torch.Generator().manual_seed(0)).to(dtype)
    layer.weight = torch.nn.Parameter(weight, requires_grad=False)
    return layer


@pytest.mark.parametrize("width, dtype", [(3, torch.bfloat16), (3, torch.float32), (4, torch.float32)])
def test_conv_weight_the_kernel_cannot_take_stays_plain(width, dtype):
    """LFM2 (width 3) in bfloat16 or float32, and any float32 conv: the
    packing kernel takes neither ("support only width of 4", "not
    implemented for 'Float'")."""
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

    layer = conv_layer(128, width, dtype)
    plain = layer.weight.detach().clone()
    dispatch_cpu_unquantized_gemm(layer, remove_weight=True)
    torch.testing.assert_close(layer.weight.data, plain, rtol=0, atol=0)
    assert not hasattr(layer, "_cpu_unpacked_conv_weight")


def test_width_4_conv_weight_packed_with_its_plain_copy():
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

    layer = conv_layer(128, 4, torch.bfloat16)
    plain = layer.weight.detach().clone().view(128, 4)
    dispatch_cpu_unquantized_gemm(layer, remove_weight=True)
    torch.testing.assert_close(layer._cpu_unpacked_conv_weight, plain, rtol=0, atol=0)
    assert not torch.equal(layer.weight.data.reshape(-1), plain.reshape(-1))  # the VNNI layout
