"""``make bench``, section ``serve``: the OpenAI-compatible server under load.

1. ``serve_load``: all-MiniLM-L6-v2 served twice at once, by vLLM's default
   runner (MRV2) and by V1 (``VLLM_USE_V2_MODEL_RUNNER=0``), each server's
   worker asked which runner it built; upstream's own client, ``vllm bench
   serve --backend openai-embeddings`` (``/v1/embeddings``), sends 2,000
   requests of mixed lengths made of STS-B sentences
   (``scripts.validation.models.mixed_length_texts``, a ``custom`` dataset) from 64
   concurrent clients, as fast as the server takes them. One warm-up run
   each, then ``reps`` rounds alternating the servers (the order rotating);
   median requests/s and p50/p99 end-to-end latency, and MRV2/V1.
2. ``serve_memory``: a tiny ColBERT server (MRV2), 5,000 late-interaction
   ``/rerank`` requests (1 query, 4 documents each) from 16 clients, 100 of
   them hanging up at a random point of their request; the resident memory
   of the server's processes (API server, engine core, worker) sampled
   every 500 requests after a warm-up of 500, then in the worker (through
   ``WorkerProbe.probe_memory``) its live Python objects and its resident
   memory after ``gc.collect()`` and the allocator's release of freed memory (what it
   really uses, without the freed heap the allocator keeps); and the
   worker's late-interaction state at the end (no cached query, no pending
   document).

    python -m scripts.bench --sections serve [--reps N] [--quick]
"""

from __future__ import annotations

import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from scripts.bench.engines import TINY_COLBERT
from scripts.common.paths import REPO, child_pythonpath

LOAD_REQUESTS, LOAD_CONCURRENCY = 2000, 64
MEMORY_REQUESTS, MEMORY_DISCONNECTS, MEMORY_CONCURRENCY, MEMORY_SAMPLE_EVERY = 5000, 100, 16, 500
EMPTY_STATE = {"cached_queries": [], "query_uses": {}, "pending_docs": 0}


def server_env() -> dict:
    """The servers' environment: this process's without ``TRITON_INTERPRET``
    (``scripts.bench.engines.bench_environ`` sets it in the bench process), so MRV2 runs as users
    get it (``scripts.validation.engine.expected_input_preparation``)."""
    return {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}


def write_dataset(path: Path, texts: list[str]) -> Path:
    """``vllm bench serve``'s ``custom`` dataset: one JSON line per request."""
    with open(path, "w") as f:
        for text in texts:
            f.write(json.dumps({"prompt": text}) + "\n")
    return path


def vllm_bench_serve(server, dataset: Path, requests: int, concurrency: int, out: Path) -> dict:
    """Run upstream's ``vllm bench serve`` (openai-embeddings backend) against
    ``server`` with ``dataset``; return its saved result (``request_throughput``
    in requests/s, ``p50_e2el_ms``/``p99_e2el_ms``, ``completed``, ``failed``...).
    Its output goes to the log (``vllm bench serve`` prints its own table)."""
    from scripts.validation.server import vllm_executable

    cmd = [vllm_executable(), "bench", "serve", "--backend", "openai-embeddings", "--endpoint", "/v1/embeddings",
           "--host", "127.0.0.1", "--port", str(server.port), "--model", server.served_model(),
           "--dataset-name", "custom", "--dataset-path", str(dataset), "--custom-output-len", "1",
           "--skip-chat-template", "--num-prompts", str(requests), "--max-concurrency", str(concurrency),
           "--request-rate", "inf", "--percentile-metrics", "e2el", "--metric-percentiles", "50,99",
           "--disable-tqdm", "--save-result", "--result-dir", str(out.parent), "--result-filename", out.name]
    subprocess.run(cmd, check=True, stdin=subprocess.DEVNULL)
    result = json.loads(out.read_text())
    out.unlink()
    return {k: result.get(k) for k in ("request_throughput", "p50_e2el_ms", "p99_e2el_ms", "mean_e2el_ms",
                                       "completed", "failed", "duration", "total_input_tokens")}


def serve_load(sentences: list[str], reps: int, bar=None, requests: int = LOAD_REQUESTS,
               concurrency: int = LOAD_CONCURRENCY) -> dict:
    """Section 1 (see the module docstring): per server configuration
    (``mrv2``: vLLM's default runner, ``v1``), the runner its worker built
    and each round's figures; medians and the MRV2/V1 ratios."""
    from scripts.validation.models import minilm_path, mixed_length_texts
    from scripts.validation.server import VllmServer

    texts = mixed_length_texts(sentences, requests)
    env = server_env()
    servers = {"mrv2": VllmServer(minilm_path(), name="bench-serve-mrv2", runner="default", env=env),
               "v1": VllmServer(minilm_path(), name="bench-serve-v1", runner="v1", env=env)}
    result = {"model": "all-MiniLM-L6-v2", "requests": requests, "concurrency": concurrency,
              "client": "vllm bench serve --backend openai-embeddings (custom dataset, request rate inf)",
              "servers": {}, "rounds": {name: [] for name in servers}}
    try:
        for s in servers.values():
            s.launch()
        for name, s in servers.items():
            s.wait_ready()
            result["servers"][name] = {"runner": s.runner(), "startup_s": s.startup_seconds, "log": str(s.log)}
            if result["servers"][name]["runner"] == "MRV2":
                result["servers"][name]["input_preparation"] = s.input_preparation()
        with tempfile.TemporaryDirectory() as tmp:
            dataset = write_dataset(Path(tmp) / "sts-mixed.jsonl", texts)
            warm = write_dataset(Path(tmp) / "warm.jsonl", texts[:128])
            for name, s in servers.items():
                vllm_bench_serve(s, warm, 128, concurrency, Path(tmp) / f"warm-{name}.json")
            names = list(servers)
            for rep in range(reps):
                for name in names[rep % len(names):] + names[: rep % len(names)]:
                    if bar is not None:
                        bar.set_postfix_str(f"serve {name}")
                    result["rounds"][name].append(
                        vllm_bench_serve(servers[name], dataset, requests, concurrency, Path(tmp) / f"{name}.json"))
                    if bar is not None:
                        bar.update(1)
    finally:
        for s in servers.values():
            s.stop()
    med = {name: {k: statistics.median(r[k] for r in rounds)
                  for k in ("request_throughput", "p50_e2el_ms", "p99_e2el_ms")}
           for name, rounds in result["rounds"].items()}
    for name, rounds in result["rounds"].items():
        med[name]["completed"] = sum(r["completed"] for r in rounds)
        med[name]["failed"] = sum(r.get("failed") or 0 for r in rounds)
    result["median"] = med
    result["ratios"] = {"mrv2/v1 requests/s": med["mrv2"]["request_throughput"] / med["v1"]["request_throughput"],
                        "mrv2/v1 p50": med["mrv2"]["p50_e2el_ms"] / med["v1"]["p50_e2el_ms"],
                        "mrv2/v1 p99": med["mrv2"]["p99_e2el_ms"] / med["v1"]["p99_e2el_ms"]}
    return result


def _hang_up(port: int, body: bytes, delay: float) -> None:
    """Send a ``/rerank`` request and close the connection ``delay`` s later."""
    head = (f"POST /rerank HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        s.sendall(head + body)
        time.sleep(delay)


def serve_memory(sentences: list[str], bar=None, requests: int = MEMORY_REQUESTS,
                 disconnects: int = MEMORY_DISCONNECTS, concurrency: int = MEMORY_CONCURRENCY,
                 sample_every: int = MEMORY_SAMPLE_EVERY, runner: str = "default") -> dict:
    """Section 2 (see the module docstring): resident memory (MiB) of the
    server's processes after every ``sample_every`` requests (the first
    sample after a warm-up of ``sample_every``), its growth from the first
    to the last sample and the spread of the samples, the answers that
    were not 200, and the worker's late-interaction state at the end."""
    import requests as http

    from scripts.validation.models import make_tiny_colbert
    from scripts.validation.server import VllmServer

    model = make_tiny_colbert(TINY_COLBERT)
    rng = random.Random(0)
    hang_ups = set(rng.sample(range(sample_every, requests), disconnects))
    with VllmServer(model, name=f"bench-serve-memory-{runner}", runner=runner, env=server_env()) as server:
        name = server.served_model()
        runner = server.runner()
        url, port = server.url("/rerank"), server.port
        local = threading.local()
        bad = []

        def one(i):
            docs = [sentences[(7 * i + k) % len(sentences)] for k in range(1, 5)]
            body = {"model": name, "query": sentences[(7 * i) % len(sentences)], "documents": docs}
            if i in hang_ups:
                _hang_up(port, json.dumps(body).encode(), random.Random(i).uniform(0, 0.5))
                return
            session = getattr(local, "session", None) or http.Session()
            local.session = session
            r = session.post(url, json=body, timeout=600)
            if r.status_code != 200:
                bad.append((i, r.status_code, r.text[:200]))

        def run(lo, hi):
            with ThreadPoolExecutor(concurrency) as pool:
                list(pool.map(one, range(lo, hi)))
            if bar is not None:
                bar.update(1)

        def sample(n):
            by_process = {k: v / 2**20 for k, v in server.rss_by_process().items()}
            samples.append((n, sum(by_process.values())))
            per_process.append((n, by_process))
            worker = server.worker_memory()
            worker_samples.append((n, worker["python_objects"], worker["rss"] / 2**20,
                                   worker["rss_after_release"] / 2**20))

        samples, per_process, worker_samples = [], [], []
        run(0, sample_every)  # warm-up
        sample(sample_every)
        for lo in range(sample_every, requests, sample_every):
            if bar is not None:
                bar.set_postfix_str(f"memory {lo}/{requests}")
            run(lo, min(lo + sample_every, requests))
            sample(min(lo + sample_every, requests))
        deadline = time.monotonic() + 60
        while (state := server.late_interaction_state()) != EMPTY_STATE and time.monotonic() < deadline:
            time.sleep(1)
    rss = [m for _, m in samples]
    return {"model": "tiny HF_ColBERT (random, 2 layers, dim 32)", "runner": runner, "requests": requests,
            "disconnects": disconnects, "concurrency": concurrency, "samples_mib": samples,
            "per_process_mib": per_process,
            "worker_samples": [{"requests": n, "python_objects": o, "rss_mib": r, "rss_after_release_mib": t}
                               for n, o, r, t in worker_samples],
            "worker_python_objects_growth": worker_samples[-1][1] - worker_samples[0][1],
            "worker_released_growth_mib": worker_samples[-1][3] - worker_samples[0][3],
            "growth_by_process_mib": {k: per_process[-1][1].get(k, 0) - v for k, v in per_process[0][1].items()},
            "growth_mib": rss[-1] - rss[0], "spread_mib": max(rss) - min(rss),
            "growth_after_half_mib": rss[-1] - rss[len(rss) // 2],
            "not_200": len(bad), "not_200_examples": bad[:5], "final_state": state,
            "state_clean": state == EMPTY_STATE}


def bench_serve(sentences: list[str], reps: int, bar=None, quick: bool = False) -> dict:
    """Both parts of the ``serve`` section (``quick``: 256 load requests, 1
    round, 1,000 memory requests with 20 disconnects)."""
    if quick:
        return {"load": serve_load(sentences, 1, bar, requests=256),
                "memory": serve_memory(sentences, bar, requests=1000, disconnects=20, sample_every=250)}
    return {"load": serve_load(sentences, reps, bar), "memory": serve_memory(sentences, bar)}


def bar_steps(reps: int, quick: bool) -> int:
    """Progress-bar steps of ``bench_serve``: the load rounds plus the memory batches."""
    if quick:
        return 2 * 1 + 1000 // 250
    return 2 * reps + MEMORY_REQUESTS // MEMORY_SAMPLE_EVERY


def summary_lines(sec: dict) -> list[str]:
    """Markdown lines of the section for ``scripts.bench.report``."""
    out = []
    load = sec.get("load")
    if load:
        med = load["median"]
        runners = {n: s["runner"] + (f", {s['input_preparation']}" if "input_preparation" in s else "")
                   for n, s in load["servers"].items()}
        rows = [f"| {n} ({runners[n]}) | {m['request_throughput']:.1f} | {m['p50_e2el_ms']:.0f} | "
                f"{m['p99_e2el_ms']:.0f} | {m['completed']} | {m['failed']} |" for n, m in med.items()]
        r = load["ratios"]
        out += ["", f"server load: {load['requests']} /v1/embeddings requests of mixed lengths (STS-B), "
                    f"{load['concurrency']} concurrent clients, `vllm bench serve`, median of "
                    f"{len(next(iter(load['rounds'].values())))} round(s):",
                "| server | requests/s | p50 ms | p99 ms | completed | failed |", "|---|---|---|---|---|---|",
                *rows,
                f"MRV2/V1: requests/s {r['mrv2/v1 requests/s']:.2f}, p50 {r['mrv2/v1 p50']:.2f}, "
                f"p99 {r['mrv2/v1 p99']:.2f}"]
    mem = sec.get("memory")
    if mem:
        samples = ", ".join(f"{n}: {m:.0f}" for n, m in mem["samples_mib"])
        out += ["", f"server memory ({mem['runner']}, {mem['model']}): {mem['requests']} late-interaction /rerank "
                    f"requests, {mem['disconnects']} clients hanging up mid-request; resident MiB after N requests: "
                    f"{samples}; growth {mem['growth_mib']:+.1f} MiB (second half {mem['growth_after_half_mib']:+.1f}), "
                    f"spread {mem['spread_mib']:.1f} MiB (by process: "
                    + ", ".join(f"{k} {v:+.1f}" for k, v in mem.get("growth_by_process_mib", {}).items())
                    + f"); in the worker after gc and the allocator's release (memory in use): "
                    f"{mem['worker_released_growth_mib']:+.1f} MiB, Python objects "
                    f"{mem['worker_python_objects_growth']:+d}; answers not 200: {mem['not_200']}; worker state at the end: "
                    f"{'clean' if mem['state_clean'] else mem['final_state']}"]
    return out


if __name__ == "__main__":
    sys.exit(subprocess.call([sys.executable, "-m", "scripts.bench", "--sections", "serve", *sys.argv[1:]],
                             cwd=REPO, env={**os.environ, "PYTHONPATH": child_pythonpath()}))
