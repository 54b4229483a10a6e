"""Runner selection without Triton (patch 0008): MRV2's input preparation has
native kernels on the CPU, so pooling models keep MRV2 where Triton has no
backend; generation models keep the base behaviour (V1, or a start-up error
when MRV2 is forced). The real-config tests (what the line's tests.toml maps)
use only public names; the stand-in tests reach 0008's
``VllmConfig._v2_model_runner_runs_without_triton`` through
tests/unit/stand_ins.py's ConfigStandIn, looked up when called."""

from __future__ import annotations

import pytest

from tests.unit.stand_ins import full_stand_in, model, stand_in


def test_real_config_without_triton_pooling_models_run_mrv2(real_config, minilm, tiny_qwen3):
    """Default selection on the CPU without Triton: pooling models (encoder-only
    and decoder) on MRV2."""
    assert real_config(minilm, "pooling", triton=False).use_v2_model_runner is True
    assert real_config(tiny_qwen3, "pooling", triton=False).use_v2_model_runner is True


def test_real_config_without_triton_generation_falls_back_to_v1(real_config, tiny_qwen3):
    assert real_config(tiny_qwen3, "generate", triton=True).use_v2_model_runner is True
    assert real_config(tiny_qwen3, "generate", triton=False).use_v2_model_runner is False


def test_real_config_forcing_mrv2_without_triton(real_config, minilm, tiny_qwen3):
    """VLLM_USE_V2_MODEL_RUNNER=1 without Triton: pooling models are served;
    for generation models a start-up error names the way out."""
    assert real_config(minilm, "pooling", triton=False, env="1").use_v2_model_runner is True
    with pytest.raises(ValueError, match="VLLM_USE_V2_MODEL_RUNNER=0"):
        real_config(tiny_qwen3, "generate", triton=False, env="1")



def test_without_triton_pooling_models_run_mrv2_natively(monkeypatch, triton):
    """Patch 0008: MRV2's input preparation has native CPU kernels, so a
    pooling model keeps MRV2 where Triton has no backend (the base fell back
    to V1 here)."""
    triton(False)
    monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER", raising=False)
    for arch in ("BertModel", "Qwen3ForCausalLM", "HF_ColBERT"):
        assert stand_in(model(arch, "pooling")).use_v2_model_runner is True


@pytest.mark.parametrize(("case", "config"), [
    ("M-RoPE (Qwen2-VL / ColQwen3 embedding)", lambda: stand_in(model("ColQwen3", "pooling", mrope=True))),
    ("XD-RoPE", lambda: stand_in(model("HunYuanVLForConditionalGeneration", "pooling", xdrope=4))),
    ("decode context parallelism", lambda: stand_in(model("Qwen3ForCausalLM", "pooling"), dcp=2)),
], ids=lambda v: v if isinstance(v, str) else "")
def test_without_triton_pooling_models_needing_other_kernels_fall_back_to_v1(monkeypatch, triton, case, config):
    """Only the input-preparation kernels have native versions: a pooling
    model whose steps need another Triton kernel (M-RoPE/XD-RoPE positions,
    decode context parallelism) keeps the base behaviour, V1. (Hybrid models
    never default to MRV2, with or without Triton.)"""
    triton(False)
    monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER", raising=False)
    config = config()
    assert config._is_default_v2_model_runner_model() is True
    assert config._v2_model_runner_runs_without_triton() is False
    assert config.use_v2_model_runner is False
    triton(True)
    assert config.use_v2_model_runner is True


def test_without_triton_forcing_mrv2_for_a_hybrid_pooling_model_fails(monkeypatch, triton):
    triton(False)
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "1")
    config = full_stand_in(False, False)
    config.model_config.is_hybrid = True
    with pytest.raises(ValueError, match="requires Triton"):
        config._validate_v2_model_runner()


def test_without_triton_generation_models_fall_back_to_v1(monkeypatch, triton):
    """Generation keeps the base behaviour: V1, with upstream's warning."""
    triton(False)
    monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER", raising=False)
    for arch in ("LlamaForCausalLM", "Qwen3ForCausalLM"):
        config = stand_in(model(arch, "generate"))
        assert config._is_default_v2_model_runner_model() is True
        assert config.use_v2_model_runner is False
    assert stand_in(model("LlamaForCausalLM", "draft")).use_v2_model_runner is False


def test_forcing_mrv2_without_triton_serves_a_pooling_model(monkeypatch, triton):
    """VLLM_USE_V2_MODEL_RUNNER=1 without Triton: a pooling model is served."""
    triton(False)
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "1")
    config = full_stand_in(False, False)
    config._validate_v2_model_runner()
    assert config.use_v2_model_runner is True


def test_forcing_mrv2_without_triton_refuses_a_generation_model(monkeypatch, triton):
    """VLLM_USE_V2_MODEL_RUNNER=1 without Triton: a start-up error that names
    the way out for a generation model."""
    triton(False)
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "1")
    config = full_stand_in(False, False)
    config.model_config.runner_type = "generate"
    with pytest.raises(ValueError, match="requires Triton for this model.*VLLM_USE_V2_MODEL_RUNNER=0"):
        config._validate_v2_model_runner()
