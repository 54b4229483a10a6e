"""Stand-ins shared by the unit tests of MRV2's encoder-only model state:
encoder-only attention layers registered in a real config without an engine,
and all-MiniLM-L6-v2's engine config."""

from __future__ import annotations

import torch


def minilm_engine_config():
    """all-MiniLM-L6-v2's ``VllmConfig`` as an engine builds it (encoder-only)."""
    from vllm.engine.arg_utils import EngineArgs

    from scripts.validation.checkpoints.models import minilm_path

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


def stand_in_backend(support):
    """An attention backend whose metadata builder reports ``support``,
    wrapped for encoder-only layers as ``EncoderOnlyAttention`` wraps its
    backend (the wrapper's builder subclasses this one); ``support`` is an
    ``AttentionCGSupport``."""
    from vllm.model_executor.layers.attention.encoder_only_attention import create_encoder_only_attention_backend
    from vllm.v1.attention.backend import AttentionBackend, AttentionMetadataBuilder

    class StandInBuilder(AttentionMetadataBuilder):
        _cudagraph_support = support

        def __init__(self, kv_cache_spec, layer_names, vllm_config, device):
            super().__init__(kv_cache_spec, layer_names, vllm_config, device)

        def build(self, common_prefix_len, common_attn_metadata, fast_build=False):
            raise AssertionError("no metadata is built in these tests")

    class StandInBackend(AttentionBackend):
        @staticmethod
        def get_name():
            return "STAND_IN"

        @staticmethod
        def get_impl_cls():
            raise AssertionError("no attention runs in these tests")

        @staticmethod
        def get_builder_cls():
            return StandInBuilder

        @staticmethod
        def get_kv_cache_shape(*args, **kwargs):
            raise AssertionError("encoder-only layers have no KV cache")

    StandInBackend.__name__ = StandInBackend.__qualname__ = f"StandIn{support.name}"
    return create_encoder_only_attention_backend(StandInBackend)


def forget_layers(vllm_config, names) -> None:
    for name in names:
        vllm_config.compilation_config.static_forward_context.pop(name, None)


# --- runner selection: VllmConfig-shaped stand-ins ---------------------------------------


def model(arch, runner_type, *, moe=False, hybrid=False, attention_free=False, mrope=False, xdrope=0):
    """A ``ModelConfig`` stand-in with the fields the runner selection of
    either line reads (``xdrope``: the 0.26.0 base's ``uses_xdrope_dim``,
    which 0.30.0 folded into ``uses_mrope``)."""
    from types import SimpleNamespace

    return SimpleNamespace(architectures=[arch], runner_type=runner_type, is_moe=moe,
                           is_hybrid=hybrid, is_attention_free=attention_free, is_diffusion=False,
                           uses_mrope=mrope, uses_xdrope_dim=xdrope, enable_prompt_embeds=False,
                           pooler_config=None)


class ConfigStandIn:
    """A VllmConfig-shaped object: the selection methods are VllmConfig's own,
    looked up on VllmConfig when called (not when this module is imported), so
    the tests import on every release; each is called only by the release
    that has it (``use_v2_model_runner`` of the 0.26.0 line calls
    ``_is_default_v2_model_runner_model``, removed in 0.29.0, and
    ``_v2_model_runner_runs_without_triton``; the 0.32.0 line's calls
    ``_get_v2_model_runner_features_needing_triton`` and
    ``_get_v2_model_runner_unserved_pooling_task``)."""

    def __init__(self, **fields):
        self.__dict__.update(fields)

    def _is_default_v2_model_runner_model(self):
        from vllm.config.vllm import VllmConfig

        return VllmConfig._is_default_v2_model_runner_model(self)

    @property
    def use_v2_model_runner(self):
        from vllm.config.vllm import VllmConfig

        return VllmConfig.use_v2_model_runner.fget(self)

    def _v2_model_runner_runs_without_triton(self):
        from vllm.config.vllm import VllmConfig

        return VllmConfig._v2_model_runner_runs_without_triton(self)

    def _get_v2_model_runner_features_needing_triton(self):
        from vllm.config.vllm import VllmConfig

        return VllmConfig._get_v2_model_runner_features_needing_triton(self)

    def _get_v2_model_runner_unserved_pooling_task(self):
        from vllm.config.vllm import VllmConfig

        return VllmConfig._get_v2_model_runner_unserved_pooling_task(self)

    def _dflash_needs_multi_kv_group(self):
        return False

    def _get_v2_model_runner_unsupported_features(self):
        return []  # the stand-ins use no unsupported feature (the rest: real configs)


def stand_in(model_config, dcp: int = 1) -> ConfigStandIn:
    """A ``ConfigStandIn`` for ``model_config`` (a ``model(...)``, or None)
    with decode context parallelism ``dcp``, no HiSparse attention (0.32.0
    reads it first) and no speculative decoding."""
    from types import SimpleNamespace

    return ConfigStandIn(model_config=model_config, speculative_config=None,
                         attention_config=SimpleNamespace(hisparse_config=None),
                         parallel_config=SimpleNamespace(decode_context_parallel_size=dcp,
                                                         prefill_context_parallel_size=1))


def config_only_checkpoint(dest, architecture: str, config_cls: str = "Qwen2Config", **extra) -> str:
    """A config-only checkpoint in the new directory ``dest``: a small
    ``config_cls`` of transformers (Qwen2's by default; ``extra`` joins its
    arguments) declaring ``architecture``, with MiniLM's tokenizer. Enough for
    ``EngineArgs.create_engine_config`` (no weights are loaded)."""
    import transformers

    from scripts.validation.checkpoints.models import copy_tokenizer

    dest.mkdir()
    config = getattr(transformers, config_cls)(
        vocab_size=30522, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=512, **extra)
    config.architectures = [architecture]
    config.save_pretrained(dest)
    copy_tokenizer(dest)
    return str(dest)
