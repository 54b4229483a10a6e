"""The GPU smoke job (``make gpu-smoke``), for a maintainer with an NVIDIA GPU:
the series' pooling paths on the installed CUDA wheel, MRV2 with CUDA graphs
and the V1 runner side by side, against transformers / sentence-transformers
on the same weights (references on the CPU, fp32).

| case | model | call | reference |
| --- | --- | --- | --- |
| embed | all-MiniLM-L6-v2 (real) | ``LLM.embed``, STS-B test sentences | sentence-transformers; STS-B Spearman |
| cross-encoder | tiny BertForSequenceClassification, 1 label | ``LLM.score`` of the STS-B pairs | transformers, sigmoid of the logit |
| colbert | tiny HF_ColBERT | ``LLM.score``, one query against documents | MaxSim over transformers token embeddings |
| qwen3-embed | tiny Qwen3 | ``LLM.embed`` (last token) | transformers last hidden state, normalised |

Each case runs on MRV2 (vLLM's default: the worker must report MRV2, Triton
input preparation and a CUDA-graph mode other than NONE) and on V1
(``VLLM_USE_V2_MODEL_RUNNER=0``, CUDA graphs as vLLM sets them up), in
float32 and in bfloat16:

- float32: max abs error <= 1e-4 (MiniLM also: |Spearman - reference's| <= 1e-4);
- bfloat16: cosine >= 0.999, the minimum over the embeddings; for scores, the
  cosine of the call's scores and the reference's, both centred on the
  reference's mean (their ranking signal; the common offset would make any
  two score vectors agree). The Spearman of bfloat16 rows is reported only.

Throughput (items/s of the timed call, after a warm-up call) stands beside
each row. The table is printed last; ``reports/gpu-smoke.json``, ``.md`` and
``gpu-smoke-junit.xml`` (one test case a row) are written.

Exit status: 0 every row passed; 1 a row failed; 2 not set up (the vllm
imported is not this series' installed CUDA wheel); 77 no GPU here: it says
so, writes reports whose one test case is *skipped*, and runs nothing (77 is
"skipped" for automake-style harnesses; ci/steps/gpu-smoke.sh reports it so).

    python -m scripts.validation.gpu_smoke [--check-gpu] [--cases a,b] [--dtypes float32,bfloat16]
                                [--limit N] [--out DIR]

``--check-gpu`` only checks for a GPU (exit 0, or the 77 above).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from scripts.common import reports
from scripts.common.paths import REPO, REPORTS
from scripts.series.base import load_base
from scripts.validation.checkpoints.models import MODELS

SKIPPED = 77
NOT_SET_UP = 2
DTYPES = ("float32", "bfloat16")
MAX_ABS_FP32, MIN_COSINE_BF16, MAX_SPEARMAN_DELTA = 1e-4, 0.999, 1e-4


def find_gpu() -> tuple[bool, str]:
    """Whether there is a CUDA GPU, and how that was found out. Asks torch
    when it imports (no CUDA context is created), else the NVIDIA driver."""
    try:
        import torch
    except ImportError:
        gpus = sorted(Path("/proc/driver/nvidia/gpus").glob("*"))
        if gpus:
            return True, f"{len(gpus)} GPU(s) under /proc/driver/nvidia/gpus"
        return False, "no NVIDIA driver (/proc/driver/nvidia/gpus) and no torch to ask"
    if torch.cuda.is_available():
        return True, f"torch {torch.__version__} sees {torch.cuda.device_count()} CUDA device(s)"
    return False, f"torch {torch.__version__} sees no CUDA device (torch.cuda.is_available() is False)"


@dataclass
class GpuSmokeRow:
    """One case on one runner and dtype: the metric against the reference,
    throughput (``unit``), the CUDA-graph mode the runner resolved."""

    case: str
    model: str
    runner: str
    dtype: str
    metric: str
    tolerance: float
    value: float | None = None
    passed: bool = False
    throughput: float | None = None
    unit: str = ""
    cudagraph_mode: str | None = None
    extra: dict = field(default_factory=dict)
    reason: str | None = None
    seconds: float = 0.0


@dataclass(frozen=True)
class GpuSmokeCase:
    """``inputs(limit)`` -> the call's inputs; ``call(llm, inputs)`` -> outputs
    (float32 array: [N, d] vectors or [N] scores); ``reference(model, inputs)``
    -> the same from transformers; ``count(inputs)`` -> items for throughput."""

    name: str
    model: str
    unit: str
    kind: str  # "vectors" or "scores"
    make: Callable[[], Path]
    inputs: Callable[[int | None], Any]
    call: Callable[[Any, Any], Any]
    reference: Callable[[Path, Any], Any]
    count: Callable[[Any], int]


def _pairs(limit):
    from scripts.validation.checkpoints.models import sts_test

    pairs = sts_test()
    n = limit or len(pairs.first)
    return type(pairs)(pairs.first[:n], pairs.second[:n], pairs.gold[:n])


def _embed_call(llm, pairs):
    import numpy as np

    return np.asarray([o.outputs.embedding for o in llm.embed(pairs.sentences, use_tqdm=False)], dtype=np.float32)


def _pair_scores(llm, pairs):
    import numpy as np

    return np.asarray([o.outputs.score for o in llm.score(pairs.first, pairs.second, use_tqdm=False)],
                      dtype=np.float32)


def _colbert_scores(llm, pairs):
    import numpy as np

    return np.asarray([o.outputs.score for o in llm.score(pairs.first[0], pairs.second, use_tqdm=False)],
                      dtype=np.float32)


def _colbert_reference(model, pairs):
    import numpy as np

    from scripts.validation.references import colbert_tokens, maxsim

    query, *docs = colbert_tokens(model, [pairs.first[0]] + pairs.second)
    return np.asarray([maxsim(query, d) for d in docs], dtype=np.float32)


def _cases() -> dict[str, GpuSmokeCase]:
    from scripts.validation import engine
    from scripts.validation.checkpoints import models, zoo

    return {c.name: c for c in [
        GpuSmokeCase("embed", "all-MiniLM-L6-v2", "sentences/s", "vectors", models.minilm_path, _pairs,
                     _embed_call, lambda m, p: engine.st_embed(m, p.sentences), lambda p: len(p.sentences)),
        GpuSmokeCase("cross-encoder", "tiny BertForSequenceClassification (random, 1 label)", "pairs/s",
                     "scores",
                     lambda: zoo.make_tiny_bert(MODELS / "tiny-cross-encoder", "seq_cls", num_labels=1,
                                                classifier_scale=50.0),
                     _pairs, _pair_scores, lambda m, p: engine.hf_pair_scores(m, p.first, p.second),
                     lambda p: len(p.first)),
        GpuSmokeCase("colbert", "tiny HF_ColBERT (random)", "docs/s", "scores",
                     lambda: zoo.make_tiny_colbert(MODELS / "tiny-hf-colbert"), _pairs, _colbert_scores,
                     _colbert_reference, lambda p: len(p.second)),
        GpuSmokeCase("qwen3-embed", "tiny Qwen3 (random)", "sentences/s", "vectors",
                     lambda: zoo.make_tiny_qwen3(MODELS / "tiny-qwen3"), _pairs, _embed_call,
                     lambda m, p: engine.hf_last_token_embed(m, p.sentences), lambda p: len(p.sentences)),
    ]}


def compare(kind: str, dtype: str, got, ref) -> tuple[str, float, float, bool]:
    """(metric, value, tolerance, passed) of outputs against the reference."""
    import numpy as np

    from scripts.validation.engine import rowwise_cosine

    if got.shape != ref.shape:
        raise AssertionError(f"output shape {got.shape} differs from the reference's {ref.shape}")
    if dtype == "float32":
        value = float(np.abs(got - ref).max())
        return "max abs error", value, MAX_ABS_FP32, value <= MAX_ABS_FP32
    if kind == "vectors":
        value = float(rowwise_cosine(got, ref).min())
        return "min cosine", value, MIN_COSINE_BF16, value >= MIN_COSINE_BF16
    centre = ref.mean()
    value = float(rowwise_cosine((got - centre)[None], (ref - centre)[None])[0])
    return "cosine (centred scores)", value, MIN_COSINE_BF16, value >= MIN_COSINE_BF16


def run_row(case: GpuSmokeCase, model: Path, inputs, ref, runner: str, dtype: str) -> GpuSmokeRow:
    """One case on one runner (``"MRV2"``, vLLM's default, or ``"V1"``) and
    dtype, on an engine opened by ``vllm_runner`` (the runner asserted; MRV2
    must also have captured CUDA graphs); never raises (a row that cannot run
    fails with its reason)."""
    from scripts.validation.engine import GPU_MEMORY_UTILIZATION, RUNNER_CHOICE, cudagraph_mode, vllm_runner

    row = GpuSmokeRow(case.name, case.model, runner, dtype, "", 0.0, unit=case.unit)
    start = time.perf_counter()
    try:
        with vllm_runner(model, RUNNER_CHOICE[runner], want=runner, dtype=dtype, enforce_eager=False,
                         gpu_memory_utilization=GPU_MEMORY_UTILIZATION) as llm:
            row.cudagraph_mode = cudagraph_mode(llm)
            if runner == "MRV2" and row.cudagraph_mode == "NONE":
                raise AssertionError("MRV2 ran without CUDA graphs (cudagraph_mode NONE)")
            case.call(llm, case.inputs(8))  # warm-up
            t0 = time.perf_counter()
            got = case.call(llm, inputs)
            row.throughput = case.count(inputs) / (time.perf_counter() - t0)
        row.metric, row.value, row.tolerance, row.passed = compare(case.kind, dtype, got, ref)
        if not row.passed:
            row.reason = f"{row.metric} {row.value:.6g} beyond {row.tolerance:g}"
        if case.name == "embed":
            _spearman(row, got, ref, inputs, gate=dtype == "float32")
    except Exception as e:  # the row fails with its reason; the job goes on
        traceback.print_exc()
        row.passed, row.reason = False, f"{type(e).__name__}: {e}"
    row.seconds = time.perf_counter() - start
    return row


def _spearman(row: GpuSmokeRow, got, ref, pairs, gate: bool) -> None:
    from scripts.validation.engine import sts_spearman

    n = len(pairs.first)
    ours, theirs = sts_spearman(got[:n], got[n:], pairs.gold), sts_spearman(ref[:n], ref[n:], pairs.gold)
    row.extra.update(spearman=ours, spearman_reference=theirs)
    if gate and abs(ours - theirs) > MAX_SPEARMAN_DELTA and row.passed:
        row.passed, row.reason = False, f"STS-B Spearman {ours:.5f} vs {theirs:.5f} (reference)"


def check_installation() -> str | None:
    """Why the vllm this process imports is not this series' installed CUDA
    wheel, or None when it is."""
    import importlib.metadata as md

    try:
        version = md.version("vllm")
    except md.PackageNotFoundError:
        return "the CUDA wheel (distribution 'vllm') is not installed: make install VENV=... FLAVOR=cuda"
    expected = load_base().dist_version
    if version != expected:
        return f"installed vllm is {version}, this series builds {expected}: make install VENV=... FLAVOR=cuda"
    import vllm
    from vllm.platforms import current_platform

    if Path(vllm.__file__).resolve().is_relative_to(REPO):
        return (f"imported a tree of this repository ({Path(vllm.__file__).parent}), not the installed wheel: "
                "run it with make gpu-smoke")
    if not current_platform.is_cuda():
        return f"vLLM's platform is {type(current_platform).__name__}, not CUDA"
    return None


def write_reports(out: Path, rows: list[GpuSmokeRow], status: str, note: str) -> None:
    """``gpu-smoke.json``, ``gpu-smoke.md`` and ``gpu-smoke-junit.xml`` in
    ``out``: JUnit has one test case a row (class ``gpu-smoke.<case>``, named
    ``<runner>-<dtype>``); a skipped job is one skipped test case."""
    cases = [reports.JUnitCase(f"gpu-smoke.{r.case}", f"{r.runner}-{r.dtype}", "passed" if r.passed else "failure",
                               message=r.reason or "failed", seconds=r.seconds) for r in rows]
    if status == "skipped":
        cases.insert(0, reports.JUnitCase("gpu-smoke", "gpu-smoke", "skipped", message=note))
    reports.write_reports({
        "gpu-smoke.json": {"status": status, "note": note, "series": load_base().dist_version,
                           "rows": [asdict(r) for r in rows]},
        "gpu-smoke.md": markdown(rows) if rows else f"GPU smoke job {status}: {note}\n",
        "gpu-smoke-junit.xml": reports.junit([reports.Suite("gpu-smoke", cases)])}, out)


def markdown(rows: list[GpuSmokeRow]) -> str:
    """The Markdown table of the rows (also printed)."""
    lines = ["| case | runner | dtype | CUDA graphs | metric | value | bound | throughput | STS-B Spearman | result |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        value = "-" if r.value is None else f"{r.value:.6g}"
        bound = f"{'<=' if r.metric == 'max abs error' else '>='} {r.tolerance:g}" if r.metric else "-"
        speed = "-" if r.throughput is None else f"{r.throughput:,.0f} {r.unit}"
        sp = (f"{r.extra['spearman']:.4f} / {r.extra['spearman_reference']:.4f}"
              if "spearman" in r.extra else "-")
        lines.append(f"| {r.case} | {r.runner} | {r.dtype} | {r.cudagraph_mode or '-'} | {r.metric or '-'} | "
                     f"{value} | {bound} | {speed} | {sp} | {'pass' if r.passed else 'FAIL: ' + str(r.reason)} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    """The ``make gpu-smoke`` command line (see the module's docstring); the exit status."""
    parser = argparse.ArgumentParser(prog="python -m scripts.validation.gpu_smoke", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check-gpu", action="store_true", help="only check for a GPU (0; 77 without)")
    parser.add_argument("--cases", default=None, help="comma-separated: embed,cross-encoder,colbert,qwen3-embed")
    parser.add_argument("--dtypes", default=",".join(DTYPES))
    parser.add_argument("--limit", type=int, default=None, help="the first N STS-B pairs only")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("GPU_SMOKE_OUT", REPORTS)),
                        help="reports directory (default: $GPU_SMOKE_OUT, else reports/)")
    args = parser.parse_args(argv)

    present, how = find_gpu()
    if not present:
        note = f"no GPU on this machine ({how})"
        print(f"gpu-smoke: SKIPPED: {note}. The GPU smoke job needs an NVIDIA GPU: run `make gpu-smoke` "
              "on a machine with one (docs/gpu-only.md). Exit status 77: skipped, not passed.", file=sys.stderr)
        write_reports(args.out, [], "skipped", note)
        return SKIPPED
    print(f"gpu-smoke: {how}", flush=True)
    if args.check_gpu:
        return 0
    if problem := check_installation():
        print(f"gpu-smoke: not set up: {problem}", file=sys.stderr)
        return NOT_SET_UP

    from scripts.validation.engine import engine_env

    engine_env()
    cases = _cases()
    names = args.cases.split(",") if args.cases else list(cases)
    rows = []
    for name in names:
        case = cases[name]
        model, inputs = case.make(), case.inputs(args.limit)
        print(f"\n== {name}: {case.model}, {case.count(inputs)} items; reference on the CPU", flush=True)
        ref = case.reference(model, inputs)
        for dtype in args.dtypes.split(","):
            for runner in ("MRV2", "V1"):
                rows.append(run_row(case, model, inputs, ref, runner, dtype))
                print(markdown(rows[-1:]).splitlines()[-1], flush=True)
    write_reports(args.out, rows, "passed" if all(r.passed for r in rows) else "failed", how)
    print(f"\nwritten {args.out}/gpu-smoke.json, gpu-smoke.md, gpu-smoke-junit.xml\n")
    print(markdown(rows))
    return 0 if all(r.passed for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
