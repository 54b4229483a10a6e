"""``make bench``, section ``serve``: the OpenAI-compatible server under load.

1. ``serve_load``: all-MiniLM-L6-v2 served three times at once (with
   ``--line``, MRV2 and V1 of each line), by vLLM's
   default runner (MRV2), by V1 (``VLLM_USE_V2_MODEL_RUNNER=0``), each
   server's worker asked which runner it built, and by infinity-emb's torch
   engine (``InfinityServer``, its own venv); upstream's own client, ``vllm bench
   serve --backend openai-embeddings`` (``/v1/embeddings``), sends 2,000
   requests of mixed lengths made of STS-B sentences
   (``scripts.validation.checkpoints.models.mixed_length_texts``, a ``custom`` dataset) from 64
   concurrent clients, as fast as the server takes them. One warm-up run
   each, then ``reps`` rounds alternating the servers (the order rotating);
   median requests/s, p50/p99 end-to-end latency, CPU seconds per 1,000
   requests and peak RSS of all each server's processes, MRV2/V1 and
   MRV2/infinity.
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
from scripts.bench.sections import in_tree_line
from scripts.common.paths import REPO, child_pythonpath
from scripts.validation.server import LOGS, ServerError, VllmServer, free_port, vllm_executable

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


class InfinityServer(VllmServer):
    """infinity-emb's server, ``infinity_emb v2`` with its torch engine on the
    CPU (fp32, BetterTransformer off: it needs optimum's, which the
    infinity-emb venv does not have), serving ``model`` under the name of
    its path (as ``vllm serve`` does, so that ``vllm bench serve --model``
    names both) at ``/v1/embeddings`` (``--url-prefix /v1``), its other
    settings infinity's defaults (batch size 32, torch's threads: all
    cores). Started and stopped as ``scripts.validation.server.VllmServer``
    (its life cycle is inherited; only the command differs): a process group of its own,
    output in ``.build/logs/server-<name>.log``, ready when ``GET /health``
    answers 200. ``executable``: the venv's ``infinity_emb`` script."""

    def __init__(self, executable: str, model, name: str = "bench-serve-infinity", start_timeout: float = 900.0):
        self.model, self.name, self.port = str(model), name, free_port()
        self.log = LOGS / f"server-{name}.log"
        self.start_timeout = start_timeout
        self.env = {**server_env(), "HF_HUB_OFFLINE": "1", "INFINITY_ANONYMOUS_USAGE_STATS": "0", "DO_NOT_TRACK": "1"}
        self.env.pop("VLLM_LOGGING_CONFIG_PATH", None)
        self.cmd = [executable, "v2", "--model-id", self.model, "--served-model-name", self.model, "--engine", "torch",
                    "--device", "cpu", "--dtype", "float32", "--no-bettertransformer", "--host", "127.0.0.1",
                    "--port", str(self.port), "--url-prefix", "/v1"]
        self.proc = None
        self._log_file = None
        self._started = 0.0
        self.startup_seconds = None

    def version(self) -> str:
        """infinity-emb's version in the server's venv."""
        out = subprocess.run([str(Path(self.cmd[0]).with_name("python")), "-c",
                              "from importlib.metadata import version; print(version('infinity_emb'))"],
                             capture_output=True, text=True, env=self.env)
        return out.stdout.strip() or "unknown"


def _measured_round(server, dataset: Path, requests: int, concurrency: int, out: Path) -> dict:
    """One ``vllm_bench_serve`` round with the CPU seconds of the server's
    whole process tree (``scripts.bench.proctree``; read 1.1 s after the
    client finished, so that polling after the load counts) added:
    ``cpu_s`` and ``cpu_s_per_1000``."""
    from scripts.bench import proctree
    from scripts.bench.systems import SETTLE_S

    before = proctree.cpu_sample(server.proc.pid, "api server")
    result = vllm_bench_serve(server, dataset, requests, concurrency, out)
    time.sleep(SETTLE_S)
    cpu = proctree.cpu_delta(before, proctree.cpu_sample(server.proc.pid, "api server"))
    result.update(cpu_s=cpu["total"], cpu_by_process=cpu["by_process"],
                  cpu_s_per_1000=cpu["total"] / max(1, result.get("completed") or requests) * 1000)
    return result


def vllm_servers(model, lines=None, engines=("mrv2", "v1")) -> dict[str, VllmServer]:
    """The vLLM servers of the load section: ``mrv2`` (vLLM's default runner)
    and ``v1`` of the bench's own vLLM, or, with several ``lines``
    (``scripts.bench.sections.Line``), ``mrv2@NAME`` and ``v1@NAME`` of each,
    started with that line's venv's ``vllm`` command and its hosts'
    ``PYTHONPATH`` (the repository's ``scripts`` alone: vLLM from the venv).
    Only the ``engines`` asked for (``--engines``), and ``v1`` only where the
    line's vLLM has V1 (``Line.runners``)."""
    env = server_env()
    if not lines or len(lines) == 1:
        runners = lines[0].runners if lines else in_tree_line().runners
        single = {"mrv2": VllmServer(model, name="bench-serve-mrv2", runner="default", env=env)}
        if "v1" in engines and "V1" in runners:
            single["v1"] = VllmServer(model, name="bench-serve-v1", runner="v1", env=env)
        return single
    servers = {}
    for line in lines:
        for engine, runner in (("mrv2", "default"), ("v1", "v1")):
            if engine not in engines or (engine == "v1" and "V1" not in line.runners):
                continue
            name = f"{engine}@{line.name}"
            servers[name] = VllmServer(model, name=f"bench-serve-{name}", runner=runner,
                                       executable=str(Path(line.python).parent / "vllm"),
                                       env={**env, "PYTHONPATH": line.pythonpath})
    return servers


def load_ratios(med: dict, lines=None) -> dict:
    """Ratios of the load section's medians (``med``: server name to its
    ``request_throughput``, ``p50_e2el_ms``, ``p99_e2el_ms``): ``mrv2/v1``
    and ``mrv2/infinity``; with several ``lines``, ``mrv2@L/v1@L`` per line
    and each later line's ``mrv2@L``/``v1@L`` to the first line's. Keys
    ``"<a>/<b> requests/s"``, ``"<a>/<b> p50"``, ``"<a>/<b> p99"``."""
    pairs = [("mrv2", "v1"), ("mrv2", "infinity")]
    if lines and len(lines) > 1:
        first = lines[0].name
        pairs = [(f"mrv2@{line.name}", f"v1@{line.name}") for line in lines]
        pairs += [(f"mrv2@{lines[0].name}", "infinity")]
        pairs += [(f"{e}@{line.name}", f"{e}@{first}") for line in lines[1:] for e in ("mrv2", "v1")]
    out = {}
    for a, b in pairs:
        if a in med and b in med:
            out.update({f"{a}/{b} requests/s": med[a]["request_throughput"] / med[b]["request_throughput"],
                        f"{a}/{b} p50": med[a]["p50_e2el_ms"] / med[b]["p50_e2el_ms"],
                        f"{a}/{b} p99": med[a]["p99_e2el_ms"] / med[b]["p99_e2el_ms"]})
    return out


def serve_load(sentences: list[str], reps: int, bar=None, requests: int = LOAD_REQUESTS,
               concurrency: int = LOAD_CONCURRENCY, infinity: str | None = None, lines=None,
               engines=("mrv2", "v1")) -> dict:
    """Section 1 (see the module docstring): per server (``vllm_servers``:
    MRV2, vLLM's default runner, and V1, of each line; and ``infinity`` when
    ``infinity`` names its ``infinity_emb`` script), what ran and each
    round's figures, with the CPU seconds of the server's processes
    (``_measured_round``) and their peak RSS at the end
    (``proctree.peak_rss``); medians and ``load_ratios``. A server that
    fails to start is recorded (``{"error": ...}``) and left out."""
    from scripts.bench import proctree
    from scripts.validation.checkpoints.models import minilm_path, mixed_length_texts
    texts = mixed_length_texts(sentences, requests)
    servers = vllm_servers(minilm_path(), lines, engines)
    result = {"model": "all-MiniLM-L6-v2", "requests": requests, "concurrency": concurrency,
              "client": "vllm bench serve --backend openai-embeddings (custom dataset, request rate inf)",
              "servers": {}, "rounds": {}}
    if infinity:
        if Path(infinity).exists():
            servers["infinity"] = InfinityServer(infinity, minilm_path())
        else:
            result["servers"]["infinity"] = {"error": f"{infinity} does not exist: make bench-env"}
    try:
        for s in servers.values():
            s.launch()
        for name, s in list(servers.items()):
            try:
                s.wait_ready()
            except ServerError as e:
                result["servers"][name] = {"error": str(e).splitlines()[0], "log": str(s.log)}
                del servers[name]
                continue
            if isinstance(s, InfinityServer):
                result["servers"][name] = {"runner": f"infinity-emb {s.version()}, torch engine",
                                           "startup_s": s.startup_seconds, "log": str(s.log)}
                continue
            result["servers"][name] = {"runner": s.runner(), "startup_s": s.startup_seconds, "log": str(s.log)}
            if result["servers"][name]["runner"] == "MRV2":
                result["servers"][name]["input_preparation"] = s.input_preparation()
        result["rounds"] = {name: [] for name in servers}
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
                        _measured_round(servers[name], dataset, requests, concurrency, Path(tmp) / f"{name}.json"))
                    if bar is not None:
                        bar.update(1)
        for name, s in servers.items():
            result["servers"][name]["peak_rss"] = proctree.peak_rss(s.proc.pid, "api server")
    finally:
        for s in servers.values():
            s.stop()
    med = {name: {k: statistics.median(r[k] for r in rounds)
                  for k in ("request_throughput", "p50_e2el_ms", "p99_e2el_ms", "cpu_s_per_1000")}
           for name, rounds in result["rounds"].items()}
    for name, rounds in result["rounds"].items():
        med[name]["completed"] = sum(r["completed"] for r in rounds)
        med[name]["failed"] = sum(r.get("failed") or 0 for r in rounds)
    result["median"] = med
    result["ratios"] = load_ratios(med, lines)
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

    from scripts.validation.checkpoints.zoo import make_tiny_colbert

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


def bench_serve(sentences: list[str], reps: int, bar=None, quick: bool = False, infinity: str | None = None,
                lines=None, engines=("mrv2", "v1")) -> dict:
    """Both parts of the ``serve`` section (``quick``: 256 load requests, 1
    round, 1,000 memory requests with 20 disconnects); ``infinity``: the
    ``infinity_emb`` script of infinity-emb's venv (None: without it);
    ``lines``: the load's servers of each line (``vllm_servers``; the memory
    part runs on the bench's own vLLM); ``engines``: which of ``mrv2`` and
    ``v1`` serve (``vllm_servers``)."""
    if quick:
        return {"load": serve_load(sentences, 1, bar, requests=256, infinity=infinity, lines=lines,
                                   engines=engines),
                "memory": serve_memory(sentences, bar, requests=1000, disconnects=20, sample_every=250)}
    return {"load": serve_load(sentences, reps, bar, infinity=infinity, lines=lines, engines=engines),
            "memory": serve_memory(sentences, bar)}


def bar_steps(reps: int, quick: bool, infinity: bool = False, n_lines: int = 1) -> int:
    """Progress-bar steps of ``bench_serve``: the load rounds (MRV2 and V1
    of each line, and infinity-emb) plus the memory batches."""
    servers = 2 * n_lines + (1 if infinity else 0)
    if quick:
        return servers * 1 + 1000 // 250
    return servers * reps + MEMORY_REQUESTS // MEMORY_SAMPLE_EVERY


def summary_lines(sec: dict) -> list[str]:
    """Markdown lines of the section for ``scripts.bench.report``."""
    out = []
    load = sec.get("load")
    if load:
        med = load["median"]
        servers = load["servers"]
        runners = {n: s["runner"] + (f", {s['input_preparation']}" if "input_preparation" in s else "")
                   for n, s in servers.items() if "runner" in s}
        rows = [f"| {n} ({runners[n]}) | {m['request_throughput']:.1f} | {m['p50_e2el_ms']:.0f} | "
                f"{m['p99_e2el_ms']:.0f} | {m['cpu_s_per_1000']:.1f} | "
                f"{servers[n].get('peak_rss', {}).get('total_mib', 0):,.0f} | {m['completed']} | {m['failed']} |"
                for n, m in med.items()]
        rows += [f"| {n} | not measured: {s['error'][:160]} | | | | | | |" for n, s in servers.items() if "error" in s]
        r = load["ratios"]
        rounds = len(next(iter(load["rounds"].values()), []))
        out += ["", f"server load: {load['requests']} /v1/embeddings requests of mixed lengths (STS-B), "
                    f"{load['concurrency']} concurrent clients, `vllm bench serve`, median of {rounds} round(s); "
                    "CPU-s and peak RSS of all the server's processes:",
                "| server | requests/s | p50 ms | p99 ms | CPU-s per 1,000 requests | peak RSS MiB | completed | "
                "failed |", "|---|---|---|---|---|---|---|---|", *rows]
        for key in r:
            if key.endswith(" requests/s"):
                pair = key.removesuffix(" requests/s")
                out.append(f"{pair}: requests/s {r[key]:.2f}, p50 {r[f'{pair} p50']:.2f}, "
                           f"p99 {r[f'{pair} p99']:.2f}")
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
