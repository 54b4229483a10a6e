"""Profile one embed run (all-MiniLM-L6-v2 over the STS-B test sentences) of
an engine configuration (``mrv2``, ``v1``: ``scripts.bench.engines.ENGINES``) and of
sentence-transformers, split into where the time goes (issue 17).

Two passes per system, each over the same sentences after a warm-up call:

1. **py-spy** (sampling every process: the ``LLM`` front end, the engine
   core, the worker; threads blocked in the kernel are not sampled): each
   sample of a thread's stack is put in one category (``waiting`` when the
   innermost frame spins or polls for work, else ``CATEGORIES``: the first
   rule whose pattern matches a frame, innermost frame first), giving
   milliseconds of CPU per 1,000 sentences for each busy thread. The
   worker's main thread is the critical path of an engine (it runs the
   model); its "blocked" row is the call's wall time it was not running.
2. **torch.profiler** in the process that runs the model (the worker, through
   ``collective_rpc``; sentence-transformers' own process): self CPU time of
   each operator, GEMMs grouped by their weight shape (QKV, attention output,
   FFN up, FFN down), attention, activation, norms, embeddings.

    python -m scripts.bench.profile_embed [--systems mrv2,v1,sentence-transformers] [--limit N]
                                    [--rate 250] [--out reports/profile] [--engine-arg KEY=VALUE]

Writes ``profile.json`` and ``profile.md`` to ``--out`` and prints the
Markdown tables. The figures are for one run on a shared machine: compare
systems within one run, not across runs. The profilers and their categories
live in ``scripts.bench.profiling``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from scripts.bench.engines import ST, bench_environ, engine, st_model
from scripts.bench.profiling import (CATEGORIES, PySpy, parse_raw, summarise_ops, torch_profile_start,
                                     torch_profile_stop)
from scripts.common.paths import REPORTS
from scripts.common.reports import write_reports

# Pause before each pass of an engine: its shared-memory readers spin for 1 s
# after their last message (scripts.bench.systems.SETTLE_S).
ENGINE_SETTLE_S = 1.2


def _seconds(fn) -> float:
    """Wall time of ``fn()`` in seconds."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def passes(run, sentences: list[str], rate: int, raw: str, profile_start, profile_stop,
           settle_s: float = 0.0) -> dict:
    """Both passes of one system: ``run(items)`` encodes ``items``; a warm-up
    (the first 128 sentences, then all), then all ``sentences`` under py-spy
    (``rate`` samples/s, raw output to the file ``raw``), under
    ``torch.profiler`` (``profile_start()`` / ``profile_stop()`` -> operator
    rows) and unprofiled, ``settle_s`` seconds of pause before each. Returns
    the three wall times (s), the py-spy samples by thread and category
    (``parse_raw``) and the operator rows."""
    run(sentences[:128])
    run(sentences)
    time.sleep(settle_s)
    with PySpy(os.getpid(), raw, rate):
        wall = _seconds(lambda: run(sentences))
    spy = parse_raw(raw)
    time.sleep(settle_s)
    profile_start()
    wall_torch = _seconds(lambda: run(sentences))
    ops = profile_stop()
    time.sleep(settle_s)
    wall_plain = _seconds(lambda: run(sentences))
    return {"wall_s": wall, "wall_torch_profiler_s": wall_torch, "wall_unprofiled_s": wall_plain,
            "spy": spy, "ops": ops}


def profile_engine(name: str, sentences: list[str], rate: int, tmp: str, engine_kwargs: dict) -> dict:
    """Both passes (``passes``) for engine configuration ``name`` on MiniLM
    (``engine_kwargs`` go to ``LLM``), ``torch.profiler`` in its worker;
    ``info``: what its worker ran (``scripts.bench.engines.engine``)."""
    from scripts.validation.checkpoints.models import minilm_path

    with engine(name, minilm_path(), **engine_kwargs) as (llm, info):
        r = passes(lambda items: llm.embed(items, use_tqdm=False), sentences, rate, os.path.join(tmp, f"{name}.raw"),
                   lambda: llm.collective_rpc(torch_profile_start),
                   lambda: llm.collective_rpc(torch_profile_stop)[0], settle_s=ENGINE_SETTLE_S)
    return {"info": info, **r}


def profile_st(sentences: list[str], rate: int, tmp: str, threads: int) -> dict:
    """Both passes (``passes``) for sentence-transformers in this process
    (``threads`` torch threads, ``batch_size=64``: as ``make bench``)."""
    import torch

    from scripts.validation.checkpoints.models import minilm_path

    model = st_model(minilm_path(), threads)
    r = passes(lambda items: model.encode(items, batch_size=64, convert_to_numpy=True), sentences, rate,
               os.path.join(tmp, "st.raw"), torch_profile_start, torch_profile_stop)
    return {"info": {"torch_threads": torch.get_num_threads()}, **r}


def thread_label(key) -> str:
    """``process/thread`` for a py-spy key: the engine core, the worker, the
    front end (the process running this script) by their process titles."""
    pid, cmd, thread = key
    if "EngineCore" in cmd:
        proc = "engine core"
    elif "Worker" in cmd:
        proc = "worker"
    elif "profile_embed" in cmd or "scripts.bench.cli" in cmd:
        proc = "front end"
    else:
        proc = cmd.split("/")[-1][:24]
    return f"{proc}/{thread[:28]}"


def report(results: dict, n: int, d: int, f: int) -> str:
    """Markdown: per system, CPU ms per 1,000 sentences of each busy thread
    by category (and the time it was blocked), then the model's operators."""
    lines = []
    per_k = 1000.0 / n
    for system, r in results.items():
        rate = r["rate"]
        wall_samples = r["wall_s"] * rate
        lines.append(f"### {system}: {n} sentences, {r['wall_unprofiled_s'] * per_k * 1000:.0f} ms per 1,000 "
                     f"sentences unprofiled ({r['wall_s'] * per_k * 1000:.0f} under py-spy, "
                     f"{r['wall_torch_profiler_s'] * per_k * 1000:.0f} under torch.profiler)\n")
        threads = sorted(r["spy"]["per_thread"].items(), key=lambda kv: -sum(kv[1].values()))
        busy = [(k, c) for k, c in threads if sum(c.values()) > 0.02 * wall_samples]
        cats = [c for c, _ in CATEGORIES] + ["other", "waiting"]
        lines.append("| py-spy: ms per 1,000 sentences | " + " | ".join(thread_label(k) for k, _ in busy) + " |")
        lines.append("| --- |" + " ---: |" * len(busy))
        for cat in cats:
            vals = [c.get(cat, 0) / rate * per_k * 1000 for _, c in busy]
            if any(v >= 0.5 for v in vals):
                lines.append(f"| {cat} | " + " | ".join(f"{v:.0f}" for v in vals) + " |")
        lines.append("| blocked (not sampled) | " + " | ".join(
            f"{max(0.0, wall_samples - sum(c.values())) / rate * per_k * 1000:.0f}" for _, c in busy) + " |")
        lines.append("")
        ops = summarise_ops(r["ops"], d, f)
        lines.append("| torch.profiler, model process: operators | self CPU ms per 1,000 |")
        lines.append("| --- | ---: |")
        for cat, us in sorted(ops.items(), key=lambda kv: -kv[1]):
            if us / 1000 * per_k >= 0.05:
                lines.append(f"| {cat} | {us / 1000 * per_k:.1f} |")
        lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    """Command line: profile each of ``--systems``, write ``profile.md`` and
    ``profile.json`` to ``--out`` and print the Markdown."""
    parser = argparse.ArgumentParser(prog="python -m scripts.bench.profile_embed", description=__doc__.split("\n\n")[0])
    parser.add_argument("--systems", default=f"mrv2,{ST}")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--rate", type=int, default=250)
    parser.add_argument("--out", default=str(REPORTS / "profile"))
    parser.add_argument("--engine-arg", action="append", default=[],
                        help="KEY=VALUE passed to LLM (JSON value), e.g. max_num_seqs=512")
    parser.add_argument("--top", type=int, default=0, help="print the N most sampled stacks per busy thread")
    args = parser.parse_args(argv)
    with bench_environ():
        return run(args)


def run(args: argparse.Namespace) -> int:
    """The profiles of ``main``'s arguments ``args``; 0."""
    from scripts.validation.checkpoints.models import minilm_path, sts_test

    sentences = sts_test().sentences[: args.limit]
    engine_kwargs = {}
    for kv in args.engine_arg:
        k, _, v = kv.partition("=")
        engine_kwargs[k] = json.loads(v)
    with open(minilm_path() / "config.json") as fh:
        config = json.load(fh)
    d, f = config["hidden_size"], config["intermediate_size"]
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for system in args.systems.split(","):
            print(f"== profiling {system}", flush=True)
            if system == ST:
                r = profile_st(sentences, args.rate, tmp, threads=1)
            else:
                r = profile_engine(system, sentences, args.rate, tmp, engine_kwargs)
            r["rate"] = args.rate
            results[system] = r
            if args.top:
                for key, st in r["spy"]["stacks"].items():
                    tot = sum(st.values())
                    print(f"-- {thread_label(key)}: {tot} samples")
                    for (cat, stack), c in st.most_common(args.top):
                        print(f"   {c:6d} {cat:20s} {stack[-300:]}")
    md = report(results, len(sentences), d, f)
    serial = {s: {**{k: v for k, v in r.items() if k != "spy"},
                  "spy": {thread_label(k): dict(c) for k, c in r["spy"]["per_thread"].items()}}
              for s, r in results.items()}
    profile = {"sentences": len(sentences), "engine_kwargs": engine_kwargs, "results": serial}
    write_reports({"profile.md": md + "\n", "profile.json": json.loads(json.dumps(profile, default=str))},
                  Path(args.out))
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
