"""Benchmarks (``make bench``): MRV2 and the V1 runner measured side by side in
one run, on the same machine at the same time, so their ratio means something
on a shared, noisy machine.

Both engines are open at once; repetitions are interleaved (V1, MRV2, V1,
MRV2, ...) after one warm-up call each, and the median of each is reported.

- ``embed``: all-MiniLM-L6-v2 over the 2,758 STS-B test sentences; sentences
  per second for each runner and the MRV2/V1 ratio.

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
from scripts.models import minilm_path, sts_test

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


def bench_embed(sentences: list[str], reps: int) -> dict:
    """embed throughput of V1 and MRV2 on MiniLM, interleaved."""
    engines = {}
    try:
        for name, runner in (("V1", "v1"), ("MRV2", "v2")):
            engines[name] = open_llm(minilm_path(), runner=runner)
            assert runner_in_use(engines[name]) == name, f"{name} requested, {runner_in_use(engines[name])} ran"
        times = interleaved({n: (lambda llm=llm: embed(llm, sentences)) for n, llm in engines.items()}, reps)
    finally:
        for llm in engines.values():
            close_llm(llm)
    rows = {n: {"median_s": statistics.median(t), "times_s": t,
                "sentences_per_s": len(sentences) / statistics.median(t)} for n, t in times.items()}
    return {"task": "embed", "model": "all-MiniLM-L6-v2", "sentences": len(sentences), "runners": rows,
            "ratio_mrv2_v1": rows["MRV2"]["sentences_per_s"] / rows["V1"]["sentences_per_s"]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.bench", description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--limit", type=int, default=None, help="first N sentences only")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    use_triton_interpreter_if_needed()
    sentences = sts_test().sentences[: args.limit]
    print(f"== embed: {len(sentences)} STS-B sentences, V1 and MRV2 interleaved, {args.reps} rounds", flush=True)
    results = {"machine": machine(), "embed": bench_embed(sentences, args.reps)}
    REPORTS.mkdir(exist_ok=True)
    (REPORTS / "bench.json").write_text(json.dumps(results, indent=2))
    e = results["embed"]
    print(f"\nmachine: {results['machine']}")
    print("\n| task | model | runner | sentences/s | median s |")
    print("| --- | --- | --- | --- | --- |")
    for name, row in e["runners"].items():
        print(f"| embed | {e['model']} | {name} | {row['sentences_per_s']:.1f} | {row['median_s']:.2f} |")
    print(f"\nMRV2/V1 embed throughput ratio: {e['ratio_mrv2_v1']:.2f}")
    print(f"written {REPORTS / 'bench.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
