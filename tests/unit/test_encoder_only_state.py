"""Patch 0002 on the worker side, through upstream's own seams: MRV2's
``init_model_state`` gives an encoder-only model (BERT and kin: its attention
layers are ``EncoderOnlyAttention``) the encoder-only model state
(``EncoderOnlyModelState`` of ``vllm.v1.worker.gpu.model_states.encoder_only``,
the name upstream gives it from 0.27.0 on, but the base has no such module, so
these tests are not mapped in tests.toml), and ``BlockTables`` works with zero
KV-cache groups (encoder-only layers need no KV cache; mapped: it reaches only
upstream's names)."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch

# The CPU worker's set-up (pinned memory and UVA buffers as plain host tensors),
# as MRV2 runs on the CPU: upstream's module, imported for its effect.
import vllm.v1.worker.cpu.shm  # noqa: F401
from vllm.v1.worker.gpu.block_table import BlockTables

from tests.unit.stand_ins import encoder_only_model, forget_layers, stand_in_backend



def one_attention_layer_model(vllm_config, attn_cls, attn_type: str, layer_name: str) -> torch.nn.Module:
    """A model whose only attention layer is an ``attn_cls``
    (``EncoderOnlyAttention``, or the causal ``Attention``), made without its
    __init__ (which needs a whole engine context) but registered as that
    __init__ does: ``attn_type``, and under its name in the config's static
    forward context (where later releases look for it)."""
    attn = attn_cls.__new__(attn_cls)
    torch.nn.Module.__init__(attn)
    attn.attn_type = attn_type
    attn.layer_name = layer_name
    vllm_config.compilation_config.static_forward_context[layer_name] = attn
    model = torch.nn.Module()
    model.attn = attn
    return model


def decoder_like(vllm_config) -> torch.nn.Module:
    """A decoder's shape: one causal Attention layer."""
    from vllm.model_executor.layers.attention import Attention

    return one_attention_layer_model(vllm_config, Attention, "decoder", "model.layers.0.self_attn.attn")


def kind(state) -> str:
    """``encoder-only`` or ``default``: which of MRV2's model states ``state``
    is, by its class (the series' ``EncoderOnlyModelState`` is upstream's name
    from 0.27.0 on, but the base has none: these tests are not mapped)."""
    return {("vllm.v1.worker.gpu.model_states.encoder_only", "EncoderOnlyModelState"): "encoder-only",
            ("vllm.v1.worker.gpu.model_states.default", "DefaultModelState"): "default",
            }[type(state).__module__, type(state).__name__]


@pytest.fixture
def layered(real_config):
    """``layered(model_path, layers)``: the config of an engine for the model
    (MRV2 forced) and a model holding ``layers`` (``"encoder_only"``: two
    EncoderOnlyAttention layers; ``"causal"``: one causal Attention layer),
    registered in the config as the real layers register themselves."""
    made = []

    def make(model_path, layers):
        from vllm.v1.attention.backend import AttentionCGSupport

        config = real_config(model_path, "pooling", env="1")
        if layers == "encoder_only":
            names = ("encoder.layer.0.attention.attn", "encoder.layer.1.attention.attn")
            model = encoder_only_model(config, stand_in_backend(AttentionCGSupport.ALWAYS), names)
            made.append((config, names))
        else:
            model = decoder_like(config)
            made.append((config, ("model.layers.0.self_attn.attn",)))
        return config, model

    yield make
    for config, names in made:
        forget_layers(config, names)


def test_init_model_state_picks_the_encoder_only_state(layered, minilm):
    from vllm.v1.worker.gpu.model_states import init_model_state

    config, model = layered(minilm, "encoder_only")
    assert config.model_config.attn_type == "encoder_only"
    assert kind(init_model_state(config, model, None, torch.device("cpu"))) == "encoder-only"


# From 0.34.0 MRV2's BlockTables keep UVA buffers (pinned host memory, a CUDA device), and a CPU
# without Triton runs the standalone CPU runner's own block tables instead.
@pytest.mark.line("0.26.0", "0.32.0")
def test_block_tables_with_zero_kv_cache_groups():
    """No KV-cache group: staged writes, block-table gathers and slot mappings
    have nothing to do, and do not fail."""
    # (the base and releases up to 0.31.0 also ask for the kernels' block
    # sizes, which later ones take from the groups: none here either way)
    extra = {"kernel_block_sizes": []} if "kernel_block_sizes" in inspect.signature(BlockTables).parameters else {}
    tables = BlockTables(block_sizes=[], max_num_reqs=4, max_num_batched_tokens=16,
                         max_num_blocks_per_group=[], device=torch.device("cpu"), **extra)
    assert tables.num_kv_cache_groups == 0
    tables.apply_staged_writes()
    idx_mapping = torch.tensor([2, 0], dtype=torch.int32)
    assert tuple(tables.gather_block_tables(idx_mapping, 4)) == ()
    query_start_loc = torch.tensor([0, 3, 5], dtype=torch.int32)
    positions = torch.from_numpy(np.array([0, 1, 2, 0, 1], dtype=np.int64))
    slots = tables.compute_slot_mappings(idx_mapping, query_start_loc, positions, 8)
    assert tuple(slots.shape) == (0, 8)


def test_state_comes_from_the_layers_not_from_the_config_flag(layered, minilm, tiny_qwen3):
    """Patch 0002: a model whose config says encoder_only (any model declaring
    CLS pooling, ColPali-style decoders included) but whose layers are causal
    gets the default state; a decoder config built with EncoderOnlyAttention
    layers (is_causal: false) gets the encoder-only state."""
    from vllm.v1.worker.gpu.model_states import init_model_state

    cls_config, causal_model = layered(minilm, "causal")
    assert cls_config.model_config.attn_type == "encoder_only"
    assert kind(init_model_state(cls_config, causal_model, None, torch.device("cpu"))) == "default"

    decoder_config, encoder_model = layered(tiny_qwen3, "encoder_only")
    assert decoder_config.model_config.attn_type == "decoder"
    assert kind(init_model_state(decoder_config, encoder_model, None, torch.device("cpu"))) == "encoder-only"
