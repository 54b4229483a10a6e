"""Benchmarks (``make bench``): the engine configurations measured side by side
in one run, on the same machine at the same time, so that their ratios mean
something on a shared, noisy machine.

Engine configurations (``ENGINES``), each a separate engine process opened
with its own environment (engines inherit ``os.environ`` at spawn):

- ``v1``: the V1 model runner (``VLLM_USE_V2_MODEL_RUNNER=0``);
- ``mrv2-interpreter``: MRV2 (``VLLM_USE_V2_MODEL_RUNNER=1``) with its Triton
  kernels under Triton's interpreter (``TRITON_INTERPRET=1``);
- ``mrv2``: MRV2-native, the runner vLLM picks by default with
  ``TRITON_INTERPRET`` unset: on a CPU without a Triton backend, MRV2 with
  native input preparation where the series has it (patch 0008), else vLLM's
  fallback to V1.

Every engine's worker is asked which runner it built and how (runner class,
``TRITON_INTERPRET``, ``HAS_TRITON``, native input preparation, torch
threads); a column whose runner is not the one asked for is marked in the
table (``*``) and in the JSON (``runner_as_requested``).

Sections (all repetitions interleaved across the configurations, the order
rotating each round, one warm-up call each first; medians reported):

1. ``embed`` (every configuration) and ``token_embed`` (``v1`` and one MRV2:
   ``mrv2`` where it runs MRV2, else ``mrv2-interpreter``; ``--all-engines``
   for all): all-MiniLM-L6-v2 over the STS-B test sentences (2,758: both
   sentences of the 1,379 pairs), sentences and tokens per second for each
   engine and for sentence-transformers on the same weights
   (same torch thread count as the engines' workers); ratios to V1 and to
   sentence-transformers. For embed also the model's FLOPs over the
   sentences' real token counts (``minilm_flops``), the machine's fp32
   matmul rate measured in an engine's worker, achieved TFLOP/s and the
   fraction of the matmul rate for each engine. Both: peak resident memory
   (``VmHWM``) of each engine's worker and engine core (``peak_memory``;
   the front end is the bench process, shared, left out) and of
   sentence-transformers encoding the same sentences once in a process of
   its own (``st_peak_memory``).
2. ``colbert`` (the configurations of ``token_embed``): ``LLM.score`` with a
   tiny random ``HF_ColBERT`` model, one query and 1, 8, 64, 256, 1024
   documents: documents per second, the query
   encodings per call (counted in the worker), and how the time grows with
   N (log-log slope, linear fit).
3. ``overhead``: ``scripts.bench.pool_overhead`` in a process of its own: host time
   of one pooling step without the model forward, MRV2 against V1, 1 to 256
   requests per step.
4. ``serve``: ``vllm serve`` under load, MRV2 and V1 servers side by side
   through upstream's ``vllm bench serve``, and a server's resident memory
   over 5,000 late-interaction requests with clients hanging up
   (``scripts.bench.server``).

Outputs: ``reports/bench.json`` (with the machine's description),
``reports/bench-throughput.png``, ``reports/bench-colbert.png``,
``reports/bench-overhead.png``, ``reports/bench.md``; a short table printed
last (``scripts.bench.report``).

Modules: ``cli`` (this: options, the order of the sections), ``sections``
(embed / token_embed, colbert, overhead), ``engines`` (``ENGINES``, opening
and probing them, sentence-transformers), ``timing`` (interleaved rounds,
rates, ratios), ``machine`` (description, matmul rate, FLOPs), ``memory``
(peak resident memory), ``server`` (serve), ``report``; ``pool_overhead`` with
``pool_steps``, and ``profile_embed`` with ``profiling``, run alone too.

    python -m scripts.bench [--reps 3] [--colbert-reps 5] [--limit N] [--quick] [--sections embed,token_embed,colbert,overhead,serve]
                            [--all-engines] [--engines v1,mrv2-interpreter,mrv2] [--out reports]
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from pathlib import Path

from scripts.bench.engines import ENGINES, GPU_MEMORY_UTILIZATION, bench_environ
from scripts.common.paths import REPORTS

DOC_COUNTS = (1, 8, 64, 256, 1024)
OVERHEAD_SIZES = (1, 4, 16, 64, 256)
SECTIONS = ("embed", "token_embed", "colbert", "overhead", "serve")


def parse_args(argv=None) -> argparse.Namespace:
    """The command line of ``python -m scripts.bench`` (``make bench``'s
    ``BENCH_ARGS``). ``--quick`` sets ``limit`` (256 unless given), ``reps``,
    ``colbert_reps`` (1) and ``overhead_budget`` (0.1 s); ``sections`` and
    ``engines`` come back as lists. Exits with status 2 (argparse) for an
    unknown section or engine configuration."""
    parser = argparse.ArgumentParser(prog="python -m scripts.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=3, help="timed rounds after the warm-up (default 3)")
    parser.add_argument("--colbert-reps", type=int, default=5,
                        help="timed rounds of the (short) score calls (default 5)")
    parser.add_argument("--limit", type=int, default=None, help="first N sentences only")
    parser.add_argument("--quick", action="store_true",
                        help="a short run: 256 sentences, 1 round, up to 64 documents, short overhead timing")
    parser.add_argument("--sections", default=",".join(SECTIONS), help=f"comma-separated, of {SECTIONS}")
    parser.add_argument("--all-engines", action="store_true",
                        help="every engine configuration in token_embed and colbert too (longer)")
    parser.add_argument("--engines", default=",".join(ENGINES),
                        help=f"comma-separated engine configurations to measure, of {tuple(ENGINES)} "
                             "(default all; e.g. v1,mrv2 leaves out the slow interpreter)")
    parser.add_argument("--out", default=str(REPORTS), help="reports directory (default reports/)")
    parser.add_argument("--overhead-budget", type=float, default=0.6,
                        help="seconds of timing per overhead row (default 0.6)")
    args = parser.parse_args(argv)
    args.sections = [s for s in args.sections.split(",") if s]
    if unknown := set(args.sections) - set(SECTIONS):
        parser.error(f"unknown sections {sorted(unknown)}")
    args.engines = [e for e in args.engines.split(",") if e]
    if unknown := set(args.engines) - set(ENGINES):
        parser.error(f"unknown engines {sorted(unknown)}")
    if args.quick:
        args.limit, args.reps, args.colbert_reps, args.overhead_budget = args.limit or 256, 1, 1, 0.1
    return args


def main(argv=None) -> int:
    """``make bench``: run the sections, write the reports, print the table
    last. Exit status 1 when a section failed (the others still report)."""
    args = parse_args(argv)
    started = time.perf_counter()
    from scripts.validation.engine import quiet_vllm

    quiet_vllm("bench")
    with bench_environ():
        return run(args, started)


def run(args: argparse.Namespace, started: float) -> int:
    """The sections of ``args`` (``parse_args``) in order, then the reports
    (``scripts.bench.report``) in ``args.out``; 1 when a section failed.
    ``started``: ``time.perf_counter()`` at the start, for ``run_seconds``."""
    from tqdm import tqdm

    from scripts.bench.machine import machine
    from scripts.bench.report import report
    from scripts.bench.sections import bench_colbert, bench_overhead, bench_sentences, worker_threads
    from scripts.validation.models import sts_test

    sections, engines = args.sections, args.engines
    sentences = sts_test().sentences[: args.limit]
    doc_counts = [n for n in DOC_COUNTS if n < len(sentences) and (not args.quick or n <= 64)]
    sizes = OVERHEAD_SIZES if not args.quick else (1, 4, 16)
    results: dict = {"machine": machine(), "config": {
        "reps": args.reps, "colbert_reps": args.colbert_reps, "sentences": len(sentences), "doc_counts": doc_counts,
        "sections": sections, "engines": {e: ENGINES[e] for e in engines},
        "gpu_memory_utilization": GPU_MEMORY_UTILIZATION, "quick": args.quick}}
    # embed: every configuration (issue 9); token_embed and colbert: V1 and one
    # MRV2, the native one where it runs MRV2, else the interpreter's
    # (--all-engines: every configuration everywhere).
    later = [e for e in (list(ENGINES) if args.all_engines else ["v1", "mrv2"]) if e in engines]
    n_calls = {"embed": len(engines) + 1, "token_embed": len(later) + 1,
               "colbert": len(later) * len(doc_counts)}
    reps = {"embed": args.reps, "token_embed": args.reps, "colbert": args.colbert_reps}
    total = sum(reps[k] * n for k, n in n_calls.items() if k in sections)
    if "serve" in sections:
        from scripts.bench.server import bar_steps

        total += bar_steps(args.reps, args.quick)
    print(f"== make bench: {len(sentences)} STS-B sentences; engines side by side, {args.reps} "
          f"interleaved rounds after a warm-up ({args.colbert_reps} for scoring); "
          f"sections {', '.join(sections)}", flush=True)
    with tqdm(total=total, desc="bench", unit="call", dynamic_ncols=True) as bar:
        if "embed" in sections:
            bar.set_description("embed")
            results["embed"] = _section("embed", bench_sentences, "embed", sentences, args.reps, bar,
                                        tuple(engines))
            native = (results["embed"].get("engines") or {}).get("mrv2", {})
            if not args.all_engines and native and not native.get("runner_as_requested", False):
                # native MRV2 did not run MRV2 here
                later = [e for e in ("v1", "mrv2-interpreter") if e in engines]
                bar.total = sum(reps[k] * n for k, n in n_calls.items() if k in sections)
        results["config"]["engines_after_embed"] = later
        if "token_embed" in sections:
            bar.set_description("token_embed")
            results["token_embed"] = _section("token_embed", bench_sentences, "token_embed", sentences,
                                              args.reps, bar, later)
        if "colbert" in sections:
            bar.set_description("colbert")
            results["colbert"] = _section("colbert", bench_colbert, sentences, doc_counts, args.colbert_reps, bar,
                                          later)
        if "serve" in sections:
            from scripts.bench.server import bench_serve

            bar.set_description("serve")
            results["serve"] = _section("serve", bench_serve, sts_test().sentences, args.reps, bar, args.quick)
    if "overhead" in sections:
        print("== pooling overhead per step (MRV2 vs V1, no model forward)", flush=True)
        results["overhead"] = _section("overhead", bench_overhead, worker_threads(results), sizes,
                                       args.overhead_budget)
    results["run_seconds"] = time.perf_counter() - started
    print(report(results, Path(args.out)))
    failed = [k for k in sections if "error" in results.get(k, {})]
    if failed:
        print(f"failed sections: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


def _section(name: str, fn, *args) -> dict:
    """Run one section; a failure is recorded (``{"error": ...}``) and the
    other sections still run."""
    try:
        return fn(*args)
    except Exception as e:  # noqa: BLE001 - reported, exit status 1
        traceback.print_exc()
        return {"error": f"{type(e).__name__}: {e}"}


if __name__ == "__main__":
    sys.exit(main())
