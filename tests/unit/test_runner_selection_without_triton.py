"""Runner selection on a CPU without Triton (patch 0008 of each line): MRV2's
input preparation has native kernels on the CPU, so pooling models run MRV2
where Triton has no backend, unless their steps need an MRV2 kernel those do
not cover (multi-dimensional RoPE, Mamba state, prompt embeddings, context
parallelism) or their pooling task is one MRV2 does not serve: then V1, with
one line in the log saying why, and forcing MRV2 is a start-up error that
names VLLM_USE_V2_MODEL_RUNNER=0. Generation models keep upstream's
behaviour: V1 with upstream's warning, and an error when MRV2 is forced.

The same promise on both lines, in each base's selection code, which words
it differently: where the expected log line or error differs, the test
takes the line's from a small table (``LINE``). Real ``VllmConfig`` objects,
built as an engine builds them (``EngineArgs.create_engine_config``), with
``vllm.config.vllm.HAS_TRITON`` set by the test; where a case cannot be
built from a small local checkpoint (hybrid and attention-free models,
context parallelism on a CPU), a real config of another model is changed
through public names (the ``ModelConfig`` property, the parallel config's
field) before the selection reads it. The ``test_real_config_*`` tests are
what each line's ``tests.toml`` maps to its 0008. A few tests use stand-ins
(``tests/unit/stand_ins.py``) for architectures without a local checkpoint.
"""

from __future__ import annotations

import re

import pytest

from scripts.series.lines import get_line
from tests.unit.stand_ins import config_only_checkpoint, model, stand_in

LINE = get_line().name

# Which runner a model gets, V1 or MRV2: a choice the bases from 0.34.0 no longer make (V1 is
# gone; the 0.34.0 line's MRV2 without Triton is test_cpu_standalone_runner_x86.py).
pytestmark = pytest.mark.line("0.26.0", "0.32.0")

UPSTREAM_FALLBACK = "Model Runner V2 requires Triton; using the V1 model runner instead."


def config_error(exc: ValueError) -> str:
    """The message of the ``ValueError`` the config's validation raised
    (``VllmConfig`` is a pydantic dataclass: building it wraps the error in a
    ``ValidationError``, itself a ``ValueError``)."""
    errors = getattr(exc, "errors", None)
    return str(errors()[0]["ctx"]["error"]) if callable(errors) else str(exc)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """Config-only Qwen3 decoders whose rotary embedding is multi-dimensional:
    M-RoPE (``mrope_section`` in the RoPE parameters, as Qwen2-VL's text
    model) and XD-RoPE (``xdrope_section``, as HunYuan-VL)."""
    root = tmp_path_factory.mktemp("selection-without-triton")
    return {
        "mrope": config_only_checkpoint(
            root / "mrope", "Qwen3ForCausalLM", "Qwen3Config", head_dim=64,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [16, 8, 8]}),
        "xdrope": config_only_checkpoint(
            root / "xdrope", "Qwen3ForCausalLM", "Qwen3Config", head_dim=64, xdrope_section=[8, 8, 8, 8]),
    }


# --- what each line's tests.toml maps to its 0008 -----------------------------------------


def test_real_config_without_triton_pooling_models_run_mrv2(real_config, minilm, tiny_qwen3):
    """Default selection on the CPU without Triton: pooling models (encoder-only
    and decoder) on MRV2."""
    assert real_config(minilm, "pooling", triton=False).use_v2_model_runner is True
    assert real_config(tiny_qwen3, "pooling", triton=False).use_v2_model_runner is True


def test_real_config_without_triton_generation_falls_back_to_v1(real_config, tiny_qwen3):
    assert real_config(tiny_qwen3, "generate", triton=True).use_v2_model_runner is True
    assert real_config(tiny_qwen3, "generate", triton=False).use_v2_model_runner is False


# MRV2 forced for a generation model without Triton: the 0.26.0 line's 0008 makes the error name
# the way out; the 0.32.0 line's 0008 keeps upstream's error for generation models (its header).
GENERATION_REFUSAL = {
    "0.26.0": r"Model Runner V2 requires Triton for this model: .* or set VLLM_USE_V2_MODEL_RUNNER=0\.",
    "0.32.0": r"Model Runner V2 requires Triton\.",
}.get(LINE)  # None on a line the module does not run on (pytestmark)


def test_real_config_forcing_mrv2_without_triton(real_config, minilm, tiny_qwen3):
    """VLLM_USE_V2_MODEL_RUNNER=1 without Triton: pooling models are served;
    for generation models it is a start-up error."""
    assert real_config(minilm, "pooling", triton=False, env="1").use_v2_model_runner is True
    with pytest.raises(ValueError) as e:
        real_config(tiny_qwen3, "generate", triton=False, env="1")
    assert re.fullmatch(GENERATION_REFUSAL, config_error(e.value)), config_error(e.value)


# --- pooling models MRV2 serves natively ------------------------------------------------------


def test_without_triton_pooling_models_run_mrv2_natively(monkeypatch, triton):
    """Architectures without a local checkpoint (stand-ins): a BERT embedder,
    a Qwen3 embedder, a ColBERT model keep MRV2 where Triton has no backend
    (upstream falls back to V1 for every model there)."""
    triton(False)
    monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER", raising=False)
    for arch in ("BertModel", "Qwen3ForCausalLM", "HF_ColBERT"):
        assert stand_in(model(arch, "pooling")).use_v2_model_runner is True


# The 0.32.0 line's 0008 says so when it selects MRV2; the 0.26.0 line's says it from its CPU
# model runner, when the engine starts.
@pytest.mark.line("0.32.0")
def test_without_triton_the_selection_says_mrv2_runs_native_kernels(real_config, vllm_config_log, minilm):
    assert real_config(minilm, "pooling", triton=False).use_v2_model_runner is True
    assert [m for m in vllm_config_log if "Model Runner V2" in m] == [
        "Triton has no usable backend here: Model Runner V2 prepares inputs with native CPU kernels "
        "instead (pooling steps only; generation on MRV2 needs Triton)."]


# --- what the native kernels do not cover: V1, and an error when MRV2 is forced -----------


def _native(why: str) -> str:
    return (f"Without Triton, Model Runner V2 runs pooling models on native CPU kernels, which do not "
            f"cover {why}; using the V1 model runner instead.")


def _unsupported(what: str) -> str:
    return f"Model Runner V2 does not yet support {what}; using the V1 model runner instead."


def _not_default(hybrid: bool, attention_free: bool) -> str:
    return ("Model Runner V2 is not the default for Qwen3ForCausalLM: it is for models neither hybrid nor "
            "attention-free, MoE models only among DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES (this model: "
            f"hybrid={hybrid}, attention-free={attention_free}, MoE=False); using the V1 model runner "
            "(VLLM_USE_V2_MODEL_RUNNER=1 selects MRV2).")


# A configured pooling task MRV2 does not serve, on the 0.32.0 line: V1 on every platform (upstream
# selects MRV2 and its PoolingRunner refuses to start).
UNSERVED_TASK = "Model Runner V2 does not serve the pooling task 'plugin'; using the V1 model runner instead."
UNSERVED_TASK_REFUSAL = ("Model Runner V2 does not serve the pooling task 'plugin'. "
                         "Set VLLM_USE_V2_MODEL_RUNNER=0 to use the V1 model runner.")

# The tasks the 0.26.0 line's MRV2 serves for MiniLM (an encoder-only model).
MINILM_SERVED = "['classify', 'embed', 'embed&token_classify', 'token_classify', 'token_embed']"


def _set(obj_path: str, value):
    """A change that sets the config's field at ``obj_path`` (dotted, under the config) to ``value``."""
    def change(config, monkeypatch):
        *owner, name = obj_path.split(".")
        target = config
        for part in owner:
            target = getattr(target, part)
        setattr(target, name, value)
    return change


def _model_property(name: str):
    """A change that makes every ``ModelConfig``'s ``name`` property true for the test."""
    def change(config, monkeypatch):
        from vllm.config import ModelConfig

        monkeypatch.setattr(ModelConfig, name, property(lambda self: True))
    return change


# Each case: the model ("mrope", "xdrope": the checkpoints above; else the conftest's fixture),
# its engine arguments, the change made to the built config, and per line the one log line
# saying why V1 is used. The 0.26.0 line's 0008 keeps upstream's warning for what its native
# kernels do not cover (M-RoPE, XD-RoPE, decode context parallelism); the features MRV2 of the
# 0.26.0 base does not support at all get upstream's unsupported-feature warning; hybrid and
# attention-free models are not MRV2's default there (the base's gate, gone in 0.29.0); a task
# MRV2 does not serve is the 0.26.0 line's 0011. The 0.32.0 line's 0008 names the reason in one
# warning; XD-RoPE is M-RoPE there (0.30.0 reads xdrope_section as the M-RoPE sections).
FALLBACKS = [
    ("M-RoPE", "mrope", {}, None,
     {"0.26.0": UPSTREAM_FALLBACK, "0.32.0": _native("multi-dimensional RoPE (M-RoPE)")}),
    ("XD-RoPE", "xdrope", {}, None,
     {"0.26.0": UPSTREAM_FALLBACK, "0.32.0": _native("multi-dimensional RoPE (M-RoPE)")}),
    ("decode context parallelism", "tiny_qwen3", {}, _set("parallel_config.decode_context_parallel_size", 2),
     {"0.26.0": UPSTREAM_FALLBACK, "0.32.0": _native("decode context parallelism")}),
    ("prefill context parallelism", "tiny_qwen3", {}, _set("parallel_config.prefill_context_parallel_size", 2),
     {"0.26.0": _unsupported("prefill context parallelism"), "0.32.0": _native("prefill context parallelism")}),
    ("prompt embeddings", "tiny_qwen3", {"enable_prompt_embeds": True}, None,
     {"0.26.0": _unsupported("prompt embeds"), "0.32.0": _native("prompt embeddings")}),
    ("hybrid", "tiny_qwen3", {}, _model_property("is_hybrid"),
     {"0.26.0": _not_default(True, False), "0.32.0": _native("hybrid and attention-free models (Mamba state)")}),
    ("attention-free", "tiny_qwen3", {}, _model_property("is_attention_free"),
     {"0.26.0": _not_default(False, True), "0.32.0": _native("hybrid and attention-free models (Mamba state)")}),
    ("configured task MRV2 does not serve", "minilm", {"pooler_config": {"task": "plugin"}}, None,
     {"0.26.0": _unsupported(f"the configured pooling task 'plugin' (it serves {MINILM_SERVED})"),
      "0.32.0": UNSERVED_TASK}),
]


@pytest.fixture
def pooling_config(request, real_config, monkeypatch, checkpoints):
    """``pooling_config(case, env=None)``: the config of a FALLBACKS case
    without Triton, its change made."""
    def make(case, env=None):
        _, name, engine_args, change, _ = case
        path = checkpoints[name] if name in checkpoints else request.getfixturevalue(name)
        config = real_config(path, "pooling", triton=False, env=env, **engine_args)
        if change is not None:
            change(config, monkeypatch)
        return config
    return make


@pytest.mark.parametrize("case", FALLBACKS, ids=[c[0] for c in FALLBACKS])
def test_without_triton_pooling_models_needing_other_kernels_fall_back_to_v1(pooling_config, vllm_config_log,
                                                                            case):
    """V1 by default, with the one line saying why."""
    config = pooling_config(case)
    assert config.use_v2_model_runner is False
    assert [m for m in vllm_config_log if "V1 model runner" in m] == [case[4][LINE]]


@pytest.mark.parametrize("case", FALLBACKS[:3], ids=[c[0] for c in FALLBACKS[:3]])
def test_with_triton_the_same_models_run_mrv2(pooling_config, triton, case):
    """What keeps M-RoPE, XD-RoPE and decode context parallelism on V1 is
    Triton's absence alone."""
    config = pooling_config(case)
    triton(True)
    assert config.use_v2_model_runner is True


def test_with_triton_a_task_mrv2_does_not_serve_runs_v1(real_config, vllm_config_log, minilm):
    """The task is not a matter of kernels: with Triton too (the GPU's case),
    V1 by default with the one line saying why, and forcing MRV2 is refused
    when the config is built, before the engine starts."""
    case = FALLBACKS[-1]
    assert case[0] == "configured task MRV2 does not serve"
    config = real_config(minilm, "pooling", triton=True, **case[2])
    assert config.use_v2_model_runner is False
    assert [m for m in vllm_config_log if "V1 model runner" in m] == [case[4][LINE]]
    with pytest.raises(ValueError) as e:
        real_config(minilm, "pooling", triton=True, env="1", **case[2])
    assert config_error(e.value) == REFUSALS[case[0]][LINE]


_REFUSAL_0260 = ("Model Runner V2 requires Triton for this model: without it, MRV2 serves only pooling models "
                 "on the CPU (no M-RoPE/XD-RoPE, hybrid, or decode context parallelism). Install Triton with a "
                 "backend for this device, or set VLLM_USE_V2_MODEL_RUNNER=0.")


def _unsupported_refusal(what: str) -> str:
    return f"Model Runner V2 does not yet support: {what}. Set VLLM_USE_V2_MODEL_RUNNER=0 to use the V1 model runner."


def _native_refusal(why: str) -> str:
    return (f"Model Runner V2 requires Triton for {why}: without it, MRV2 runs pooling models on native CPU "
            "kernels, which do not cover that. Set VLLM_USE_V2_MODEL_RUNNER=0 to use the V1 model runner.")


# The error forcing MRV2 gives, per case and line: the 0.26.0 line's 0008 gives one message for
# what its native kernels do not cover; the 0.32.0 line's names the reason.
REFUSALS = {
    "M-RoPE": {"0.26.0": _REFUSAL_0260, "0.32.0": _native_refusal("multi-dimensional RoPE (M-RoPE)")},
    "XD-RoPE": {"0.26.0": _REFUSAL_0260, "0.32.0": _native_refusal("multi-dimensional RoPE (M-RoPE)")},
    "decode context parallelism": {"0.26.0": _REFUSAL_0260,
                                   "0.32.0": _native_refusal("decode context parallelism")},
    "prefill context parallelism": {"0.26.0": _unsupported_refusal("prefill context parallelism"),
                                    "0.32.0": _native_refusal("prefill context parallelism")},
    "prompt embeddings": {"0.26.0": _unsupported_refusal("prompt embeds"),
                          "0.32.0": _native_refusal("prompt embeddings")},
    "hybrid": {"0.26.0": _REFUSAL_0260,
               "0.32.0": _native_refusal("hybrid and attention-free models (Mamba state)")},
    "attention-free": {"0.32.0": _native_refusal("hybrid and attention-free models (Mamba state)")},
    "configured task MRV2 does not serve": {
        "0.26.0": _unsupported_refusal(f"the configured pooling task 'plugin' (it serves {MINILM_SERVED})"),
        "0.32.0": UNSERVED_TASK_REFUSAL},
}


@pytest.mark.parametrize("case", [
    # The 0.26.0 line's 0008 refuses hybrid models only, not attention-free ones (which are not
    # MRV2's default on its base); the 0.32.0 line's refuses both.
    pytest.param(c, id=c[0], marks=[pytest.mark.line("0.32.0")] if c[0] == "attention-free" else [])
    for c in FALLBACKS])
def test_without_triton_forcing_mrv2_where_native_kernels_do_not_serve_is_refused(pooling_config, case):
    """VLLM_USE_V2_MODEL_RUNNER=1: a start-up error naming the way out. The
    validation ``VllmConfig`` runs when it is built (``_validate_v2_model_runner``,
    upstream's) is run again for the cases whose change comes after."""
    with pytest.raises(ValueError) as e:
        pooling_config(case, env="1")._validate_v2_model_runner()
    assert config_error(e.value) == REFUSALS[case[0]][LINE]


# --- generation models: upstream's behaviour ------------------------------------------------


def test_without_triton_generation_models_fall_back_to_v1(monkeypatch, triton, vllm_config_log):
    """Generation and draft models without a local checkpoint (stand-ins): V1,
    with upstream's warning."""
    triton(False)
    monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER", raising=False)
    for arch in ("LlamaForCausalLM", "Qwen3ForCausalLM"):
        assert stand_in(model(arch, "generate")).use_v2_model_runner is False
    assert stand_in(model("LlamaForCausalLM", "draft")).use_v2_model_runner is False
    assert [m for m in vllm_config_log if "Model Runner V2" in m] == [UPSTREAM_FALLBACK]


def test_without_triton_a_generation_model_logs_upstreams_warning(real_config, vllm_config_log, tiny_qwen3):
    assert real_config(tiny_qwen3, "generate", triton=False).use_v2_model_runner is False
    assert [m for m in vllm_config_log if "Model Runner V2" in m] == [UPSTREAM_FALLBACK]
