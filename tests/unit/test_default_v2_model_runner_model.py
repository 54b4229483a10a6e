"""``VllmConfig._is_default_v2_model_runner_model`` called the way upstream's
own test calls it (``tests/test_config.py::test_is_default_v2_model_runner_model``,
as PR 48290 extends it to pooling models): on the class, with a bare
``SimpleNamespace(model_config=...)`` standing for the config and a model
config namespace that carries only the fields that test gives it. Whatever
else the selection does (the pooling task, Triton, unsupported features)
belongs to ``use_v2_model_runner``; this method answers only whether the
model is one MRV2 is the default for: not hybrid, not attention-free, and
not a MoE outside ``DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES``, whatever its
runner type (patch 0007).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from vllm.config import VllmConfig

# The method is the 0.26.0 base's; upstream removed it in 0.29.0, where MRV2 became the
# default for every model (patch 0007 dropped there).
pytestmark = pytest.mark.line("0.26.0")


def model_config(model: str, arch: str, runner_type: str, *, moe: bool = False,
                 quantized: bool = False, **extra) -> SimpleNamespace:
    """A model config namespace with the fields upstream's test sets: the
    model id, its architectures, runner type, ``is_moe``, ``is_quantized``,
    and for some models ``is_hybrid`` / ``is_attention_free`` /
    ``is_multimodal_model`` (``extra``)."""
    return SimpleNamespace(model=model, architectures=[arch], runner_type=runner_type,
                           is_moe=moe, is_quantized=quantized, **extra)


CASES = [
    # generation models, the cases the base's test already had
    ("Qwen/Qwen3-1.7B-Base", model_config("Qwen/Qwen3-1.7B-Base", "Qwen3ForCausalLM", "generate"), True),
    ("meta-llama/Llama-3.2-1B", model_config("meta-llama/Llama-3.2-1B", "LlamaForCausalLM", "generate"), True),
    ("facebook/opt-125m", model_config("facebook/opt-125m", "OPTForCausalLM", "generate"), True),
    ("Qwen/Qwen3-1.7B-FP8", model_config("Qwen/Qwen3-1.7B-FP8", "Qwen3ForCausalLM", "generate",
                                         quantized=True), True),
    ("deepseek-ai/DeepSeek-V2-Lite-Chat (allowlisted MoE)",
     model_config("deepseek-ai/DeepSeek-V2-Lite-Chat", "DeepseekV2ForCausalLM", "generate", moe=True), True),
    ("Qwen/Qwen1.5-MoE-A2.7B (allowlisted MoE)",
     model_config("Qwen/Qwen1.5-MoE-A2.7B", "Qwen2MoeForCausalLM", "generate", moe=True), True),
    ("mistralai/Mixtral-8x7B-Instruct-v0.1 (MoE outside the allowlist)",
     model_config("mistralai/Mixtral-8x7B-Instruct-v0.1", "MixtralForCausalLM", "generate", moe=True), False),
    ("Qwen/Qwen3.5-4B (hybrid)",
     model_config("Qwen/Qwen3.5-4B", "Qwen3_5ForConditionalGeneration", "generate", is_hybrid=True), False),
    ("state-spaces/mamba-130m-hf (attention-free)",
     model_config("state-spaces/mamba-130m-hf", "MambaForCausalLM", "generate", is_attention_free=True), False),
    # pooling models: MRV2 by default since PR 48290 (False on the base)
    ("Qwen/Qwen3-Embedding-0.6B",
     model_config("Qwen/Qwen3-Embedding-0.6B", "Qwen3ForCausalLM", "pooling", is_multimodal_model=False), True),
    ("BAAI/bge-base-en-v1.5 (BertModel)",
     model_config("BAAI/bge-base-en-v1.5", "BertModel", "pooling", is_multimodal_model=False), True),
    ("sentence-transformers/all-MiniLM-L6-v2 (BertModel)",
     model_config("sentence-transformers/all-MiniLM-L6-v2", "BertModel", "pooling"), True),
    ("cross-encoder/ms-marco-MiniLM-L-6-v2 (BertForSequenceClassification)",
     model_config("cross-encoder/ms-marco-MiniLM-L-6-v2", "BertForSequenceClassification", "pooling"), True),
    ("TomoroAI/tomoro-colqwen3-embed-4b (ColQwen3, multimodal)",
     model_config("TomoroAI/tomoro-colqwen3-embed-4b", "ColQwen3", "pooling", is_multimodal_model=True), True),
    ("Qwen/Qwen2.5-Math-PRM-7B (Qwen2ForProcessRewardModel)",
     model_config("Qwen/Qwen2.5-Math-PRM-7B", "Qwen2ForProcessRewardModel", "pooling"), True),
    # the model checks apply to pooling models as to generation models
    ("Qwen/Qwen3-Embedding MoE outside the allowlist (pooling)",
     model_config("example/moe-embedding", "Qwen3MoeForCausalLM", "pooling", moe=True), False),
    ("LiquidAI/LFM2-ColBERT-350M (ColBERTLfm2Model, hybrid)",
     model_config("LiquidAI/LFM2-ColBERT-350M", "ColBERTLfm2Model", "pooling", is_hybrid=True), False),
    ("state-spaces/mamba-130m-hf --runner pooling (attention-free)",
     model_config("state-spaces/mamba-130m-hf", "MambaForCausalLM", "pooling", is_attention_free=True), False),
]


@pytest.mark.parametrize(("case", "model", "expected"), CASES, ids=[c[0] for c in CASES])
def test_is_default_v2_model_runner_model_on_a_bare_namespace(case, model, expected):
    config = SimpleNamespace(model_config=model)
    assert VllmConfig._is_default_v2_model_runner_model(config) is expected


def test_no_model_is_not_a_default_v2_model():
    assert VllmConfig._is_default_v2_model_runner_model(SimpleNamespace(model_config=None)) is False
