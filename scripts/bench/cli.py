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

    python -m scripts.bench [--reps 3] [--colbert-reps 5] [--limit N] [--quick] [--sections embed,token_embed,colbert,overhead,serve]
                            [--all-engines] [--engines v1,mrv2-interpreter,mrv2] [--out reports]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from contextlib import contextmanager
from pathlib import Path

from scripts.series.base import REPO

REPORTS = REPO / "reports"
# Encoder-only models have no KV cache; a small reservation keeps several
# engines open at once well inside the machine's memory (DESIGN.md: <= 0.3).
GPU_MEMORY_UTILIZATION = 0.1
ENGINES = {
    "v1": {"runner": "v1", "triton_interpret": False, "want": "V1"},
    "mrv2-interpreter": {"runner": "v2", "triton_interpret": True, "want": "MRV2"},
    "mrv2": {"runner": "default", "triton_interpret": False, "want": "MRV2"},
}
ST = "sentence-transformers"
DOC_COUNTS = (1, 8, 64, 256, 1024)
OVERHEAD_SIZES = (1, 4, 16, 64, 256)
SECTIONS = ("embed", "token_embed", "colbert", "overhead", "serve")


# --------------------------------------------------------------------------- the machine

def machine() -> dict:
    """What the figures were measured on: CPU model, cores, memory (GiB),
    Python, torch and vLLM versions, torch threads of this process, the
    repository commit and whether ``vllm/`` matched the series."""
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    mem_gib = None
    try:
        with open("/proc/meminfo") as f:
            kib = next(int(line.split()[1]) for line in f if line.startswith("MemTotal"))
        mem_gib = round(kib / 2**20, 1)
    except (OSError, StopIteration):
        pass
    info = {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": mem_gib, "python": platform.python_version(),
            "torch": torch.__version__, "bench_process_threads": torch.get_num_threads(),
            "load_average_at_start": os.getloadavg()}
    try:
        import vllm

        info["vllm"] = vllm.__version__
    except Exception as e:  # noqa: BLE001 - recorded, not fatal
        info["vllm"] = f"unknown ({e})"
    info["git_commit"] = _run(["git", "rev-parse", "--short", "HEAD"])
    info["series_status"] = _run([sys.executable, "-m", "scripts.series", "status"])
    return info


def _run(cmd: list[str]) -> str | None:
    try:
        out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=60)
        return (out.stdout + out.stderr).strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


# --------------------------------------------------------------------------- in the workers

def worker_probe(worker) -> dict:
    """Runs in an engine's worker: the runner it built and how it runs —
    runner class, ``TRITON_INTERPRET`` in its environment, vLLM's
    ``HAS_TRITON`` and ``TRITON_VIA_INTERPRETER``, whether MRV2's native input
    preparation (patch 0008) is active, torch threads."""
    import torch

    from scripts.validation.engine import runner_class
    from vllm.triton_utils import importing

    try:
        from vllm.v1.worker.cpu import input_preparation

        native = input_preparation.installed()
    except ImportError:
        native = None  # a series without patch 0008
    return {"runner_class": runner_class(worker), "triton_interpret_env": os.environ.get("TRITON_INTERPRET"),
            "has_triton": bool(importing.HAS_TRITON),
            "triton_via_interpreter": bool(getattr(importing, "TRITON_VIA_INTERPRETER", False)),
            "native_input_prep": native, "torch_threads": torch.get_num_threads()}


def _vm_hwm_mib(pid: int | str = "self") -> float | None:
    """Peak resident set size (``VmHWM`` of ``/proc/PID/status``) in MiB,
    None where it cannot be read."""
    try:
        with open(f"/proc/{pid}/status") as f:
            kib = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
        return kib / 1024
    except (OSError, StopIteration, ValueError):
        return None


def peak_memory(worker=None) -> dict:
    """Runs in an engine's worker: peak resident memory (MiB, ``VmHWM``
    since the process started) of the worker and of its parent, the engine
    core (``engine_core_title`` names that process), and their sum. The
    engine's front end lives in the bench process, shared by every engine
    and by sentence-transformers, and is left out."""
    ppid = os.getppid()
    try:
        with open(f"/proc/{ppid}/cmdline", "rb") as f:
            title = f.read().split(b"\0")[0].decode(errors="replace")
    except OSError:
        title = None
    worker_mib, core_mib = _vm_hwm_mib(), _vm_hwm_mib(ppid)
    total = worker_mib + core_mib if worker_mib is not None and core_mib is not None else None
    return {"worker_mib": worker_mib, "engine_core_mib": core_mib, "engine_core_title": title,
            "engine_mib": total}


def st_peak_memory(model_dir: str, sentences: list[str], threads: int | None, task: str) -> dict:
    """Runs in a fresh process (``_st_memory``): sentence-transformers loads
    the model and encodes ``sentences`` once as the timed calls do (``task``
    ``embed`` or ``token_embed``, batch 64, ``threads`` torch threads);
    returns that process's peak resident memory in MiB."""
    st_model = _st_model(model_dir, threads)
    if task == "embed":
        st_model.encode(sentences, batch_size=64, convert_to_numpy=True)
    else:
        st_model.encode(sentences, batch_size=64, output_value="token_embeddings")
    return {"process_mib": _vm_hwm_mib()}


def _st_memory(model_dir, sentences: list[str], threads: int | None, task: str) -> dict:
    """``st_peak_memory`` in a spawned process of its own (the bench process
    also holds the engines' front ends); ``{"error": ...}`` if it fails."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    try:
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            return pool.submit(st_peak_memory, str(model_dir), sentences, threads, task).result()
    except Exception as e:  # noqa: BLE001 - reported, the figures still come
        return {"error": f"{type(e).__name__}: {e}"}


def matmul_rate(worker=None, size: int = 2048, reps: int = 5) -> dict:
    """fp32 ``torch.matmul`` of two ``size`` x ``size`` matrices, best of
    ``reps`` after a warm-up, with this process's torch threads (run it in an
    engine's worker through ``collective_rpc`` for the engine's threads).
    Returns ``{"tflops": TFLOP/s, "size": size, "threads": n}`` (2 size**3
    FLOPs a product)."""
    import torch

    gen = torch.Generator().manual_seed(0)
    a = torch.randn(size, size, generator=gen)
    b = torch.randn(size, size, generator=gen)
    torch.matmul(a, b)
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        torch.matmul(a, b)
        best = min(best, time.perf_counter() - start)
    return {"tflops": 2 * size**3 / best / 1e12, "size": size, "threads": torch.get_num_threads()}


# --------------------------------------------------------------------------- FLOPs

def minilm_flops(token_counts: list[int], config: dict) -> float:
    """FLOPs of a BERT encoder forward (all-MiniLM-L6-v2) over sequences of
    ``token_counts`` tokens (special tokens included), 2 FLOPs a multiply-add.

    Per layer and sequence of n tokens, hidden size d, FFN size f:
    Q, K, V and output projections 4 * 2nd^2; FFN 2 * 2ndf; attention scores
    QK^T and their product with V 2 * 2n^2d (all heads together). Summed over
    the layers: L * (n * (8d^2 + 4df) + 4n^2d). Embeddings, layer norms,
    softmax, GELU and pooling are O(nd) and left out (< 1%)."""
    layers, d, f = config["num_hidden_layers"], config["hidden_size"], config["intermediate_size"]
    return float(sum(layers * (n * (8 * d * d + 4 * d * f) + 4 * n * n * d) for n in token_counts))


def token_counts(model_dir, sentences: list[str]) -> list[int]:
    """Tokens of each sentence as the engine sees them (the model's tokenizer,
    special tokens added)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    return [len(ids) for ids in tok(sentences, add_special_tokens=True)["input_ids"]]


# --------------------------------------------------------------------------- engines

@contextmanager
def _environ(**values):
    """Set (str) or unset (None) environment variables inside the block."""
    saved = {k: os.environ.get(k) for k in values}
    try:
        for k, v in values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def open_engine(name: str, model, **kwargs) -> tuple[object, dict]:
    """Open engine configuration ``name`` (an ``ENGINES`` key) on ``model``;
    return the ``LLM`` and what its worker reports (``worker_probe``) plus
    ``runner`` ("MRV2"/"V1"), ``requested`` and ``runner_as_requested``.
    ``kwargs`` go to ``LLM``."""
    from scripts.validation.engine import open_llm, runner_in_use

    spec = ENGINES[name]
    kwargs.setdefault("gpu_memory_utilization", GPU_MEMORY_UTILIZATION)
    with _environ(TRITON_INTERPRET="1" if spec["triton_interpret"] else None):
        start = time.perf_counter()
        llm = open_llm(model, runner=spec["runner"], **kwargs)
        opened = time.perf_counter() - start
    (probe,) = {json.dumps(p, sort_keys=True) for p in llm.collective_rpc(worker_probe)}
    info = json.loads(probe)
    info.update(runner=runner_in_use(llm), requested=spec["want"], open_seconds=opened,
                triton_interpret_requested=spec["triton_interpret"],
                runner_env=spec["runner"])
    # As asked: the runner, and for MRV2 how it prepared inputs (interpreter or native).
    info["runner_as_requested"] = info["runner"] == spec["want"] and (
        spec["want"] != "MRV2"
        or info["triton_via_interpreter"] == spec["triton_interpret"])
    return llm, info


def open_engines(names, model, **kwargs) -> tuple[dict, dict]:
    """Open several configurations; one that fails to open is recorded
    (``{"error": ...}``) and left out. Returns ``(llms, infos)``."""
    llms, infos = {}, {}
    for name in names:
        print(f"  opening {name} on {os.path.basename(str(model))}", flush=True)
        try:
            llms[name], infos[name] = open_engine(name, model, **kwargs)
        except Exception as e:  # noqa: BLE001 - the other engines still run
            infos[name] = {"error": f"{type(e).__name__}: {e}", "requested": ENGINES[name]["want"]}
            print(f"  {name} failed to open: {infos[name]['error']}", flush=True)
    return llms, infos


def close_engines(llms: dict) -> None:
    """Shut every engine of ``llms`` down (its processes end now)."""
    from scripts.validation.engine import close_llm

    for llm in llms.values():
        close_llm(llm)


# --------------------------------------------------------------------------- timing

# An engine's shared-memory readers busy-poll for 1 s after their last message
# (vLLM's SpinCondition); a timed call starts once the previous one's are idle.
SETTLE_S = 1.1


def interleaved(calls: dict, reps: int, warmups: dict | None = None, bar=None,
                settle_s: float = SETTLE_S) -> dict[str, list[float]]:
    """Run each named call once to warm up (``warmups[name]`` instead, when
    given), then ``reps`` rounds of all of them, the order rotating each round,
    ``settle_s`` seconds of pause before each timed call; seconds per call.
    ``bar``: a tqdm bar advanced once per timed call."""
    for name, fn in calls.items():
        (warmups or {}).get(name, fn)()
    names = list(calls)
    times: dict[str, list[float]] = {name: [] for name in names}
    for rep in range(reps):
        for name in names[rep % len(names):] + names[: rep % len(names)]:
            if bar is not None:
                bar.set_postfix_str(name if isinstance(name, str) else " ".join(map(str, name)))
            time.sleep(settle_s)
            start = time.perf_counter()
            calls[name]()
            times[name].append(time.perf_counter() - start)
            if bar is not None:
                bar.update(1)
    return times


def rates(times: dict[str, list[float]], items: int, tokens: int | None = None) -> dict:
    """Median seconds, items (and tokens) per second for each named call."""
    out = {}
    for name, t in times.items():
        med = statistics.median(t)
        row = {"median_s": med, "times_s": t, "per_s": items / med}
        if tokens is not None:
            row["tokens_per_s"] = tokens / med
        out[name] = row
    return out


def ratios(per_s: dict[str, float]) -> dict[str, float]:
    """Ratios of each MRV2 configuration to ``v1`` and to sentence-transformers
    (items per second), for the configurations present."""
    out = {}
    for name in ("mrv2", "mrv2-interpreter"):
        for ref in ("v1", ST):
            if name in per_s and ref in per_s:
                out[f"{name}/{ref}"] = per_s[name] / per_s[ref]
    return out


# --------------------------------------------------------------------------- sections

def bench_sentences(task: str, sentences: list[str], reps: int, bar, engines=tuple(ENGINES),
                    warmup_n: int = 128) -> dict:
    """``embed`` or ``token_embed`` throughput on MiniLM: the ``engines``
    configurations and sentence-transformers, interleaved. For ``embed`` also
    FLOPs, the worker's matmul rate and the fraction achieved."""
    import torch

    from scripts.validation.models import minilm_path

    model = minilm_path()
    engine_kwargs = {"pooler_config": {"task": "token_embed"}} if task == "token_embed" else {}
    llms, infos = open_engines(engines, model, **engine_kwargs)
    try:
        threads = next((i["torch_threads"] for i in infos.values() if "torch_threads" in i), None)
        st_model = _st_model(model, threads)
        counts = token_counts(model, sentences)

        def engine_call(llm, items):
            if task == "embed":
                return lambda: llm.embed(items, use_tqdm=False)
            return lambda: llm.encode(items, pooling_task="token_embed", use_tqdm=False)

        def st_call(items):
            if task == "embed":
                return lambda: st_model.encode(items, batch_size=64, convert_to_numpy=True)

            def token_embed():
                out = st_model.encode(items, batch_size=64, output_value="token_embeddings")
                return [torch.nn.functional.normalize(t, dim=-1) for t in out]
            return token_embed

        calls = {name: engine_call(llm, sentences) for name, llm in llms.items()}
        calls[ST] = st_call(sentences)
        warm = sentences[:warmup_n]
        warmups = {name: engine_call(llm, warm) for name, llm in llms.items()}
        warmups[ST] = st_call(warm)
        result = {"task": task, "model": "all-MiniLM-L6-v2", "sentences": len(sentences),
                  "tokens": sum(counts), "engines": infos, "st_threads": torch.get_num_threads()}
        if task == "embed" and llms:
            probe_llm = llms.get("v1") or next(iter(llms.values()))
            (before,) = probe_llm.collective_rpc(matmul_rate)[:1]
        times = interleaved(calls, reps, warmups, bar)
        result["runs"] = rates(times, len(sentences), sum(counts))
        result["ratios"] = ratios({n: r["per_s"] for n, r in result["runs"].items()})
        result["memory"] = {name: llm.collective_rpc(peak_memory)[0] for name, llm in llms.items()}
        result["memory"][ST] = _st_memory(model, sentences, threads, task)
        if task == "embed" and llms:
            (after,) = probe_llm.collective_rpc(matmul_rate)[:1]
            with open(model / "config.json") as f:
                config = json.load(f)
            flops = minilm_flops(counts, config)
            peak = max(before["tflops"], after["tflops"])
            result["flops"] = {
                "model_tflop": flops / 1e12,
                "formula": "sum over sentences of L*(n*(8d^2+4df)+4n^2d); L=6, d=384, f=1536, n=tokens",
                "matmul_tflops": peak, "matmul_runs": [before, after],
                "achieved": {n: {"tflops": flops / 1e12 / r["median_s"],
                                 "fraction_of_matmul": flops / 1e12 / r["median_s"] / peak}
                             for n, r in result["runs"].items()},
            }
        return result
    finally:
        close_engines(llms)


def _st_model(model_dir, threads: int | None):
    """sentence-transformers on the CPU, with the engines' worker thread
    count when known (same compute budget per forward)."""
    import torch
    from sentence_transformers import SentenceTransformer

    if threads:
        torch.set_num_threads(threads)
    return SentenceTransformer(str(model_dir), device="cpu")


def fit_growth(doc_counts: list[int], seconds: list[float]) -> dict:
    """How the time of a score call grows with its document count N:
    ``loglog_slope`` (all N) and ``loglog_slope_large`` (N >= 64, where the
    fixed per-call cost no longer dominates; 1 means linear), and the linear
    fit ``t = fixed_s + per_doc_s * N``, least squares of the relative
    residuals (each N counts alike), with its largest relative residual and
    R^2."""
    import numpy as np

    n, t = np.asarray(doc_counts, dtype=float), np.asarray(seconds, dtype=float)
    out = {"loglog_slope": float(np.polyfit(np.log(n), np.log(t), 1)[0])}
    large = n >= 64
    if large.sum() >= 2:
        out["loglog_slope_large"] = float(np.polyfit(np.log(n[large]), np.log(t[large]), 1)[0])
    per_doc, fixed = np.polyfit(n, t, 1, w=1 / t)
    pred = fixed + per_doc * n
    ss_res, ss_tot = float(((t - pred) ** 2).sum()), float(((t - t.mean()) ** 2).sum())
    out.update(per_doc_s=float(per_doc), fixed_s=float(fixed), r2=1 - ss_res / ss_tot if ss_tot else 1.0,
               max_rel_residual=float(np.abs(pred / t - 1).max()))
    return out


def bench_colbert(sentences: list[str], doc_counts: list[int], reps: int, bar,
                  engines=tuple(ENGINES)) -> dict:
    """``LLM.score`` with a tiny random ``HF_ColBERT``: 1 query and N
    documents, the ``engines`` configurations interleaved; documents per
    second, query encodings per call, growth with N."""
    from scripts.validation.engine import count_late_interaction_requests, late_interaction_counts
    from scripts.validation.models import make_tiny_colbert

    model = make_tiny_colbert(REPO / ".build" / "models" / "tiny-hf-colbert")
    query, docs = sentences[0], sentences[1:]
    llms, infos = open_engines(engines, model)
    try:
        calls = {(name, n): (lambda llm=llm, n=n: llm.score(query, docs[:n], use_tqdm=False))
                 for n in doc_counts for name, llm in llms.items()}
        for llm in llms.values():
            llm.score(query, docs[:8], use_tqdm=False)  # warm-up
            llm.collective_rpc(count_late_interaction_requests)
        times = interleaved(calls, reps, {k: (lambda: None) for k in calls}, bar)
        result = {"task": "late-interaction score", "model": "tiny HF_ColBERT (random, 2 layers, dim 32)",
                  "doc_counts": list(doc_counts), "engines": infos, "per_engine": {}}
        for name, llm in llms.items():
            (counts,) = {json.dumps(c, sort_keys=True) for c in llm.collective_rpc(late_interaction_counts)}
            counts = json.loads(counts)
            n_calls = reps * len(doc_counts)
            runs = rates({str(n): times[(name, n)] for n in doc_counts}, 1)
            for n in doc_counts:
                runs[str(n)]["docs_per_s"] = n / runs[str(n)]["median_s"]
            result["per_engine"][name] = {
                "runs": runs,
                "query_encodings_per_call": counts.get("cache_query", 0) / n_calls,
                "documents_scored_per_call": counts.get("score_doc", 0) / n_calls,
                "growth": fit_growth(list(doc_counts), [runs[str(n)]["median_s"] for n in doc_counts]),
            }
        return result
    finally:
        close_engines(llms)


def bench_overhead(threads: int | None, sizes, budget: float) -> dict:
    """``scripts.bench.pool_overhead`` in a process of its own (it patches torch as
    a CPU worker does), with the engines' worker thread count."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "overhead.json")
        cmd = [sys.executable, "-m", "scripts.bench.pool_overhead", "--json", path, "--budget", str(budget),
               "--sizes", ",".join(map(str, sizes))]
        if threads:
            cmd += ["--threads", str(threads)]
        subprocess.run(cmd, cwd=REPO, check=True)
        with open(path) as f:
            return json.load(f)


def worker_threads(results: dict) -> int:
    """The torch thread count of the engines' workers (the first engine that
    opened); without engines, the CPU worker's default on this machine: one
    core is left to the engine core (1 on 2 cores)."""
    for key in ("embed", "token_embed", "colbert"):
        for info in (results.get(key) or {}).get("engines", {}).values():
            if "torch_threads" in info:
                return int(info["torch_threads"])
    return max(1, (os.cpu_count() or 2) - 1)


# --------------------------------------------------------------------------- main

def main(argv=None) -> int:
    """``make bench``: run the sections, write the reports, print the table
    last. Exit status 1 when a section failed (the others still report)."""
    parser = argparse.ArgumentParser(prog="python -m scripts.bench", description=__doc__.split("\n")[0])
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
    sections = [s for s in args.sections.split(",") if s]
    if unknown := set(sections) - set(SECTIONS):
        parser.error(f"unknown sections {sorted(unknown)}")
    engines = [e for e in args.engines.split(",") if e]
    if unknown := set(engines) - set(ENGINES):
        parser.error(f"unknown engines {sorted(unknown)}")
    if args.quick:
        args.limit, args.reps, args.colbert_reps, args.overhead_budget = args.limit or 256, 1, 1, 0.1

    started = time.perf_counter()
    from scripts.validation.engine import quiet_vllm

    quiet_vllm("bench")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    # vLLM decides HAS_TRITON at import: with the interpreter on in this
    # process, the MRV2-interpreter engines validate here; each engine process
    # gets its own TRITON_INTERPRET (open_engine).
    os.environ["TRITON_INTERPRET"] = "1"
    from tqdm import tqdm

    from scripts.bench.report import report
    from scripts.validation.models import sts_test

    sentences = sts_test().sentences[: args.limit]
    doc_counts = [n for n in DOC_COUNTS if n < len(sentences) and (not args.quick or n <= 64)]
    sizes = OVERHEAD_SIZES if not args.quick else (1, 4, 16)
    results: dict = {"machine": machine(), "config": {
        "reps": args.reps, "colbert_reps": args.colbert_reps, "sentences": len(sentences), "doc_counts": doc_counts, "sections": sections,
        "engines": {e: ENGINES[e] for e in engines}, "gpu_memory_utilization": GPU_MEMORY_UTILIZATION, "quick": args.quick}}
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
