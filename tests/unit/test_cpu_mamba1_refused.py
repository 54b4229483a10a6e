"""Mamba (selective state space, "Mamba1") layers on the CPU (patch 0068): their
prefill calls ``torch.ops._C.selective_scan_fwd``, which vLLM builds for GPUs and
XPUs only, so a model with such layers (Jamba, Mamba, FalconMamba) used to start
on the CPU and fail its first request with ``AttributeError: '_OpNamespace' '_C'
object has no attribute 'selective_scan_fwd'``. It is refused when the layer is
built (at start-up), naming the model, the kernel and what to do."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch


def _mamba_layer(model_config):
    from vllm.model_executor.layers.mamba.mamba_mixer import MambaMixer

    return MambaMixer(hidden_size=16, ssm_state_size=8, conv_kernel_size=4, intermediate_size=16,
                      time_step_rank=1, use_conv_bias=True, use_bias=False, use_rms_norm=False,
                      model_config=model_config, prefix="model.layers.0.mixer")


def test_a_mamba_layer_is_refused_on_the_cpu_naming_the_model_the_kernel_and_the_fix():
    from vllm.platforms import current_platform

    current_platform.import_kernels()
    assert current_platform.is_cpu()
    assert not hasattr(torch.ops._C, "selective_scan_fwd")  # the CPU extension's gap the patch acts on
    with pytest.raises(ValueError) as e:
        _mamba_layer(SimpleNamespace(architecture="JambaForSequenceClassification"))
    assert str(e.value) == (
        "JambaForSequenceClassification has Mamba (selective state space) layers "
        "(model.layers.0.mixer), whose prefill needs vLLM's selective_scan_fwd kernel, "
        "which this CPU build of vLLM does not have (vLLM builds it for GPUs and XPUs): "
        "serve this model with vLLM on a GPU or an XPU."
    )
