"""The measuring sections of ``make bench`` (``scripts.bench.cli`` runs them):
``embed`` / ``token_embed`` throughput (``bench_sentences``), ColBERT scoring
and how its cost grows with the documents (``bench_colbert``, ``fit_growth``),
and the pooling overhead micro-benchmark in a process of its own
(``bench_overhead``). The ``serve`` section lives in ``scripts.bench.server``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

from scripts.bench.engines import ENGINES, ST, TINY_COLBERT, open_engines, st_model
from scripts.bench.machine import matmul_rate, minilm_flops, token_counts
from scripts.bench.memory import peak_memory, st_memory
from scripts.bench.timing import interleaved, rates, ratios
from scripts.common.paths import REPO


def bench_sentences(task: str, sentences: list[str], reps: int, bar, engines=tuple(ENGINES),
                    warmup_n: int = 128) -> dict:
    """``embed`` or ``token_embed`` throughput on MiniLM: the ``engines``
    configurations and sentence-transformers, interleaved (``reps`` rounds
    after a warm-up on the first ``warmup_n`` sentences; ``bar`` a tqdm bar).
    Returns the engines' infos, ``runs`` (``rates``: sentences and tokens per
    second), ``ratios`` and peak ``memory``; for ``embed`` also ``flops``
    (the model's TFLOP, the worker's matmul rate before and after, and each
    system's achieved TFLOP/s and fraction of it)."""
    import torch

    from scripts.validation.models import minilm_path

    model = minilm_path()
    engine_kwargs = {"pooler_config": {"task": "token_embed"}} if task == "token_embed" else {}
    with open_engines(engines, model, **engine_kwargs) as (llms, infos):
        threads = next((i["torch_threads"] for i in infos.values() if "torch_threads" in i), None)
        st = st_model(model, threads)
        counts = token_counts(model, sentences)

        def engine_call(llm, items):
            if task == "embed":
                return lambda: llm.embed(items, use_tqdm=False)
            return lambda: llm.encode(items, pooling_task="token_embed", use_tqdm=False)

        def st_call(items):
            if task == "embed":
                return lambda: st.encode(items, batch_size=64, convert_to_numpy=True)

            def token_embed():
                out = st.encode(items, batch_size=64, output_value="token_embeddings")
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
        result["memory"][ST] = st_memory(model, sentences, threads, task)
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
    documents, the ``engines`` configurations interleaved; per engine,
    documents per second for each N, query encodings and documents scored
    per call (counted in the worker), growth with N (``fit_growth``)."""
    from scripts.validation.engine import count_late_interaction_requests, late_interaction_counts
    from scripts.validation.models import make_tiny_colbert

    model = make_tiny_colbert(TINY_COLBERT)
    query, docs = sentences[0], sentences[1:]
    with open_engines(engines, model) as (llms, infos):
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


def bench_overhead(threads: int | None, sizes, budget: float) -> dict:
    """``scripts.bench.pool_overhead`` in a process of its own (it patches
    torch as a CPU worker does) with ``threads`` torch threads, requests per
    step ``sizes`` and ``budget`` seconds of timing per row; its JSON result.
    ``CalledProcessError`` when it fails."""
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
