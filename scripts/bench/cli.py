"""Benchmarks (``make bench``): vLLM's engine configurations and the systems a
CPU user compares them with, measured side by side in one run, on the same
machine at the same time, so that their ratios mean something on a shared,
noisy machine.

Every system runs in a long-lived process of its own
(``scripts.bench.systems``, ``scripts.bench.host``), driven over a pipe, so
its CPU seconds and peak memory are its own and complete: an engine
configuration's ``LLM`` front end, engine core and worker; sentence-
transformers; ONNX Runtime and OpenVINO (``scripts.bench.peers``, in the
peers' venv ``.venv-bench`` made by ``make bench-env``).

Engine configurations (``ENGINES``), each started with its own environment:

- ``v1``: the V1 model runner (``VLLM_USE_V2_MODEL_RUNNER=0``);
- ``mrv2-interpreter``: MRV2 (``VLLM_USE_V2_MODEL_RUNNER=1``) with its Triton
  kernels under Triton's interpreter (``TRITON_INTERPRET=1``);
- ``mrv2``: MRV2-native, the runner vLLM picks by default with
  ``TRITON_INTERPRET`` unset: on a CPU without a Triton backend, MRV2 with
  native input preparation where the series has it (patch 0008), else vLLM's
  fallback to V1.

Every engine's worker is asked which runner it built and how (runner class,
``TRITON_INTERPRET``, ``HAS_TRITON``, native input preparation, torch
threads); a system whose runner is not the one asked for is marked in the
table (``*``) and in the JSON (``runner_as_requested``).

Lines (``--line NAME=VENV``, repeatable): the engine configurations of each
installed line, each from its own venv (its installed vLLM), side by side in
the same rounds; without ``--line``, the in-tree ``vllm/`` with this
interpreter. Threads (``--threads``, default ``1,all``): the embed section
runs once per setting, vLLM through ``VLLM_CPU_OMP_THREADS_BIND``, the peers
through their intra-op thread settings, sentence-transformers through
torch's; the other sections run at the first setting.

Sections (all repetitions interleaved across the systems, the order rotating
each round, one warm-up call each first; medians reported; each call's CPU
read 1.1 s after it returned, so that it includes vLLM's polling after a
call):

1. ``embed``: all-MiniLM-L6-v2 over the STS-B test sentences (2,758: both
   sentences of the 1,379 pairs), every engine configuration,
   sentence-transformers, ONNX Runtime, OpenVINO: sentences/s, sentences per
   CPU second, CPU seconds per call and peak RSS of all each system's
   processes, the smallest cosine with sentence-transformers, MRV2's ratios
   to V1, to sentence-transformers and to the fastest peer; FLOPs and the
   fraction of the worker's fp32 matmul rate.
2. ``token_embed`` (``v1`` and one MRV2: ``mrv2`` where it runs MRV2, else
   ``mrv2-interpreter``; ``--all-engines`` for all) against
   sentence-transformers' token embeddings.
3. ``colbert`` (the configurations of ``token_embed``): ``LLM.score`` with a
   tiny random ``HF_ColBERT`` model, one query and 1, 8, 64, 256, 1024
   documents: documents per second, query encodings per call, growth with N.
4. ``overhead``: ``scripts.bench.pool_overhead`` in a process of its own: host time
   of one pooling step without the model forward, MRV2 against V1.
5. ``serve``: ``vllm serve`` (MRV2 and V1) and infinity-emb (its torch
   engine, ``.venv-infinity``) under the same client load, and a server's
   resident memory over late-interaction requests with clients hanging up
   (``scripts.bench.server``).

Outputs: ``reports/bench.json`` (with the machine's description),
``reports/bench-throughput.png``, ``reports/bench-colbert.png``,
``reports/bench-overhead.png``, ``reports/bench.md``; the tables printed
last (``scripts.bench.report``).

    python -m scripts.bench [--reps 3] [--colbert-reps 5] [--limit N] [--quick] [--sections embed,...]
                            [--threads 1,all] [--line NAME=VENV ...] [--peers-python PATH | --no-peers]
                            [--all-engines] [--engines v1,mrv2-interpreter,mrv2] [--out reports]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from pathlib import Path

from scripts.bench.engines import ENGINES, GPU_MEMORY_UTILIZATION, bench_environ
from scripts.common.paths import REPO, REPORTS

DOC_COUNTS = (1, 8, 64, 256, 1024)
OVERHEAD_SIZES = (1, 4, 16, 64, 256)
SECTIONS = ("embed", "token_embed", "colbert", "overhead", "serve")
PEERS_PYTHON = REPO / ".venv-bench" / "bin" / "python"
INFINITY = REPO / ".venv-infinity" / "bin" / "infinity_emb"


def parse_args(argv=None) -> argparse.Namespace:
    """The command line of ``python -m scripts.bench`` (``make bench``'s
    ``BENCH_ARGS``). ``--quick`` sets ``limit`` (256 unless given), ``reps``,
    ``colbert_reps`` (1) and ``overhead_budget`` (0.1 s); ``sections``,
    ``engines``, ``threads`` (``int`` or ``None`` for the libraries'
    defaults) and ``lines`` (``scripts.bench.sections.Line``) come back as
    lists. Exits with status 2 (argparse) for an unknown section or engine
    configuration, a bad ``--threads`` or a ``--line`` whose interpreter
    does not exist."""
    from scripts.bench.sections import in_tree_line, parse_line, parse_threads

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
    parser.add_argument("--threads", default="1,all",
                        help="thread settings of the embed section, comma-separated: counts, 'all' (this "
                             "machine's CPUs), 'default' (each library's own); the other sections use the "
                             "first (default 1,all)")
    parser.add_argument("--line", action="append", default=[], metavar="NAME=VENV",
                        help="the engines of an installed line, from that venv's vLLM (repeat for several "
                             "lines side by side; default: the in-tree vllm/ with this interpreter)")
    parser.add_argument("--peers-python", default=str(PEERS_PYTHON),
                        help="interpreter of the peers' venv (ONNX Runtime, OpenVINO; default .venv-bench, "
                             "made by make bench-env)")
    parser.add_argument("--no-peers", action="store_true", help="leave ONNX Runtime and OpenVINO out")
    parser.add_argument("--batch-size", type=int, default=64,
                        help="batch size of sentence-transformers and the peers (default 64)")
    parser.add_argument("--infinity", default=str(INFINITY),
                        help="infinity-emb's infinity_emb script for the serve section (default .venv-infinity's; "
                             "'none' leaves it out)")
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
    try:
        args.threads = parse_threads(args.threads)
        args.lines = [parse_line(text) for text in args.line] or [in_tree_line()]
    except ValueError as e:
        parser.error(str(e))
    if not args.threads:
        parser.error("--threads names no setting")
    if len({line.name for line in args.lines}) < len(args.lines):
        parser.error("--line: two lines with one name")
    if args.quick:
        args.limit, args.reps, args.colbert_reps, args.overhead_budget = args.limit or 256, 1, 1, 0.1
    # The systems' hosts run in another directory (scripts.bench.host), so a
    # relative interpreter (make bench passes .venv-bench/bin/python) is made
    # absolute here; abspath, not resolve: a venv's python is a symlink to the
    # base interpreter, and following it would leave the venv.
    args.peers_python = os.path.abspath(args.peers_python)
    if args.infinity != "none":
        args.infinity = os.path.abspath(args.infinity)
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
    from scripts.bench.sections import (PEERS, Lineup, bench_colbert, bench_embed, bench_overhead,
                                        bench_token_embed, worker_threads)
    from scripts.validation.checkpoints.models import sts_test

    sections, engines = args.sections, args.engines
    sentences = sts_test().sentences[: args.limit]
    doc_counts = [n for n in DOC_COUNTS if n < len(sentences) and (not args.quick or n <= 64)]
    sizes = OVERHEAD_SIZES if not args.quick else (1, 4, 16)
    lineup = Lineup(engines, args.lines, None if args.no_peers else args.peers_python, args.batch_size,
                    GPU_MEMORY_UTILIZATION)
    infinity = None if args.infinity == "none" else args.infinity
    results: dict = {"machine": machine(), "config": {
        "reps": args.reps, "colbert_reps": args.colbert_reps, "sentences": len(sentences), "doc_counts": doc_counts,
        "sections": sections, "engines": {e: ENGINES[e] for e in engines}, "threads": args.threads,
        "lines": [vars(line) for line in args.lines], "peers_python": lineup.peers_python,
        "batch_size": args.batch_size, "infinity": infinity,
        "gpu_memory_utilization": GPU_MEMORY_UTILIZATION, "quick": args.quick}}
    # embed: every configuration (issue 9); token_embed and colbert: V1 and one
    # MRV2, the native one where it runs MRV2, else the interpreter's
    # (--all-engines: every configuration everywhere).
    later = [e for e in (list(ENGINES) if args.all_engines else ["v1", "mrv2"]) if e in engines]
    n_lines = len(args.lines)
    others = 1 + (0 if args.no_peers else len(PEERS))
    n_calls = {"embed": (len(engines) * n_lines + others) * len(args.threads),
               "token_embed": len(later) * n_lines + 1, "colbert": len(later) * n_lines * len(doc_counts)}
    reps = {"embed": args.reps, "token_embed": args.reps, "colbert": args.colbert_reps}
    total = sum(reps[k] * n for k, n in n_calls.items() if k in sections)
    if "serve" in sections:
        from scripts.bench.server import bar_steps

        total += bar_steps(args.reps, args.quick, infinity is not None, len(args.lines))
    print(f"== make bench: {len(sentences)} STS-B sentences; every system in a process of its own, "
          f"{args.reps} interleaved rounds after a warm-up ({args.colbert_reps} for scoring); "
          f"sections {', '.join(sections)}; lines {', '.join(line.name for line in args.lines)}", flush=True)
    first_threads = args.threads[0]
    with tqdm(total=total, desc="bench", unit="call", dynamic_ncols=True) as bar:
        def log(text):
            bar.write(text)

        if "embed" in sections:
            bar.set_description("embed")
            results["embed"] = _section("embed", bench_embed, sentences, args.reps, bar, lineup, args.threads, log)
            first = next(iter((results["embed"].get("threads") or {}).values()), {})
            native = (first.get("systems") or {}).get(lineup.engine_name("mrv2", args.lines[0]), {})
            if not args.all_engines and native and not native.get("runner_as_requested", False):
                # native MRV2 did not run MRV2 here
                later = [e for e in ("v1", "mrv2-interpreter") if e in engines]
        results["config"]["engines_after_embed"] = later
        if "token_embed" in sections:
            bar.set_description("token_embed")
            results["token_embed"] = _section("token_embed", bench_token_embed, sentences, args.reps, bar, lineup,
                                              later, first_threads, log)
        if "colbert" in sections:
            bar.set_description("colbert")
            results["colbert"] = _section("colbert", bench_colbert, sentences, doc_counts, args.colbert_reps, bar,
                                          lineup, later, first_threads, log)
        if "serve" in sections:
            from scripts.bench.server import bench_serve

            bar.set_description("serve")
            results["serve"] = _section("serve", bench_serve, sts_test().sentences, args.reps, bar, args.quick,
                                        infinity, args.lines, [e for e in engines if e in ("mrv2", "v1")])
    if "overhead" in sections:
        print("== pooling overhead per step (MRV2 vs V1, no model forward)", flush=True)
        results["overhead"] = _section("overhead", bench_overhead, worker_threads(results), sizes,
                                       args.overhead_budget)
    results["run_seconds"] = time.perf_counter() - started
    results["machine"]["load_average_at_end"] = os.getloadavg()
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
