"""Benchmarks (``make bench``): MRV2 and the V1 runner measured side by side in
one run, on the same machine at the same time, so their ratio means something
on a shared, noisy machine.

Both engines are open at once; repetitions are interleaved (V1, MRV2, V1,
MRV2, ...) after one warm-up call each, and the median of each is reported.

- ``embed`` and ``token_embed``: all-MiniLM-L6-v2 over the 2,758 STS-B test
  sentences; sentences per second for each runner and the MRV2/V1 ratio;
- late-interaction scoring: ``LLM.score`` with a tiny random ``HF_ColBERT``
  model, 1 query and 1, 8, 64, 256 documents; documents per second.

Figures go to the terminal (a table, last) and to ``reports/bench.json``.

    python -m scripts.bench [--reps 3] [--limit N]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

from scripts.base import REPO
from scripts.engine import close_llm, embed, open_llm, runner_in_use, use_triton_interpreter_if_needed
from scripts.models import make_tiny_colbert, minilm_path, sts_test

REPORTS = REPO / "reports"


def machine() -> dict:
    """What the figures were measured on."""
    import torch

    return {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
            "torch_threads": torch.get_num_threads(), "python": platform.python_version(),
            "triton_interpret": os.environ.get("TRITON_INTERPRET") == "1"}


def interleaved(calls: dict, reps: int) -> dict[str, list[float]]:
    """Run each named call once to warm up, then ``reps`` rounds in turn;
    seconds per call."""
    for fn in calls.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in calls}
    for rep in range(reps):
        for name, fn in calls.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
        print(f"  round {rep + 1}/{reps}: " + ", ".join(
            f"{n} {t[-1]:.2f} s" for n, t in times.items()), flush=True)
    return times


def side_by_side(model, work: dict, reps: int, **engine_kwargs) -> dict[str, dict[str, list[float]]]:
    """Open ``model`` on V1 and on MRV2 at once (asserting which runner ran),
    then time every named workload ``fn(llm)`` of ``work`` on both,
    interleaved. Returns seconds per call: ``{workload: {runner: [s, ...]}}``."""
    engines = {}
    try:
        for name, runner in (("V1", "v1"), ("MRV2", "v2")):
            engines[name] = open_llm(model, runner=runner, **engine_kwargs)
            used = runner_in_use(engines[name])
            assert used == name, f"{name} requested, {used} ran"
        results = {}
        for label, fn in work.items():
            print(f"-- {label}", flush=True)
            results[label] = interleaved({n: (lambda llm=llm: fn(llm)) for n, llm in engines.items()}, reps)
        return results
    finally:
        for llm in engines.values():
            close_llm(llm)


def rates(times: dict[str, list[float]], items: int) -> dict:
    """Median seconds and items per second for each runner, and MRV2/V1."""
    rows = {n: {"median_s": statistics.median(t), "times_s": t,
                "per_s": items / statistics.median(t)} for n, t in times.items()}
    return {"runners": rows, "items": items, "ratio_mrv2_v1": rows["MRV2"]["per_s"] / rows["V1"]["per_s"]}


def bench_embed(sentences: list[str], reps: int) -> dict:
    """embed throughput (sentences/s) of V1 and MRV2 on MiniLM, interleaved."""
    times = side_by_side(minilm_path(), {"embed": lambda llm: embed(llm, sentences)}, reps)
    return {"task": "embed", "model": "all-MiniLM-L6-v2", **rates(times["embed"], len(sentences))}


def bench_token_embed(sentences: list[str], reps: int) -> dict:
    """token_embed throughput (sentences/s) on MiniLM, V1 and MRV2 interleaved."""
    def token_embed(llm):
        llm.encode(sentences, pooling_task="token_embed", use_tqdm=False)

    times = side_by_side(minilm_path(), {"token_embed": token_embed}, reps,
                         pooler_config={"task": "token_embed"})
    return {"task": "token_embed", "model": "all-MiniLM-L6-v2", **rates(times["token_embed"], len(sentences))}


def bench_colbert(sentences: list[str], doc_counts: list[int], reps: int) -> dict:
    """LLM.score with a (random-weight, tiny) HF_ColBERT model: documents per
    second for 1 query and N documents, V1 and MRV2 interleaved."""
    model = make_tiny_colbert(REPO / ".build" / "models" / "tiny-hf-colbert")
    query = sentences[0]
    work = {f"{n} docs": (lambda llm, n=n: llm.score(query, sentences[1:n + 1], use_tqdm=False))
            for n in doc_counts}
    times = side_by_side(model, work, reps)
    return {"task": "late-interaction score", "model": "tiny HF_ColBERT (random)",
            "per_docs": {n: rates(times[f"{n} docs"], n) for n in doc_counts}}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.bench", description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--limit", type=int, default=None, help="first N sentences only")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    use_triton_interpreter_if_needed()
    sentences = sts_test().sentences[: args.limit]
    doc_counts = [n for n in (1, 8, 64, 256) if n < len(sentences)]
    print(f"== {len(sentences)} STS-B sentences; V1 and MRV2 open side by side, "
          f"interleaved, {args.reps} rounds after a warm-up", flush=True)
    results = {"machine": machine(),
               "embed": bench_embed(sentences, args.reps),
               "token_embed": bench_token_embed(sentences, args.reps),
               "colbert": bench_colbert(sentences, doc_counts, args.reps)}
    REPORTS.mkdir(exist_ok=True)
    (REPORTS / "bench.json").write_text(json.dumps(results, indent=2))
    print(f"\nmachine: {results['machine']}")
    print("\n| workload | model | V1 /s | MRV2 /s | MRV2/V1 |")
    print("| --- | --- | --- | --- | --- |")
    rows = [(f"{results[k]['task']} (sentences/s)", results[k]) for k in ("embed", "token_embed")]
    rows += [(f"score, 1 query + {n} docs (docs/s)", r) for n, r in results["colbert"]["per_docs"].items()]
    for label, r in rows:
        model = r.get("model", results["colbert"]["model"])
        print(f"| {label} | {model} | {r['runners']['V1']['per_s']:.1f} | "
              f"{r['runners']['MRV2']['per_s']:.1f} | {r['ratio_mrv2_v1']:.2f} |")
    print(f"written {REPORTS / 'bench.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
