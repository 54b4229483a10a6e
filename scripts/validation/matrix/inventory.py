"""The inventory of the validation matrix: every pooling architecture of the
base's model registry, grouped by implementing class (many registry names
map to one class), each with one status:

- ``validated``: the matrix has rows for it (``scripts/validation/matrix/rows.py``);
- ``kept on V1``: vLLM's selector keeps it off MRV2; the reason is the one
  the selector gives, read at run time from a config built for a small
  checkpoint (``selector_verdict``; ``SELECTOR_CASES``);
- ``not instantiable offline``: with the reason (remote code that no
  installed package ships, a tokenizer or processor that cannot be built
  locally);
- ``refused on the CPU``: every case of it is one the CPU build refuses at
  start-up (``MatrixCase.refused``, the reason); its rows check the refusal.

Pooling architectures are the names of the registry's ``_EMBEDDING_MODELS``,
``_SEQUENCE_CLASSIFICATION_MODELS``, ``_TOKEN_CLASSIFICATION_MODELS``,
``_REWARD_MODELS`` and ``_LATE_INTERACTION_MODELS`` (several of which are
decoder LMs converted by ``as_embedding_model``), the Transformers modeling
backend's embedding and classification classes, and the decoder LMs the
matrix converts through the registry's suffix rules (``Qwen3ForCausalLM``
as an embedder, ``Qwen3ForSequenceClassification`` through
``as_seq_cls_model``). ``tests/unit/test_matrix_inventory.py`` fails when
the registry and the inventory disagree.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from scripts.common.environ import environ

POOLING_DICTS = ("_EMBEDDING_MODELS", "_SEQUENCE_CLASSIFICATION_MODELS", "_TOKEN_CLASSIFICATION_MODELS",
                 "_REWARD_MODELS", "_LATE_INTERACTION_MODELS")
REMOTE = "needs remote code ({}) that no installed package ships: no config class, and no transformers reference"
PROCESSOR = ("multimodal: needs the model's own tokenizer and processor files ({}), which no installed "
             "package ships; not built locally in this revision")

NOT_INSTANTIABLE: dict[str, str] = {
    "jina:JinaForRanking": ("no transformers reference: jinaai/jina-reranker-v3's scores come from its remote "
                            "modeling code, which no installed package ships (a tiny checkpoint in its layout, "
                            "zoo_published.make_jina_reranker, serves tests/e2e/test_fault_jina_reranker.py)"),
    "jina:JinaEmbeddingsV5Model": REMOTE.format("jinaai/jina-embeddings-v5 (task LoRA adapters)"),
    "voyage:VoyageQwen3BidirectionalEmbedModel": REMOTE.format("voyageai's bidirectional Qwen3"),
    "nemotron_nas:DeciLMForCausalLM": REMOTE.format("nvidia Nemotron-NAS (DeciLM)"),
    "telechat2:TeleChat2ForCausalLM": REMOTE.format("Tele-AI/TeleChat2"),
    "internlm2:InternLM2ForRewardModel": REMOTE.format("internlm/internlm2-*-reward"),
    "gritlm:GritLM": ("its pooler finds GritLM's instruction template (<|user|>/<|embed|> markers of "
                      "its Mistral tokenizer) in the prompt; that tokenizer cannot be built locally"),
    "terratorch:Terratorch": "needs the terratorch package (not installed) and its geospatial checkpoints",
    "qwen3_asr_forced_aligner:Qwen3ASRForcedAlignerForTokenClassification": PROCESSOR.format(
        "Qwen3-ASR audio processor and Qwen tokenizer"),
    "clef_omni:ClefOmniForJointSchema": PROCESSOR.format(
        "Qwen3-Omni audio/image/video processor and Qwen tokenizer, and its joint-schema head file"),
    "colpali:ColPaliModel": PROCESSOR.format("PaliGemma tokenizer with <image> and location tokens"),
    "colmodernvbert:ColModernVBertForRetrieval": PROCESSOR.format("Idefics3-style processor"),
    "colqwen3_5:ColQwen3_5Model": PROCESSOR.format("Qwen3.5-VL processor"),
    "colqwen3:ColQwen3Model": PROCESSOR.format("Qwen3-VL processor") + (
        "; its M-RoPE V1 fallback is the one shown by the Qwen2-VL selector row"),
    "qwen2_vl:Qwen2VLForConditionalGeneration": (
        "vllm/model_executor/models/qwen2_vl.py imports transformers' Qwen2-VL image processor module, "
        "which needs torchvision; none is installed (docs/base-and-recipe.md: none built for this torch). Its M-RoPE "
        "V1 fallback without Triton is covered by patch 0008's selection unit tests"),
    "llava_next:LlavaNextForConditionalGeneration": PROCESSOR.format("LLaVA-NeXT processor"),
    "embedding_gemma2:EmbeddingGemma2Model": (
        "vllm/model_executor/models/embedding_gemma2.py imports transformers' EmbeddingGemma2Processor, whose "
        "module imports the Gemma 4 image processor, which needs torchvision; none is installed "
        "(docs/base-and-recipe.md: none built for this torch), so the architecture fails registry inspection even "
        "for a text-only checkpoint. The checkpoint and its reference would build locally (transformers' "
        "EmbeddingGemma2Model without vision/audio towers, MiniLM's tokenizer, modality limits 0)"),
    "phi3v:Phi3VForCausalLM": REMOTE.format("microsoft/Phi-3-vision processor and model"),
    "nemotron_vl:LlamaNemotronVLForEmbedding": REMOTE.format("nvidia Llama-Nemotron-VL"),
    "nemotron_vl:LlamaNemotronVLForSequenceClassification": REMOTE.format("nvidia Llama-Nemotron-VL"),
    "jina_vl:JinaVLForSequenceClassification": REMOTE.format("jinaai/jina-reranker-m0"),
    "transformers:TransformersMultiModalEmbeddingModel": PROCESSOR.format("a multimodal model's processor"),
    "transformers:TransformersMultiModalForSequenceClassification": PROCESSOR.format(
        "a multimodal model's processor"),
    "lfm2:Lfm2BidirectionalModel": (
        "no transformers reference: transformers' Lfm2Model is causal (its short convolutions and attention "
        "look back only), and the bidirectional LFM2 embedders' modeling code is remote code that no "
        "installed package ships"),
    "colultravbert:ColUltraVBertForRetrieval": PROCESSOR.format("Idefics3 image processor and tokenizer"),
    "d3:D3ForSequenceClassification": PROCESSOR.format(
        "Qwen3.5-VL processor and Qwen tokenizer, and its decision_config.json readout"),
    "clef_flash:ClefFlashForJointSchema": PROCESSOR.format(
        "Qwen3.5-VL processor and Qwen tokenizer, and its joint-schema head file"),
}

# Entries of NOT_INSTANTIABLE for some lines only: architectures upstream added or removed
# after the 0.26.0 base (vLLM's registry lists removed ones in _PREVIOUSLY_SUPPORTED_MODELS).
NOT_INSTANTIABLE_LINES: dict[str, tuple[str, ...]] = {
    "gritlm:GritLM": ("0.26.0",),  # removed in 0.28.0
    "clef_omni:ClefOmniForJointSchema": ("0.32.0", "0.34.0"),  # added after 0.26.0
    "embedding_gemma2:EmbeddingGemma2Model": ("0.32.0", "0.34.0"),  # added after 0.26.0
    # added after 0.32.0
    "lfm2:Lfm2BidirectionalModel": ("0.34.0",),
    "colultravbert:ColUltraVBertForRetrieval": ("0.34.0",),
    "d3:D3ForSequenceClassification": ("0.34.0",),
    "clef_flash:ClefFlashForJointSchema": ("0.34.0",),
}


def not_instantiable() -> dict[str, str]:
    """``NOT_INSTANTIABLE`` for the line under test (``scripts.series.lines.get_line``):
    "module:Class" -> why no checkpoint of it is built here."""
    from scripts.series.lines import get_line

    line = get_line().name
    return {impl: why for impl, why in NOT_INSTANTIABLE.items() if line in NOT_INSTANTIABLE_LINES.get(impl, (line,))}


@dataclass(frozen=True)
class Entry:
    """One implementing class of the inventory."""

    impl: str  # "module:Class" of vllm/model_executor/models
    names: tuple[str, ...]  # registry names (and adapter names) resolving to it
    sources: tuple[str, ...]  # registry dicts, or "adapter"
    status: str  # "validated", "kept on V1", "not instantiable offline" or "refused on the CPU"
    reason: str | None  # why not validated on MRV2 (selector reason or not-instantiable reason)
    cases: tuple[str, ...]  # matrix case ids


def _registry():
    from vllm.model_executor.models import registry

    return registry


def registry_pooling() -> dict[str, dict[str, list[str]]]:
    """``{"module:Class": {registry dict: [names]}}`` for every pooling
    architecture of the base's registry (the Transformers backend's
    embedding and classification classes included)."""
    reg = _registry()
    out: dict[str, dict[str, list[str]]] = {}
    for dname in POOLING_DICTS:
        for name, (mod, cls) in getattr(reg, dname).items():
            out.setdefault(f"{mod}:{cls}", {}).setdefault(dname, []).append(name)
    for name, (mod, cls) in reg._TRANSFORMERS_BACKEND_MODELS.items():
        # not the generating ones: text generation, and from 0.34.0 multi-token prediction drafts
        if not name.endswith(("ForCausalLM", "ForMTP")):
            out.setdefault(f"{mod}:{cls}", {}).setdefault("_TRANSFORMERS_BACKEND_MODELS", []).append(name)
    return out


def implementing_class(name: str) -> tuple[str, str]:
    """``("module:Class", source)`` that registry name ``name`` resolves to: a
    pooling dict's entry, else (as ``ModelRegistry._normalize_arch`` does) the
    decoder LM its suffix converts, with source ``adapter``. ``KeyError``
    when neither."""
    for impl, dicts in registry_pooling().items():
        for dname, names in dicts.items():
            if name in names:
                return impl, dname
    from vllm.config.model import iter_architecture_defaults

    models = _registry()._TEXT_GENERATION_MODELS
    for suffix, _ in iter_architecture_defaults():
        if name.endswith(suffix):
            for repl, _ in iter_architecture_defaults():
                base = name[: -len(suffix)] + repl
                if base in models:
                    mod, cls = models[base]
                    return f"{mod}:{cls}", "adapter"
    raise KeyError(f"{name} is neither a pooling architecture of the registry nor convertible by suffix")


def selector_verdict(model_dir, **engine) -> tuple[str, str | None]:
    """What vLLM's runner selection does for a checkpoint, by default
    (``VLLM_USE_V2_MODEL_RUNNER`` unset): ``("MRV2" | "V1", reason)``, where
    the reason is what the selector logged while deciding (its warnings and
    info lines from ``vllm.config.vllm``), or None when it logged nothing.
    Builds the engine config only (no engine)."""
    from vllm import logger as vllm_logger
    from vllm.engine.arg_utils import EngineArgs

    messages: list[str] = []

    class Capture(logging.Handler):
        def emit(self, record):
            messages.append(record.getMessage())

    # use_v2_model_runner is a property that reads the variable: unset while it is asked
    with environ(VLLM_USE_V2_MODEL_RUNNER=None):
        config = EngineArgs(model=str(model_dir), runner="pooling", dtype="float32", enforce_eager=True,
                            **engine).create_engine_config()
        handler, log = Capture(level=logging.INFO), logging.getLogger("vllm.config.vllm")
        for cached in (vllm_logger._print_warning_once, vllm_logger._print_info_once):
            cached.cache_clear()
        log.addHandler(handler)
        try:
            v2 = config.use_v2_model_runner
        finally:
            log.removeHandler(handler)
    return ("MRV2" if v2 else "V1"), ("; ".join(messages) or None)


def inventory(selections: dict[str, tuple[str, str | None]] | None = None) -> list[Entry]:
    """Every implementing class with its status. ``selections`` maps
    "module:Class" to ``selector_verdict`` results (selector cases); classes
    kept on V1 take their reason from there."""
    from scripts.validation.matrix.rows import CASES
    from scripts.validation.matrix.selector_cases import SELECTOR_CASES

    selections = selections or {}
    groups = {impl: (tuple(n for ns in d.values() for n in ns), tuple(d)) for impl, d in registry_pooling().items()}
    cases: dict[str, list[str]] = {}
    refusals: dict[str, list[str | None]] = {}
    for c in CASES:
        impl, source = implementing_class(c.architecture)
        cases.setdefault(impl, []).append(c.id)
        refusals.setdefault(impl, []).append(c.refused)
        if source == "adapter":
            names, sources = groups.get(impl, ((), ()))
            groups[impl] = (tuple(dict.fromkeys(names + (c.architecture,))),
                            tuple(dict.fromkeys(sources + ("adapter",))))
    kept = {s.impl: s for s in SELECTOR_CASES}
    unbuilt = not_instantiable()
    out = []
    for impl, (names, sources) in sorted(groups.items()):
        if impl in kept:
            verdict = selections.get(impl)
            reason = (verdict[1] or "the selector gives no reason") if verdict else kept[impl].why
            if verdict and verdict[0] != "V1":
                reason = f"must stay on V1 ({kept[impl].why}), but the selector picked {verdict[0]}"
            out.append(Entry(impl, names, sources, "kept on V1", reason, tuple(cases.get(impl, ()))))
        elif impl in cases and all(refusals[impl]):
            out.append(Entry(impl, names, sources, "refused on the CPU", "; ".join(dict.fromkeys(refusals[impl])),
                             tuple(cases[impl])))
        elif impl in cases:
            out.append(Entry(impl, names, sources, "validated", None, tuple(cases[impl])))
        elif impl in unbuilt:
            out.append(Entry(impl, names, sources, "not instantiable offline", unbuilt[impl], ()))
        else:
            out.append(Entry(impl, names, sources, "MISSING", "no case, no selector case, no reason", ()))
    return out
