"""Runner selection (patch 0007): which models default to Model Runner V2.

``VllmConfig._is_default_v2_model_runner_model`` and ``use_v2_model_runner``
run on lightweight stand-ins carrying just the fields they read. Each row of
the table gives the base's answer too, so the rows that flipped are explicit.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import vllm.config.vllm as vllm_config_module
from vllm.config.vllm import DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES, VllmConfig


def model(arch, runner_type, *, moe=False, hybrid=False, attention_free=False):
    return SimpleNamespace(architectures=[arch], runner_type=runner_type, is_moe=moe,
                           is_hybrid=hybrid, is_attention_free=attention_free, is_diffusion=False)


class ConfigStandIn(SimpleNamespace):
    """A VllmConfig-shaped object: the selection methods are VllmConfig's own."""

    _is_default_v2_model_runner_model = VllmConfig._is_default_v2_model_runner_model
    use_v2_model_runner = VllmConfig.use_v2_model_runner
    _v2_model_runner_runs_without_triton = VllmConfig._v2_model_runner_runs_without_triton

    def _dflash_needs_multi_kv_group(self):
        return False

    def _get_v2_model_runner_unsupported_features(self):
        return []


def stand_in(model_config):
    return ConfigStandIn(model_config=model_config, speculative_config=None)


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
    if mc is None or mc.runner_type != "generate" or mc.is_hybrid or mc.is_attention_free:
        return False
    return any(a in DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES for a in mc.architectures) or not mc.is_moe


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


# --- without Triton (patch 0008) ---------------------------------------------------------


def test_without_triton_pooling_models_run_mrv2_natively(monkeypatch, triton):
    """Patch 0008: MRV2's input preparation has torch-native kernels, so a
    pooling model keeps MRV2 where Triton has no backend (the base fell back
    to V1 here)."""
    triton(False)
    monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER", raising=False)
    for arch in ("BertModel", "Qwen3ForCausalLM", "HF_ColBERT"):
        assert stand_in(model(arch, "pooling")).use_v2_model_runner is True


def test_without_triton_generation_models_fall_back_to_v1(monkeypatch, triton):
    """Generation keeps the base behaviour: V1, with upstream's warning."""
    triton(False)
    monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER", raising=False)
    for arch in ("LlamaForCausalLM", "Qwen3ForCausalLM"):
        config = stand_in(model(arch, "generate"))
        assert config._is_default_v2_model_runner_model() is True
        assert config.use_v2_model_runner is False
    assert stand_in(model("LlamaForCausalLM", "draft")).use_v2_model_runner is False


@pytest.mark.parametrize(("runner_type", "raises"), [("pooling", False), ("generate", True)])
def test_forcing_mrv2_without_triton(monkeypatch, triton, runner_type, raises):
    """VLLM_USE_V2_MODEL_RUNNER=1 without Triton: a start-up error that names
    the way out for generation models; pooling models are served."""
    triton(False)
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "1")
    config = full_stand_in(False, False)
    config.model_config.runner_type = runner_type
    if raises:
        with pytest.raises(ValueError, match="requires Triton for generation models.*"
                                             "VLLM_USE_V2_MODEL_RUNNER=0"):
            config._validate_v2_model_runner()
    else:
        config._validate_v2_model_runner()
        assert config.use_v2_model_runner is True


# --- encoder-only models need whole prompts (patch 0002) ---------------------------------


def full_stand_in(chunked: bool, prefix_caching: bool):
    """A stand-in with every field _get_v2_model_runner_unsupported_features reads."""
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
        distributed_executor_backend=None, enable_dbo=False, enable_elastic_ep=False)
    config.ec_transfer_config = config.reasoning_config = None
    return config


@pytest.mark.parametrize(("chunked", "prefix_caching"), [(True, False), (False, True)])
def test_encoder_only_with_chunking_is_not_run_on_mrv2(monkeypatch, triton, chunked, prefix_caching):
    triton(True)
    monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER", raising=False)
    config = full_stand_in(chunked, prefix_caching)
    assert config._get_v2_model_runner_unsupported_features() == [
        "chunked prefill or prefix caching for encoder-only models"]
    assert config.use_v2_model_runner is False  # default: V1, with upstream's warning
    with pytest.raises(ValueError, match="chunked prefill or prefix caching for encoder-only models"):
        config._validate_v2_model_runner()  # what VLLM_USE_V2_MODEL_RUNNER=1 runs into


def test_encoder_only_unchunked_is_run_on_mrv2(monkeypatch, triton):
    triton(True)
    monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER", raising=False)
    config = full_stand_in(False, False)
    assert config._get_v2_model_runner_unsupported_features() == []
    assert config.use_v2_model_runner is True
