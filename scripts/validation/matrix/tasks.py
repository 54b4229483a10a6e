"""The validation matrix's building blocks: ``Task`` (a pooling task
checked on a case: the engine call and the transformers reference) and
``MatrixCase`` (a checkpoint, its engine options and tasks), the inputs, and the
engine calls per task. The cases themselves are data in
``scripts/validation/matrix/rows.py``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Callable

import numpy as np

from scripts.validation import references as ref
from scripts.validation.checkpoints.models import sts_test
from scripts.validation.engine import base_runners

FAMILIES = ("encoders", "cross-encoders", "token classifiers", "decoder embedders",
            "decoder classifiers/rerankers", "reward", "sparse", "late interaction",
            "transformers backend", "multimodal", "mixture of experts")


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
class MatrixCase:
    """A checkpoint opened with ``engine`` options, checked on ``tasks``."""

    id: str
    family: str
    architecture: str  # the registry name vLLM resolves (config.json or hf_overrides)
    make: Callable  # (dest) -> checkpoint directory
    tasks: tuple[Task, ...]
    prep: str  # how the inputs are prepared (tokenizer, engine options)
    engine: dict = field(default_factory=dict)
    # The runner vLLM picks for it by default: one for every line, or {line: runner} where
    # the lines' bases differ (a line missing from the mapping is a KeyError, not a guess).
    default: str | Mapping[str, str] = "MRV2"
    checkpoint: str | None = None  # directory name shared by cases on one checkpoint (default: id)
    smoke: bool = False
    known_fault: str | None = None  # a fault the lead fixes in the series (issue 13, "Found already")
    lines: tuple[str, ...] | None = None  # the lines whose base has the architecture (None: every line)
    # What the CPU build cannot serve: the start of the error vLLM raises while it builds the
    # engine (a refusal of the series, naming why and what to do). The case's rows check that
    # refusal on each runner instead of its tasks.
    refused: str | None = None

    @property
    def default_runner(self) -> str:
        """``"MRV2"`` or ``"V1"``: the runner vLLM picks for the case by default on the
        line under test (``scripts.series.lines.get_line``); ``"MRV2"`` wherever the
        base has no V1 (from 0.34.0: ``engine.base_runners``)."""
        if "V1" not in base_runners():
            return "MRV2"
        if isinstance(self.default, str):
            return self.default
        from scripts.series.lines import get_line

        return self.default[get_line().name]

    @property
    def runners(self) -> tuple[str, ...]:
        """The runners the case is checked on: its default (asserted) and V1 where the
        base has V1, or V1 alone."""
        if self.default_runner == "V1":
            return ("V1",)
        return base_runners()


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


def max_abs_error(got: list, want: list) -> float:
    """Largest |got - want| over matching arrays; ``AssertionError`` when the
    counts or shapes differ."""
    if len(got) != len(want):
        raise AssertionError(f"{len(got)} outputs, {len(want)} expected")
    for i, (g, w) in enumerate(zip(got, want)):
        if g.shape != w.shape:
            raise AssertionError(f"output {i}: shape {g.shape}, reference {w.shape}")
    return float(max(np.abs(g - w).max() for g, w in zip(got, want)))


def _arrays(xs) -> list[np.ndarray]:
    return [np.atleast_1d(np.asarray(x, dtype=np.float32)) for x in xs]


def run_embed(llm, prompts):
    """``LLM.embed``: one float32 vector [d] per prompt."""
    return _arrays(o.outputs.embedding for o in llm.embed(prompts, use_tqdm=False))


def run_mm_embed(llm, items):
    """``LLM.embed`` of texts and images (an image alone: empty prompt plus ``multi_modal_data``)."""
    prompts = [x if isinstance(x, str) else {"prompt": "", "multi_modal_data": {"image": x}} for x in items]
    return run_embed(llm, prompts)


def run_siglip_text(llm, prompts):
    """``LLM.embed`` of texts padded to SigLIP's 64 positions (``references.SIGLIP_TEXT``)."""
    return _arrays(o.outputs.embedding for o in llm.embed(prompts, use_tqdm=False,
                                                          tokenization_kwargs=ref.SIGLIP_TEXT))


def run_classify(llm, prompts):
    """``LLM.classify``: the probabilities [labels] of each prompt, float32."""
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
    """``LLM.score`` of the pairs' one query against their documents: a [1] score per pair."""
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
