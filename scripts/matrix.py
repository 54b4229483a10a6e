"""The validation matrix (``make matrix``): every pooling task the series
enables, on every model row of DESIGN.md, on MRV2 (chosen by default) and on
the V1 runner (``VLLM_USE_V2_MODEL_RUNNER=0``), each against a reference
computed with transformers / sentence-transformers on the same weights; and
the MTEB STS row: STS-B test evaluated with the ``mteb`` package through a
local task, once with sentence-transformers and once with the patched engine
(mteb's own ``VllmEncoderWrapper``).

One report: a Markdown table printed last and written to
``reports/matrix.md``, the same rows as JSON (``reports/matrix.json``) and as
JUnit XML (``reports/matrix-junit.xml``, one test case per row) for
Buildkite's test view. A row that cannot run fails with its reason; nothing is
skipped. Exit status 1 when any row fails.

    python -m scripts.matrix [--rows ID,ID...]   # row ids: python -m scripts.matrix --list
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
import traceback
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from scripts.base import REPO
from scripts.engine import (assert_runner, close_llm, embed, engine_env, expected_input_preparation,
                            hf_forward, hf_last_token_embed, l2_normalize, open_llm, rowwise_cosine,
                            select_runner, st_embed)
from scripts.engine import quiet_vllm
from scripts.models import (colbert_reference, make_tiny_bert, make_tiny_colbert, make_tiny_qwen3,
                            minilm_path, sts_test)

REPORTS = REPO / "reports"
MODELS = REPO / ".build" / "models"
RUNNERS = {"MRV2": "default", "V1": "v1"}  # MRV2 must be what vLLM picks by default


@dataclass(frozen=True)
class Check:
    """A matrix row without its runner: what is compared with what."""

    id: str
    task: str
    model: str
    reference: str
    metric: str  # "max abs error", "min cosine" or "abs delta"
    tolerance: float
    measure: Callable[[str], float]  # runner ("default" or "v1") -> metric value

    def passes(self, value: float) -> bool:
        return value >= self.tolerance if self.metric == "min cosine" else value <= self.tolerance


@dataclass
class Row:
    """One result of the matrix."""

    id: str
    task: str
    model: str
    runner: str
    reference: str
    metric: str
    value: float | None
    tolerance: float
    passed: bool
    seconds: float
    reason: str | None = None


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def maxsim(q: np.ndarray, d: np.ndarray) -> float:
    """ColBERT's MaxSim: each query token's best dot product over the document's tokens, summed."""
    return float((q @ d.T).max(axis=1).sum())


def on_engine(model, runner: str, fn, **kwargs):
    """Open an engine on ``runner``; fail unless the expected runner ran; apply fn."""
    want = {"default": "MRV2", "v1": "V1"}[runner]
    llm = open_llm(model, runner=runner, **kwargs)
    try:
        assert_runner(llm, want)
        return fn(llm)
    finally:
        close_llm(llm)


def _sentences(n: int | None = None) -> list[str]:
    return sts_test().sentences[:n]


def embed_minilm(runner: str) -> float:
    sentences = _sentences()
    got = on_engine(minilm_path(), runner, lambda llm: embed(llm, sentences)[0])
    return float(rowwise_cosine(got, st_embed(minilm_path(), sentences)).min())


def embed_last_token(runner: str) -> float:
    model, sentences = make_tiny_qwen3(MODELS / "tiny-qwen3"), _sentences(256)
    got = on_engine(model, runner, lambda llm: embed(llm, sentences)[0])
    return float(abs(got - hf_last_token_embed(model, sentences)).max())


def classify(runner: str) -> float:
    model, sentences = make_tiny_bert(MODELS / "bert-seq-cls", "seq_cls"), _sentences(256)
    got = on_engine(model, runner, lambda llm: np.stack(
        [np.asarray(o.outputs.probs, dtype=np.float32) for o in llm.classify(sentences, use_tqdm=False)]))
    ref = softmax(np.stack(hf_forward(model, sentences, "AutoModelForSequenceClassification", "logits")))
    return float(abs(got - ref).max())


def _per_token(llm, prompts, task):
    return [o.outputs.data.float().numpy() for o in llm.encode(prompts, pooling_task=task, use_tqdm=False)]


def _max_abs(got: list, ref: list) -> float:
    if len(got) != len(ref) or any(g.shape != r.shape for g, r in zip(got, ref)):
        raise AssertionError("output shapes differ from the reference")
    return float(max(abs(g - r).max() for g, r in zip(got, ref)))


def token_classify(runner: str) -> float:
    model, sentences = make_tiny_bert(MODELS / "bert-token-cls", "token_cls"), _sentences(128)
    got = on_engine(model, runner, lambda llm: _per_token(llm, sentences, "token_classify"))
    ref = [softmax(x) for x in hf_forward(model, sentences, "AutoModelForTokenClassification", "logits")]
    return _max_abs(got, ref)


def token_embed(runner: str) -> float:
    sentences = _sentences(128)
    got = on_engine(minilm_path(), runner, lambda llm: _per_token(llm, sentences, "token_embed"),
                    pooler_config={"task": "token_embed"})
    return _max_abs(got, [l2_normalize(h) for h in hf_forward(minilm_path(), sentences)])


def late_interaction(runner: str) -> float:
    model = make_tiny_colbert(MODELS / "tiny-hf-colbert")
    pairs = sts_test()
    query, docs = pairs.first[0], pairs.second[:32]
    got = on_engine(model, runner, lambda llm: [o.outputs.score for o in llm.score(query, docs, use_tqdm=False)])
    ref = colbert_reference(model, [query] + docs)
    return float(np.abs(np.asarray(got) - [maxsim(ref[0], d) for d in ref[1:]]).max())


def mteb_sts(runner: str) -> float:
    """|main score (cosine Spearman) of the engine - that of sentence-transformers|."""
    import mteb
    from mteb.models.vllm_wrapper import VllmEncoderWrapper

    reference = mteb_sts_reference()
    engine_env()
    select_runner(runner)
    spawn = os.environ.get("VLLM_WORKER_MULTIPROC_METHOD")
    wrapper = VllmEncoderWrapper(str(minilm_path()), dtype="float32", gpu_memory_utilization=0.3,
                                 enforce_eager=True, trust_remote_code=False)
    # the wrapper switches vLLM's workers to spawn for the whole process: only for itself
    if spawn is None:
        os.environ.pop("VLLM_WORKER_MULTIPROC_METHOD", None)
    else:
        os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = spawn
    try:
        want = {"default": "MRV2", "v1": "V1"}[runner]
        assert_runner(wrapper.llm, want)
        score = mteb.evaluate(wrapper, local_sts_task(), cache=None,
                              show_progress_bar=False).task_results[0].get_score()
    finally:
        close_llm(wrapper.llm)
    return abs(score - reference)


@functools.cache
def mteb_sts_reference() -> float:
    """sentence-transformers' main score on the local STSBenchmark task (once a process)."""
    import mteb
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(minilm_path()), device="cpu")
    return mteb.evaluate(model, local_sts_task(), cache=None,
                         show_progress_bar=False).task_results[0].get_score()


def local_sts_task():
    """mteb's STSBenchmark task, its test split read from ``../shared/data``
    instead of the hub."""
    from datasets import Dataset
    from mteb.tasks.sts.eng.sts_benchmark_sts import STSBenchmarkSTS

    class LocalSTSBenchmark(STSBenchmarkSTS):
        def load_data(self, num_proc=None, *, timer=None, **kwargs):
            if self.data_loaded:
                return
            pairs = sts_test()
            self.dataset = {"default": {"test": Dataset.from_dict(
                {"sentence1": pairs.first, "sentence2": pairs.second, "score": pairs.gold})}}
            self.data_loaded = True

    return LocalSTSBenchmark()


CHECKS = [
    Check("embed", "embed", "all-MiniLM-L6-v2", "sentence-transformers", "min cosine", 0.99999, embed_minilm),
    Check("embed-last-token", "embed (last token)", "tiny Qwen3 (random)",
          "transformers last hidden state, normalised", "max abs error", 1e-4, embed_last_token),
    Check("classify", "classify", "tiny BertForSequenceClassification (random)", "transformers softmax",
          "max abs error", 1e-4, classify),
    Check("token-classify", "token_classify", "tiny BertForTokenClassification (random)",
          "transformers per-token softmax", "max abs error", 1e-4, token_classify),
    Check("token-embed", "token_embed", "all-MiniLM-L6-v2 (BERT encoder)",
          "transformers last_hidden_state per token, normalised", "max abs error", 1e-4, token_embed),
    Check("late-interaction", "late-interaction score", "tiny HF_ColBERT (random)",
          "MaxSim over transformers token embeddings", "max abs error", 1e-4, late_interaction),
    Check("mteb-sts", "MTEB STS (STSBenchmark test)", "all-MiniLM-L6-v2", "sentence-transformers under mteb",
          "abs delta", 1e-4, mteb_sts),
]
ROW_IDS = [f"{c.id}/{runner}" for c in CHECKS for runner in RUNNERS]


def run_row(row_id: str) -> Row:
    """Run one row (``check-id/MRV2`` or ``check-id/V1``); never raises: a row
    that cannot run is a failed row with its reason."""
    check_id, runner = row_id.split("/")
    check = next(c for c in CHECKS if c.id == check_id)
    start = time.perf_counter()
    value, reason = None, None
    try:
        value = float(check.measure(RUNNERS[runner]))
        passed = bool(check.passes(value))
        if not passed:
            reason = f"{check.metric} {value:.3g} outside tolerance {check.tolerance:g}"
    except Exception as e:  # the row fails with its reason; the matrix goes on
        passed, reason = False, f"{type(e).__name__}: {e}"
        traceback.print_exc()
    return Row(row_id, check.task, check.model, runner, check.reference, check.metric, value,
               check.tolerance, passed, time.perf_counter() - start, reason)


def markdown(rows: list[Row]) -> str:
    lines = ["| task | model | runner | reference | metric | value | tolerance | pass |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        value = "-" if r.value is None else (f"{r.value:.7f}" if r.metric == "min cosine" else f"{r.value:.3g}")
        verdict = "pass" if r.passed else f"FAIL: {r.reason}"
        bound = f"≥ {r.tolerance:g}" if r.metric == "min cosine" else f"≤ {r.tolerance:g}"
        lines.append(f"| {r.task} | {r.model} | {r.runner} | {r.reference} | {r.metric} | {value} | "
                     f"{bound} | {verdict} |")
    return "\n".join(lines) + "\n"


def junit(rows: list[Row]) -> ET.ElementTree:
    suite = ET.Element("testsuite", name="validation-matrix", tests=str(len(rows)),
                       failures=str(sum(not r.passed for r in rows)),
                       time=f"{sum(r.seconds for r in rows):.1f}")
    for r in rows:
        case = ET.SubElement(suite, "testcase", classname=f"matrix.{r.runner}", name=r.id,
                             time=f"{r.seconds:.1f}")
        if not r.passed:
            ET.SubElement(case, "failure", message=r.reason or "failed").text = json.dumps(asdict(r))
    return ET.ElementTree(suite)


def write_reports(rows: list[Row], directory: Path = REPORTS) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "matrix.md").write_text(markdown(rows))
    (directory / "matrix.json").write_text(json.dumps([asdict(r) for r in rows], indent=2))
    junit(rows).write(directory / "matrix-junit.xml", encoding="utf-8", xml_declaration=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.matrix", description=__doc__.split("\n")[0])
    parser.add_argument("--rows", default=",".join(ROW_IDS), help="comma-separated row ids")
    parser.add_argument("--list", action="store_true", help="print the row ids and exit")
    args = parser.parse_args(argv)
    if args.list:
        print("\n".join(ROW_IDS))
        return 0
    wanted = [r for r in args.rows.split(",") if r]
    unknown = [r for r in wanted if r not in ROW_IDS]
    if unknown:
        print(f"error: unknown rows {unknown}; see --list", file=sys.stderr)
        return 2
    quiet_vllm("matrix")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    print(f"MRV2 input preparation on this machine: {expected_input_preparation()}", flush=True)
    rows = []
    for i, row_id in enumerate(wanted, 1):
        print(f"[{i}/{len(wanted)}] {row_id}", flush=True)
        rows.append(run_row(row_id))
        print(f"  -> {'pass' if rows[-1].passed else 'FAIL'} ({rows[-1].seconds:.0f} s)", flush=True)
    write_reports(rows)
    print("\n" + markdown(rows))
    print(f"{sum(r.passed for r in rows)} passed, {sum(not r.passed for r in rows)} failed")
    print(f"written {REPORTS / 'matrix.md'}, matrix.json, matrix-junit.xml")
    return 0 if all(r.passed for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
