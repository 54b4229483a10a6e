"""The validation matrix's rows, as data: one ``Case`` per (checkpoint,
engine options), each with the pooling tasks it is checked on. ``make
matrix`` (``scripts/matrix.py``) opens one engine per case and runner and
runs every task through it; the tests (``tests/e2e/test_matrix.py``) are
generated from the same cases (``smoke=True``: the family's row in ``make
test``).

A case names its architecture as ``config.json`` (or ``hf_overrides``)
does, so that ``scripts/inventory.py`` can map it to the registry's
implementing class. ``default`` is the runner vLLM must pick when
``VLLM_USE_V2_MODEL_RUNNER`` is unset on a CPU without Triton: ``MRV2``,
or ``V1`` for models MRV2 cannot serve (then only that run is made).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Callable

import numpy as np

from scripts import references as ref
from scripts.models import make_tiny_colbert, sts_test
from scripts.zoo import make_clip, make_custom, make_hf

FAMILIES = ("encoders", "cross-encoders", "token classifiers", "decoder embedders",
            "decoder classifiers/rerankers", "reward", "sparse", "late interaction",
            "transformers backend", "multimodal")


@dataclass(frozen=True)
class Task:
    """One pooling task checked on a case: ``run`` asks the engine, ``reference``
    computes the same from transformers; both return one array per input."""

    name: str  # embed, classify, score, token_embed, token_classify, embed&token_classify
    run: Callable  # (llm, inputs) -> list[np.ndarray]
    reference: Callable  # (model_dir, inputs) -> list[np.ndarray]
    inputs: str = "texts"  # "texts" (PROMPTS) or "pairs" (PAIRS: one query, four documents)
    tolerance: float = 1e-4

    @property
    def reference_label(self) -> str:
        """``references.<function>(<options>)``, for the reports."""
        f, args = self.reference, ""
        if isinstance(f, partial):
            args = ", ".join(f"{k}={v}" for k, v in f.keywords.items())
            f = f.func
        return f"references.{f.__name__}" + (f"({args})" if args else "")


@dataclass(frozen=True)
class Case:
    """A checkpoint opened with ``engine`` options, checked on ``tasks``."""

    id: str
    family: str
    architecture: str  # the registry name vLLM resolves (config.json or hf_overrides)
    make: Callable  # (dest) -> checkpoint directory
    tasks: tuple[Task, ...]
    prep: str  # how the inputs are prepared (tokenizer, engine options)
    engine: dict = field(default_factory=dict)
    default: str = "MRV2"
    checkpoint: str | None = None  # directory name shared by cases on one checkpoint (default: id)
    smoke: bool = False
    known_fault: str | None = None  # a fault the lead fixes in the series (issue 13, "Found already")

    @property
    def runners(self) -> tuple[str, ...]:
        return ("MRV2", "V1") if self.default == "MRV2" else ("V1",)


def _sentences() -> list[str]:
    s = sts_test()
    # varied lengths, one long multi-sentence prompt (beyond the sliding windows below)
    return s.first[:5] + [" ".join(s.second[10:14])]


PROMPTS = _sentences()
PAIRS = [(sts_test().first[20], d) for d in sts_test().second[20:24]]


def inputs(kind: str) -> list:
    """The inputs of a task kind: ``texts`` (PROMPTS), ``pairs`` (PAIRS),
    ``short texts`` (three, within CLIP's 77 positions) or ``images`` (three
    random 32x32 RGB images)."""
    if kind == "images":
        return ref.images(3)
    if kind == "short texts":
        return [s.lower() for s in PROMPTS[:3]]
    return {"texts": PROMPTS, "pairs": PAIRS}[kind]


def _arrays(xs) -> list[np.ndarray]:
    return [np.atleast_1d(np.asarray(x, dtype=np.float32)) for x in xs]


def run_embed(llm, prompts):
    return _arrays(o.outputs.embedding for o in llm.embed(prompts, use_tqdm=False))


def run_mm_embed(llm, items):
    """``LLM.embed`` of texts and images (an image alone: empty prompt plus ``multi_modal_data``)."""
    prompts = [x if isinstance(x, str) else {"prompt": "", "multi_modal_data": {"image": x}} for x in items]
    return run_embed(llm, prompts)


def run_classify(llm, prompts):
    return _arrays(o.outputs.probs for o in llm.classify(prompts, use_tqdm=False))


def run_encode(task: str, **params):
    """``LLM.encode`` with ``pooling_task=task`` and ``PoolingParams(**params)``."""
    def run(llm, prompts):
        from vllm import PoolingParams

        pp = PoolingParams(**params) if params else None
        return _arrays(o.outputs.data.float().numpy()
                       for o in llm.encode(prompts, pooling_params=pp, pooling_task=task, use_tqdm=False))
    run.__name__ = f"run_encode_{task}"
    return run


def run_score(llm, pairs):
    (query,) = {q for q, _ in pairs}
    return _arrays(o.outputs.score for o in llm.score(query, [d for _, d in pairs], use_tqdm=False))


def T(name, reference, run=None, inputs="texts", **kw) -> Task:
    """A Task with the engine call that ``name`` implies."""
    runs = {"embed": run_embed, "classify": run_classify, "score": run_score}
    return Task(name, run or runs.get(name) or run_encode(name), reference,
                "pairs" if name == "score" else inputs, **kw)


EMBED_CLS = T("embed", partial(ref.embed, pooling="CLS"))
EMBED_MEAN = T("embed", partial(ref.embed, pooling="MEAN"))
EMBED_LAST = T("embed", partial(ref.embed, pooling="LAST"))
TOKEN_EMBED = T("token_embed", ref.token_embed)
CLASSIFY = T("classify", ref.classify)
SCORE = T("score", ref.cross_encoder_score)
TOKEN_CLASSIFY = T("token_classify", ref.token_classify)
MEAN = {"pooler_config": {"seq_pooling_type": "MEAN"}}
MINILM = "text, MiniLM WordPiece tokenizer"
BPE = "text, RoBERTa byte-level BPE tokenizer trained on STS-B (<s> A </s></s> B </s>)"
TOKEN_TYPES = "; pairs carry token type ids (type_vocab_size 2)"

bert = partial(make_hf, config_cls="BertConfig", model_cls="BertModel", max_position_embeddings=512)
roberta = dict(tokenizer="bpe", pad_token_id=1, bos_token_id=0, eos_token_id=2,
               max_position_embeddings=514, type_vocab_size=1)
modernbert = dict(pad_token_id=0, bos_token_id=101, eos_token_id=102, cls_token_id=101, sep_token_id=102,
                  global_attn_every_n_layers=2, local_attention=8, max_position_embeddings=512)


def decoder(config_cls, model_cls, **kw):
    return partial(make_hf, config_cls=config_cls, model_cls=model_cls, decoder=True, **kw)


DECODERS = {  # id: (registry name, maker)
    "qwen2": ("Qwen2ForCausalLM", decoder("Qwen2Config", "Qwen2ForCausalLM")),
    "qwen3": ("Qwen3ForCausalLM", decoder("Qwen3Config", "Qwen3ForCausalLM")),
    "llama": ("LlamaModel", decoder("LlamaConfig", "LlamaModel")),
    "mistral": ("MistralModel", decoder("MistralConfig", "MistralModel", sliding_window=4096)),
    # Gemma ties its embeddings in every published checkpoint (vLLM's Gemma2 asserts it)
    "gemma2": ("Gemma2Model", decoder("Gemma2Config", "Gemma2Model", sliding_window=8,
                                      query_pre_attn_scalar=64, tie_word_embeddings=True)),
    "gemma3": ("Gemma3TextModel", decoder("Gemma3TextConfig", "Gemma3TextModel", sliding_window=8,
                                          query_pre_attn_scalar=64, tie_word_embeddings=True,
                                          layer_types=["sliding_attention", "full_attention"])),
}
MORE_DECODERS = {  # last-token rows only
    "phi3": ("Phi3ForCausalLM", decoder("Phi3Config", "Phi3ForCausalLM", pad_token_id=0)),
    "glm": ("GlmForCausalLM", decoder("GlmConfig", "GlmForCausalLM", pad_token_id=0)),
}

RM_HEAD = {"score.0.weight": (128, 128), "score.0.bias": (128,), "score.2.weight": (1, 128),
           "score.2.bias": (1,)}
PRM_HEAD = {**RM_HEAD, "score.2.weight": (2, 128), "score.2.bias": (2,)}
STEP = {"step_tag_id": 1012, "returned_token_ids": [1, 0]}  # "." in MiniLM's vocabulary
RERANKER = {"architectures": ["Qwen3ForSequenceClassification"], "classifier_from_token": ["no", "yes"],
            "is_original_qwen3_reranker": True}
BGE_M3_FILES = {"sparse_linear.pt": {"weight": (1, 128), "bias": (1,)},
                "colbert_linear.pt": {"weight": (128, 128), "bias": (128,)}}
REWARD_FAULT = "MRV2 serves none of its pooling tasks: the selector must keep it on V1 (fault 2)"

CASES: list[Case] = [
    # --- encoders
    Case("bert-cls", "encoders", "BertModel", bert, (EMBED_CLS, TOKEN_EMBED), MINILM + ", CLS pooling",
         checkpoint="bert", smoke=True),
    Case("bert-mean", "encoders", "BertModel", bert, (EMBED_MEAN,), MINILM + ", pooler MEAN",
         engine=MEAN, checkpoint="bert"),
    Case("roberta", "encoders", "RobertaModel", partial(make_hf, config_cls="RobertaConfig",
         model_cls="RobertaModel", **roberta), (EMBED_CLS, TOKEN_EMBED), BPE + ", positions from padding_idx+1"),
    Case("xlm-roberta", "encoders", "XLMRobertaModel", partial(make_hf, config_cls="XLMRobertaConfig",
         model_cls="XLMRobertaModel", **roberta), (EMBED_CLS, TOKEN_EMBED), BPE + ", positions from padding_idx+1"),
    Case("modernbert", "encoders", "ModernBertModel", partial(make_hf, config_cls="ModernBertConfig",
         model_cls="ModernBertModel", **modernbert), (EMBED_CLS, TOKEN_EMBED),
         MINILM + ", global layer 0, local layer 1 (window 8)"),
    Case("bert-mlm", "encoders", "BertForMaskedLM", partial(make_hf, config_cls="BertConfig",
         model_cls="BertForMaskedLM"),
         (T("token_classify", ref.mlm_logits, run_encode("token_classify", use_activation=False)),),
         MINILM + ", raw logits (use_activation=False: a softmax over 30,522 hides errors)"),
    # --- cross-encoders
    Case("bert-cross", "cross-encoders", "BertForSequenceClassification", partial(
         make_hf, config_cls="BertConfig", model_cls="BertForSequenceClassification", num_labels=1),
         (SCORE, CLASSIFY), MINILM + TOKEN_TYPES, smoke=True,
         known_fault="MRV2 drops the token type ids of PoolingParams.extra_kwargs (fault 1)"),
    Case("xlmr-cross", "cross-encoders", "XLMRobertaForSequenceClassification", partial(
         make_hf, config_cls="XLMRobertaConfig", model_cls="XLMRobertaForSequenceClassification",
         num_labels=1, **roberta), (SCORE, CLASSIFY), BPE + " (bge-reranker style)"),
    Case("modernbert-cross", "cross-encoders", "ModernBertForSequenceClassification", partial(
         make_hf, config_cls="ModernBertConfig", model_cls="ModernBertForSequenceClassification",
         num_labels=1, classifier_pooling="mean", **modernbert), (SCORE, CLASSIFY),
         MINILM + ", mean classifier pooling, local window 8"),
    Case("gpt2-cls", "cross-encoders", "GPT2ForSequenceClassification", partial(
         make_hf, config_cls="GPT2Config", model_cls="GPT2ForSequenceClassification", num_labels=3,
         n_positions=512, pad_token_id=0), (CLASSIFY,), MINILM + ", last token"),
    # --- token classifiers
    Case("bert-token-cls", "token classifiers", "BertForTokenClassification", partial(
         make_hf, config_cls="BertConfig", model_cls="BertForTokenClassification", num_labels=3),
         (TOKEN_CLASSIFY,), MINILM, smoke=True),
    Case("modernbert-token-cls", "token classifiers", "ModernBertForTokenClassification", partial(
         make_hf, config_cls="ModernBertConfig", model_cls="ModernBertForTokenClassification",
         num_labels=3, **modernbert), (TOKEN_CLASSIFY,), MINILM + ", local window 8"),
    Case("xlmr-token-cls", "token classifiers", "XLMRobertaForTokenClassification", partial(
         make_hf, config_cls="XLMRobertaConfig", model_cls="XLMRobertaForTokenClassification",
         num_labels=3, **roberta), (TOKEN_CLASSIFY,), BPE),
    # --- decoder embedders: last token (the default) and mean pooling
    *[Case(f"{k}-last", "decoder embedders", arch, make, (EMBED_LAST,), MINILM + ", last token",
           checkpoint=k, smoke=k == "qwen3") for k, (arch, make) in {**DECODERS, **MORE_DECODERS}.items()],
    *[Case(f"{k}-mean", "decoder embedders", arch, make, (EMBED_MEAN,), MINILM + ", pooler MEAN",
           engine=MEAN, checkpoint=k) for k, (arch, make) in DECODERS.items()],
    Case("llama-bidirectional", "decoder embedders", "LlamaBidirectionalModel", decoder(
         "LlamaConfig", "LlamaModel", architectures=["LlamaBidirectionalModel"], pooling="avg"),
         (T("embed", partial(ref.embed, pooling="MEAN", bidirectional=True)),),
         MINILM + ", bidirectional attention, pooling avg"),
    # --- decoder classifiers and rerankers
    Case("qwen3-seq-cls", "decoder classifiers/rerankers", "Qwen3ForSequenceClassification", decoder(
         "Qwen3Config", "Qwen3ForSequenceClassification", num_labels=3, pad_token_id=0), (CLASSIFY,),
         MINILM + ", last token", smoke=True),
    Case("qwen3-reranker", "decoder classifiers/rerankers", "Qwen3ForSequenceClassification",
         DECODERS["qwen3"][1], (T("classify", ref.qwen3_reranker),),
         MINILM + "; hf_overrides classifier_from_token [no, yes], is_original_qwen3_reranker",
         engine={"hf_overrides": RERANKER}, checkpoint="qwen3"),
    Case("llama-bidirectional-cls", "decoder classifiers/rerankers",
         "LlamaBidirectionalForSequenceClassification", decoder(
             "LlamaConfig", "LlamaForSequenceClassification", num_labels=1, pad_token_id=0, pooling="avg",
             architectures=["LlamaBidirectionalForSequenceClassification"]),
         (T("classify", ref.bidirectional_classify),), MINILM + ", bidirectional, mean pooling"),
    # --- reward
    Case("qwen2-rm", "reward", "Qwen2ForRewardModel", partial(
         make_custom, config_cls="Qwen2Config", backbone_cls="Qwen2Model", decoder=True,
         architectures=["Qwen2ForRewardModel"], prefix="model.", heads=RM_HEAD),
         (T("token_classify", ref.reward),), MINILM + ", reward per token", default="V1",
         smoke=True, known_fault=REWARD_FAULT),
    Case("qwen2-prm", "reward", "Qwen2ForProcessRewardModel", partial(
         make_custom, config_cls="Qwen2Config", backbone_cls="Qwen2Model", decoder=True,
         architectures=["Qwen2ForProcessRewardModel"], prefix="model.", heads=PRM_HEAD),
         (T("token_classify", partial(ref.reward, **STEP)),),
         MINILM + ", STEP pooling: step_tag_id 1012 ('.'), returned_token_ids [1, 0]",
         engine={"pooler_config": dict(STEP)}, default="V1", known_fault=REWARD_FAULT),
    # --- sparse
    Case("splade", "sparse", "BertSpladeSparseEmbeddingModel", partial(
         make_hf, config_cls="BertConfig", model_cls="BertForMaskedLM",
         architectures=["BertSpladeSparseEmbeddingModel"]), (T("embed", ref.splade),),
         MINILM + ", SPLADE max pooling", smoke=True),
    Case("bge-m3", "sparse", "BgeM3EmbeddingModel", partial(
         make_custom, config_cls="XLMRobertaConfig", backbone_cls="XLMRobertaModel",
         architectures=["BgeM3EmbeddingModel"], extra_files=BGE_M3_FILES, **roberta),
         (T("embed", partial(ref.bgem3, part="dense")), T("token_classify", partial(ref.bgem3, part="sparse")),
          T("token_embed", partial(ref.bgem3, part="colbert")),
          T("embed&token_classify", partial(ref.bgem3, part="dense+sparse"))),
         BPE + ", sparse_linear.pt and colbert_linear.pt"),
    # --- late interaction
    Case("colbert-bert", "late interaction", "HF_ColBERT", make_tiny_colbert,
         (T("score", ref.late_interaction_score), T("token_embed", ref.colbert_tokens)),
         MINILM + ", projection to 32", smoke=True),
    Case("colbert-modernbert", "late interaction", "ColBERTModernBertModel",
         partial(make_tiny_colbert, backbone="modernbert"),
         (T("score", ref.late_interaction_score), T("token_embed", ref.colbert_tokens)),
         MINILM + ", projection to 32"),
    # --- multimodal
    Case("clip", "multimodal", "CLIPModel", make_clip,
         (T("embed", ref.clip, inputs="short texts"), T("embed (image)", ref.clip, run_mm_embed, inputs="images")),
         "text (character-level CLIP tokenizer built locally) and 32x32 images (CLIPImageProcessor)",
         engine={"max_model_len": 77}, smoke=True),
    # --- the Transformers modeling backend
    Case("transformers-embed", "transformers backend", "TransformersEmbeddingModel", bert, (EMBED_CLS,),
         MINILM + ", model_impl=transformers", engine={"model_impl": "transformers"}, checkpoint="bert",
         smoke=True),
    Case("transformers-cls", "transformers backend", "TransformersForSequenceClassification",
         decoder("Qwen3Config", "Qwen3ForSequenceClassification", num_labels=3, pad_token_id=0), (CLASSIFY,),
         MINILM + ", model_impl=transformers", engine={"model_impl": "transformers"},
         checkpoint="qwen3-seq-cls",
         known_fault=("base: the Transformers backend cannot serve decoder classifiers (score.* head not "
                      "loaded, CLS pooling, 2-D output; fails on V1 too); MRV2 also fault 3 (model state)")),
]


def case(case_id: str) -> Case:
    """The case named ``case_id``; ``KeyError`` names the known ones."""
    for c in CASES:
        if c.id == case_id:
            return c
    raise KeyError(f"no case {case_id!r}; cases: {', '.join(c.id for c in CASES)}")
