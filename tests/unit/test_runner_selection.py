"""Runner selection: which models run on Model Runner V2.

Two kinds of tests. The behavioural ones (``test_real_config_*``) build a real
``VllmConfig`` with ``EngineArgs.create_engine_config`` for local models (MiniLM,
a tiny random Qwen3) and read ``VllmConfig.use_v2_model_runner``, public names
that upstream has too: they are what ``patches/tests.toml`` maps to the patches,
so that ``python -m scripts.drift test-upstream`` finds where upstream behaves
the same. The table tests run ``VllmConfig._is_default_v2_model_runner_model``
(patch 0007) and ``use_v2_model_runner`` on lightweight stand-ins carrying just
the fields they read; each row gives the base's answer too, so the rows that
flipped are explicit. VllmConfig's methods are looked up when called, so this
module imports on releases that no longer have them. The selection without
Triton (patch 0008) is in test_runner_selection_without_triton.py.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import vllm.config.vllm as vllm_config_module
from vllm.config.vllm import VllmConfig


def model(arch, runner_type, *, moe=False, hybrid=False, attention_free=False, mrope=False, xdrope=0):
    return SimpleNamespace(architectures=[arch], runner_type=runner_type, is_moe=moe,
                           is_hybrid=hybrid, is_attention_free=attention_free, is_diffusion=False,
                           uses_mrope=mrope, uses_xdrope_dim=xdrope)


class ConfigStandIn(SimpleNamespace):
    """A VllmConfig-shaped object: the selection methods are VllmConfig's own,
    looked up on VllmConfig when called (not when this module is imported)."""

    def _is_default_v2_model_runner_model(self):
        return VllmConfig._is_default_v2_model_runner_model(self)

    def _v2_model_runner_not_default_reason(self):
        return VllmConfig._v2_model_runner_not_default_reason(self)

    @property
    def use_v2_model_runner(self):
        return VllmConfig.use_v2_model_runner.fget(self)

    def _v2_model_runner_runs_without_triton(self):
        return VllmConfig._v2_model_runner_runs_without_triton(self)

    def _v2_model_runner_pooling_refusal(self):
        return None  # the stand-ins declare no pooling task (see test_runner_selection_by_task.py)

    def _dflash_needs_multi_kv_group(self):
        return False

    def _get_v2_model_runner_unsupported_features(self):
        return []


def stand_in(model_config, dcp: int = 1):
    return ConfigStandIn(model_config=model_config, speculative_config=None,
                         parallel_config=SimpleNamespace(decode_context_parallel_size=dcp))


# (case, model config stand-in, default MRV2 now, on the base)
TABLE = [
    ("BertModel pooling (sentence-transformers/all-MiniLM-L6-v2)", model("BertModel", "pooling"), True, False),
    ("Qwen3ForCausalLM pooling (Qwen/Qwen3-Embedding-0.6B)", model("Qwen3ForCausalLM", "pooling"), True, False),
    ("ColQwen3 multimodal pooling (TomoroAI/tomoro-colqwen3-embed-4b)", model("ColQwen3", "pooling"), True, False),
    ("BertForSequenceClassification pooling (cross-encoder)", model("BertForSequenceClassification", "pooling"), True, False),
    ("BertForTokenClassification pooling", model("BertForTokenClassification", "pooling"), True, False),
    ("HF_ColBERT pooling (late interaction)", model("HF_ColBERT", "pooling"), True, False),
    ("XLMRobertaModel pooling (BAAI/bge-m3 backbone)", model("XLMRobertaModel", "pooling"), True, False),
    ("ModernBertModel pooling", model("ModernBertModel", "pooling"), True, False),
    ("LlamaForCausalLM pooling (intfloat/e5-mistral-7b-instruct style)", model("LlamaForCausalLM", "pooling"), True, False),
    ("Qwen2ForRewardModel pooling", model("Qwen2ForRewardModel", "pooling"), True, False),
    ("ColPaliForRetrieval multimodal pooling", model("ColPaliForRetrieval", "pooling"), True, False),
    ("Qwen3MoeForCausalLM pooling, MoE outside the allowlist", model("Qwen3MoeForCausalLM", "pooling", moe=True), False, False),
    ("Qwen2MoeForCausalLM pooling, allowlisted MoE", model("Qwen2MoeForCausalLM", "pooling", moe=True), True, False),
    ("ColBERTLfm2Model pooling, hybrid", model("ColBERTLfm2Model", "pooling", hybrid=True), False, False),
    ("MambaForCausalLM pooling, attention-free", model("MambaForCausalLM", "pooling", attention_free=True), False, False),
    ("LlamaForCausalLM generate", model("LlamaForCausalLM", "generate"), True, True),
    ("Qwen3ForCausalLM generate", model("Qwen3ForCausalLM", "generate"), True, True),
    ("Qwen2VLForConditionalGeneration multimodal generate", model("Qwen2VLForConditionalGeneration", "generate"), True, True),
    ("Qwen3MoeForCausalLM generate, MoE outside the allowlist", model("Qwen3MoeForCausalLM", "generate", moe=True), False, False),
    ("DeepseekV2ForCausalLM generate, allowlisted MoE", model("DeepseekV2ForCausalLM", "generate", moe=True), True, True),
    ("JambaForCausalLM generate, hybrid", model("JambaForCausalLM", "generate", moe=True, hybrid=True), False, False),
    ("MambaForCausalLM generate, attention-free", model("MambaForCausalLM", "generate", attention_free=True), False, False),
    ("LlamaForCausalLM draft runner", model("LlamaForCausalLM", "draft"), True, False),
]


def base_selector(config) -> bool:
    """vLLM 0.26.0's _is_default_v2_model_runner_model, as it read before the
    patch (kept here to state the flipped rows, not to test against)."""
    mc = config.model_config
    default_v2_architectures = vllm_config_module.DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES
    if mc is None or mc.runner_type != "generate" or mc.is_hybrid or mc.is_attention_free:
        return False
    return any(a in default_v2_architectures for a in mc.architectures) or not mc.is_moe


@pytest.mark.parametrize(("case", "model_config", "expected", "on_base"), TABLE, ids=[t[0] for t in TABLE])
def test_default_runner_selection(case, model_config, expected, on_base):
    config = stand_in(model_config)
    assert config._is_default_v2_model_runner_model() is expected
    assert base_selector(config) is on_base


def test_table_covers_the_required_cases():
    assert len(TABLE) >= 21
    flipped = [case for case, _, now, base in TABLE if now != base]
    assert "Qwen3ForCausalLM pooling (Qwen/Qwen3-Embedding-0.6B)" in flipped
    assert all(base_selector(stand_in(mc)) == now for case, mc, now, _ in TABLE if case.endswith("generate"))


def test_no_model_config_is_not_default_v2():
    assert stand_in(None)._is_default_v2_model_runner_model() is False


@pytest.fixture
def triton(monkeypatch):
    def set_triton(available: bool):
        monkeypatch.setattr(vllm_config_module, "HAS_TRITON", available)
    return set_triton


@pytest.mark.parametrize(("env", "expected"), [(None, True), ("1", True), ("0", False)])
def test_environment_overrides_for_pooling_models(monkeypatch, triton, env, expected):
    triton(True)
    if env is None:
        monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER", raising=False)
    else:
        monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", env)
    assert stand_in(model("BertModel", "pooling")).use_v2_model_runner is expected


def test_override_to_v2_for_a_model_that_defaults_to_v1(monkeypatch, triton):
    triton(True)
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "1")
    assert stand_in(model("Qwen3MoeForCausalLM", "pooling", moe=True)).use_v2_model_runner is True


def full_stand_in(chunked: bool, prefix_caching: bool):
    """A stand-in with every field _get_v2_model_runner_unsupported_features
    and _validate_v2_model_runner read (used by the tests without Triton)."""
    mc = model("BertModel", "pooling")
    mc.attn_type, mc.use_mla, mc.enable_return_routed_experts = "encoder_only", False, False
    mc.logits_processors, mc.enable_prompt_embeds = None, False
    config = stand_in(mc)
    config._get_v2_model_runner_unsupported_features = (
        VllmConfig._get_v2_model_runner_unsupported_features.__get__(config))
    config._validate_v2_model_runner = VllmConfig._validate_v2_model_runner.__get__(config)
    config.scheduler_config = SimpleNamespace(enable_chunked_prefill=chunked)
    config.cache_config = SimpleNamespace(enable_prefix_caching=prefix_caching, kv_sharing_fast_prefill=False)
    config.compilation_config = SimpleNamespace(mode=None, pass_config=SimpleNamespace(enable_sp=False))
    config.parallel_config = SimpleNamespace(
        prefill_context_parallel_size=1, tensor_parallel_size=1, pipeline_parallel_size=1,
        distributed_executor_backend=None, enable_dbo=False, enable_elastic_ep=False,
        decode_context_parallel_size=1)
    config.ec_transfer_config = config.reasoning_config = None
    return config


# --- behavioural: real configs (what patches/tests.toml maps) ----------------------------


def test_real_config_pooling_models_default_to_mrv2(real_config, minilm, tiny_qwen3):
    """Patch 0007: an encoder-only and a decoder pooling model run on MRV2 by
    default (Triton available), as a generation model does."""
    bert = real_config(minilm, "pooling")
    assert bert.model_config.attn_type == "encoder_only"
    assert bert.use_v2_model_runner is True
    qwen = real_config(tiny_qwen3, "pooling")
    assert qwen.model_config.attn_type == "decoder"
    assert qwen.use_v2_model_runner is True


def test_real_config_runner_type_does_not_decide_the_default(real_config, tiny_qwen3):
    """Patch 0007: the same model gets the same runner whether it generates or pools."""
    generate = real_config(tiny_qwen3, "generate").use_v2_model_runner
    pooling = real_config(tiny_qwen3, "pooling").use_v2_model_runner
    assert generate is True and pooling is True


@pytest.mark.parametrize(("env", "expected"), [("0", False), ("1", True)])
def test_real_config_environment_overrides_for_pooling_models(real_config, minilm, tiny_qwen3, env, expected):
    """VLLM_USE_V2_MODEL_RUNNER still decides when set."""
    assert real_config(minilm, "pooling", env=env).use_v2_model_runner is expected
    assert real_config(tiny_qwen3, "pooling", env=env).use_v2_model_runner is expected


@pytest.mark.parametrize("option", ["enable_chunked_prefill", "enable_prefix_caching"])
def test_real_config_encoder_only_model_with_chunking_flag_selects_mrv2(real_config, minilm, option):
    """Patch 0002: an encoder-only model set to chunked prefill or prefix
    caching explicitly still runs on MRV2 by default, as without the flag
    (the engine core turns chunked prefill off for a model without KV-cache
    groups; there is no KV cache to reuse)."""
    config = real_config(minilm, "pooling", **{option: True})
    assert config.model_config.attn_type == "encoder_only"
    assert config.use_v2_model_runner is True


def test_real_config_encoder_only_model_can_run_on_mrv2(real_config, minilm):
    """Patch 0002: MRV2 accepts an encoder-only model (whole prompts, the
    default for it): forcing it is no error, and chunking stays off."""
    config = real_config(minilm, "pooling", env="1")
    assert config.model_config.attn_type == "encoder_only"
    assert config.use_v2_model_runner is True
    assert not config.scheduler_config.enable_chunked_prefill
    assert not config.cache_config.enable_prefix_caching
