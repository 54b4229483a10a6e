"""Runner selection with Triton: which models run on Model Runner V2 by default.

Two kinds of tests. The behavioural ones (``test_real_config_*``) build a real
``VllmConfig`` with ``EngineArgs.create_engine_config`` for local models (MiniLM,
a tiny random Qwen3) and read ``VllmConfig.use_v2_model_runner``, public names
that upstream has too: they are what the 0.26.0 line's ``tests.toml`` maps to
its patches 0002 and 0007, so that ``python -m scripts.series.drift
test-upstream`` finds where upstream behaves the same (0.27.0 and 0.29.0;
the 0.32.0 line's base has both). The table tests read
``VllmConfig.use_v2_model_runner`` on lightweight stand-ins carrying just the
fields it reads (``tests/unit/stand_ins.py``), and the line it logs for a model
that does not default to MRV2. Where the lines' bases differ, the expected
runner is the line's: on the 0.26.0 line MoE models outside
``DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES``, hybrid and attention-free models
keep V1 (its base's ``_is_default_v2_model_runner_model``, which patches 0007
and 0011 keep and make say so); upstream dropped that gate in 0.29.0 (PR
48290), so on the 0.32.0 line every model defaults to MRV2 where Triton runs.
``_is_default_v2_model_runner_model`` called as upstream's test calls it is in
test_default_v2_model_runner_model.py, the selection without Triton (patch
0008 of each line) in test_runner_selection_without_triton.py, by pooling
task in test_runner_selection_by_task.py.
"""

from __future__ import annotations

import pytest

from scripts.series.lines import get_line
from tests.unit.stand_ins import model, stand_in

LINE = get_line().name

# Which runner a model gets, V1 or MRV2: a choice the bases from 0.34.0 no longer make (V1 is
# gone; the 0.34.0 line's MRV2 without Triton is test_cpu_standalone_runner_x86.py).
pytestmark = pytest.mark.line("0.26.0", "0.32.0")

# The default runner of a MoE model outside DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES, a hybrid or
# an attention-free model: V1 on the 0.26.0 base, MRV2 from 0.29.0 (the gate gone, PR 48290).
GATED = {"0.26.0": "V1", "0.32.0": "MRV2"}.get(LINE)  # None on a line the module does not run on (pytestmark)


def cases(runner_type: str, selected: str, models: str, **flags) -> list[tuple]:
    """Table rows (case id, model config stand-in, the runner selected by
    default) for ``models``: one architecture a line, optionally followed by
    what it stands for; ``flags`` as ``model``'s."""
    rows = []
    for line in models.strip().splitlines():
        arch = line.split()[0]
        rows.append((f"{line.strip()} {runner_type}", model(arch, runner_type, **flags), selected))
    return rows


TABLE = [
    *cases("pooling", "MRV2", """
        BertModel (sentence-transformers/all-MiniLM-L6-v2)
        Qwen3ForCausalLM (Qwen/Qwen3-Embedding-0.6B)
        ColQwen3 (TomoroAI/tomoro-colqwen3-embed-4b, multimodal)
        BertForSequenceClassification (cross-encoder)
        BertForTokenClassification
        HF_ColBERT (late interaction)
        XLMRobertaModel (BAAI/bge-m3 backbone)
        ModernBertModel
        LlamaForCausalLM (intfloat/e5-mistral-7b-instruct style)
        Qwen2ForRewardModel
        ColPaliForRetrieval (multimodal)"""),
    *cases("generate", "MRV2", """
        LlamaForCausalLM
        Qwen3ForCausalLM
        Qwen2VLForConditionalGeneration (multimodal)"""),
    *cases("draft", "MRV2", "LlamaForCausalLM"),
    *cases("pooling", "MRV2", "Qwen2MoeForCausalLM (allowlisted MoE)", moe=True),
    *cases("generate", "MRV2", "DeepseekV2ForCausalLM (allowlisted MoE)", moe=True),
    *cases("pooling", GATED, "Qwen3MoeForCausalLM (MoE outside the allowlist)", moe=True),
    *cases("generate", GATED, "Qwen3MoeForCausalLM (MoE outside the allowlist)", moe=True),
    *cases("pooling", GATED, "ColBERTLfm2Model (hybrid)", hybrid=True),
    *cases("generate", GATED, "JambaForCausalLM (hybrid MoE)", moe=True, hybrid=True),
    *cases("pooling", GATED, "MambaForCausalLM (attention-free)", attention_free=True),
    *cases("generate", GATED, "MambaForCausalLM (attention-free)", attention_free=True),
]


def selector_lines(log: list[str]) -> list[str]:
    return [m for m in log if "Model Runner V2" in m]


@pytest.mark.parametrize(("case", "model_config", "runner"), TABLE, ids=[t[0] for t in TABLE])
def test_default_runner_selection(monkeypatch, triton, vllm_config_log, case, model_config, runner):
    """With Triton and VLLM_USE_V2_MODEL_RUNNER unset: the runner selected, and
    for V1 (the 0.26.0 line only) the one line saying why, with the model's
    own flags (its patch 0011); nothing logged for MRV2."""
    triton(True)
    monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER", raising=False)
    assert stand_in(model_config).use_v2_model_runner is (runner == "MRV2")
    m = model_config
    expected = [] if runner == "MRV2" else [
        f"Model Runner V2 is not the default for {m.architectures[0]}: it is for models neither "
        "hybrid nor attention-free, MoE models only among DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES "
        f"(this model: hybrid={m.is_hybrid}, attention-free={m.is_attention_free}, MoE={m.is_moe}); "
        "using the V1 model runner (VLLM_USE_V2_MODEL_RUNNER=1 selects MRV2)."]
    assert selector_lines(vllm_config_log) == expected


# The base's gate answers no for a config without a model (0.26.0); 0.29.0 removed the gate.
@pytest.mark.line("0.26.0")
def test_no_model_config_selects_v1_silently(monkeypatch, triton, vllm_config_log):
    triton(True)
    monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER", raising=False)
    assert stand_in(None).use_v2_model_runner is False
    assert selector_lines(vllm_config_log) == []


@pytest.mark.parametrize(("env", "expected"), [(None, True), ("1", True), ("0", False)])
def test_environment_overrides_for_pooling_models(monkeypatch, triton, env, expected):
    triton(True)
    if env is None:
        monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER", raising=False)
    else:
        monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", env)
    assert stand_in(model("BertModel", "pooling")).use_v2_model_runner is expected


@pytest.mark.parametrize(("env", "expected"), [("1", True), ("0", False)])
def test_environment_overrides_for_a_moe_outside_the_allowlist(monkeypatch, triton, env, expected):
    """VLLM_USE_V2_MODEL_RUNNER decides for a model whose default is GATED
    too (V1 on the 0.26.0 line, MRV2 on the 0.32.0 line)."""
    triton(True)
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", env)
    assert stand_in(model("Qwen3MoeForCausalLM", "pooling", moe=True)).use_v2_model_runner is expected


# --- behavioural: real configs (what tests.toml maps) ----------------------------


def test_real_config_pooling_models_default_to_mrv2(real_config, minilm, tiny_qwen3):
    """Patch 0007 (upstream from 0.29.0): an encoder-only and a decoder
    pooling model run on MRV2 by default (Triton available), as a generation
    model does."""
    bert = real_config(minilm, "pooling")
    assert bert.model_config.attn_type == "encoder_only"
    assert bert.use_v2_model_runner is True
    qwen = real_config(tiny_qwen3, "pooling")
    assert qwen.model_config.attn_type == "decoder"
    assert qwen.use_v2_model_runner is True


def test_real_config_runner_type_does_not_decide_the_default(real_config, tiny_qwen3):
    """Patch 0007 (upstream from 0.29.0): the same model gets the same runner
    whether it generates or pools."""
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
    """Patch 0002 (upstream from 0.27.0): an encoder-only model set to
    chunked prefill or prefix caching explicitly still runs on MRV2 by
    default, as without the flag (the engine core turns chunked prefill off
    for a model without KV-cache groups; there is no KV cache to reuse)."""
    config = real_config(minilm, "pooling", **{option: True})
    assert config.model_config.attn_type == "encoder_only"
    assert config.use_v2_model_runner is True


def test_real_config_encoder_only_model_can_run_on_mrv2(real_config, minilm):
    """Patch 0002 (upstream from 0.27.0): MRV2 accepts an encoder-only model
    (whole prompts, the default for it): forcing it is no error, and
    chunking stays off."""
    config = real_config(minilm, "pooling", env="1")
    assert config.model_config.attn_type == "encoder_only"
    assert config.use_v2_model_runner is True
    assert not config.scheduler_config.enable_chunked_prefill
    assert not config.cache_config.enable_prefix_caching
