"""Stand-ins shared by the unit tests of MRV2's encoder-only model state:
encoder-only attention layers registered in a real config without an engine,
and all-MiniLM-L6-v2's engine config."""

from __future__ import annotations

import torch


def minilm_engine_config():
    """all-MiniLM-L6-v2's ``VllmConfig`` as an engine builds it (encoder-only)."""
    from vllm.engine.arg_utils import EngineArgs

    from scripts.models import minilm_path

    config = EngineArgs(model=str(minilm_path()), runner="pooling").create_engine_config()
    assert config.model_config.attn_type == "encoder_only"
    return config


def encoder_only_model(vllm_config, backend, names, heads=12, head_size=32, impl=None,
                       model: torch.nn.Module | None = None) -> torch.nn.Module:
    """``model`` (a new ``torch.nn.Module`` by default) holding one
    ``EncoderOnlyAttention`` per name in ``names``,
    made without its __init__ (which needs a whole engine context) but
    carrying what it sets (``attn_type``, head counts and size, ``backend``,
    ``impl()`` when given) and registered where it registers itself: under its
    name in the config's static forward context. Remove them from there with
    ``forget_layers``."""
    from vllm.model_executor.layers.attention import EncoderOnlyAttention

    model = torch.nn.Module() if model is None else model
    model.layers = torch.nn.ModuleList()
    for name in names:
        attn = EncoderOnlyAttention.__new__(EncoderOnlyAttention)
        torch.nn.Module.__init__(attn)
        attn.attn_type = "encoder_only"
        attn.layer_name = name
        attn.num_heads = attn.num_kv_heads = heads
        attn.head_size = head_size
        attn.kv_sharing_target_layer_name = None
        attn.attn_backend = backend
        if impl is not None:
            attn.impl = impl()
        vllm_config.compilation_config.static_forward_context[name] = attn
        model.layers.append(attn)
    return model


def forget_layers(vllm_config, names) -> None:
    for name in names:
        vllm_config.compilation_config.static_forward_context.pop(name, None)
