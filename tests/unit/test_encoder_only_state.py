"""Patch 0002 on the worker side, through upstream's own seams: MRV2's
``init_model_state`` gives an encoder-only model (BERT and kin: its attention
layers are ``EncoderOnlyAttention``, its config ``attn_type`` encoder_only) the
encoder-only model state of ``vllm/v1/worker/gpu/model_states/encoder_only.py``,
and ``BlockTables`` works with zero KV-cache groups (encoder-only layers need
no KV cache)."""

from __future__ import annotations

import numpy as np
import torch

# The CPU worker's set-up (pinned memory and UVA buffers as plain host tensors),
# as MRV2 runs on the CPU: upstream's module, imported for its effect.
import vllm.v1.worker.cpu.shm  # noqa: F401
from vllm.model_executor.layers.attention import EncoderOnlyAttention
from vllm.v1.worker.gpu.block_table import BlockTables


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


def bert_like(vllm_config) -> torch.nn.Module:
    """BERT's shape: one EncoderOnlyAttention layer."""
    return one_attention_layer_model(vllm_config, EncoderOnlyAttention, "encoder_only",
                                     "encoder.layer.0.attention.attn")


def decoder_like(vllm_config) -> torch.nn.Module:
    """A decoder's shape: one causal Attention layer."""
    from vllm.model_executor.layers.attention import Attention

    return one_attention_layer_model(vllm_config, Attention, "decoder", "model.layers.0.self_attn.attn")


def recorded_state(monkeypatch, module, name):
    """Replace the model-state class ``module.name`` with one that records
    each construction's arguments in ``Recorder.made``."""

    class Recorder:
        supports_prompt_embeds = False
        made: list[tuple] = []

        def __init__(self, vllm_config, model, encoder_cache, device):
            self.made.append((vllm_config, model, encoder_cache, device))

    assert isinstance(getattr(module, name), type)  # the module's own class name
    monkeypatch.setattr(module, name, Recorder)
    return Recorder


def test_init_model_state_picks_the_encoder_only_state(real_config, minilm, monkeypatch):
    import vllm.v1.worker.gpu.model_states.encoder_only as encoder_only
    from vllm.v1.worker.gpu.model_states import init_model_state

    # init_model_state imports the state class from its module when called
    recorder = recorded_state(monkeypatch, encoder_only, "EncoderOnlyModelState")
    config = real_config(minilm, "pooling", env="1")
    assert config.model_config.attn_type == "encoder_only"
    model = bert_like(config)
    state = init_model_state(config, model, None, torch.device("cpu"))
    assert isinstance(state, recorder)
    assert recorder.made == [(config, model, None, torch.device("cpu"))]


def test_block_tables_with_zero_kv_cache_groups():
    """No KV-cache group: staged writes, block-table gathers and slot mappings
    have nothing to do, and do not fail."""
    tables = BlockTables(block_sizes=[], max_num_reqs=4, max_num_batched_tokens=16,
                         max_num_blocks_per_group=[], device=torch.device("cpu"), kernel_block_sizes=[])
    assert tables.num_kv_cache_groups == 0
    tables.apply_staged_writes()
    idx_mapping = torch.tensor([2, 0], dtype=torch.int32)
    assert tuple(tables.gather_block_tables(idx_mapping, 4)) == ()
    query_start_loc = torch.tensor([0, 3, 5], dtype=torch.int32)
    positions = torch.from_numpy(np.array([0, 1, 2, 0, 1], dtype=np.int64))
    slots = tables.compute_slot_mappings(idx_mapping, query_start_loc, positions, 8)
    assert tuple(slots.shape) == (0, 8)


def test_state_comes_from_the_layers_not_from_the_config_flag(real_config, minilm, tiny_qwen3, monkeypatch):
    """Patch 0002: a model whose config says encoder_only (any model declaring
    CLS pooling, ColPali-style decoders included) but whose layers are causal
    gets the default state; a decoder config built with EncoderOnlyAttention
    layers (is_causal: false) gets the encoder-only state."""
    import vllm.v1.worker.gpu.model_states.default as default
    import vllm.v1.worker.gpu.model_states.encoder_only as encoder_only
    from vllm.v1.worker.gpu.model_states import init_model_state

    default_state = recorded_state(monkeypatch, default, "DefaultModelState")
    encoder_state = recorded_state(monkeypatch, encoder_only, "EncoderOnlyModelState")
    cls_config = real_config(minilm, "pooling", env="1")
    assert cls_config.model_config.attn_type == "encoder_only"
    state = init_model_state(cls_config, decoder_like(cls_config), None, torch.device("cpu"))
    assert type(state) is default_state

    decoder_config = real_config(tiny_qwen3, "pooling", env="1")
    assert decoder_config.model_config.attn_type == "decoder"
    state = init_model_state(decoder_config, bert_like(decoder_config), None, torch.device("cpu"))
    assert type(state) is encoder_state
