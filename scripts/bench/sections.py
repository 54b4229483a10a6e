"""The measuring sections of ``make bench`` (``scripts.bench.cli`` runs them):
``embed`` against the peers (``bench_embed``), ``token_embed``
(``bench_token_embed``), ColBERT scoring and how its cost grows with the
documents (``bench_colbert``, ``fit_growth``), and the pooling overhead
micro-benchmark in a process of its own (``bench_overhead``). The ``serve``
section lives in ``scripts.bench.server``.

Every system is a process of its own (``scripts.bench.systems``): each vLLM
engine configuration of each line (``Line``: an interpreter and what it
imports vLLM from) with its ``LLM`` front end, sentence-transformers, ONNX
Runtime and OpenVINO (``scripts.bench.peers``). ``Lineup`` says which
systems a section opens and with how many threads (``thread_env``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from scripts.bench.engines import ENGINES, ST
from scripts.bench.machine import minilm_flops, token_counts
from scripts.bench.systems import Spec, measure_rounds, open_systems, summarise
from scripts.common.paths import BUILD, REPO, child_pythonpath
from scripts.validation.engine import base_runners, rowwise_cosine

ORT, OPENVINO = "onnxruntime", "openvino"
PEERS = (ORT, OPENVINO)
PEER_LABELS = {ORT: "ONNX Runtime", OPENVINO: "OpenVINO"}
PEER_FACTORIES = {ORT: "scripts.bench.peers:OnnxRuntimeSystem", OPENVINO: "scripts.bench.peers:OpenVinoSystem"}
PEER_EXPORTS = {ORT: "onnx", OPENVINO: "openvino"}
ST_FACTORY = "scripts.bench.peers:SentenceTransformersSystem"
ENGINE_FACTORY = "scripts.bench.engines:EngineSystem"
# the peers' and sentence-transformers' embeddings against sentence-transformers' (issue 27)
COSINE_MIN = 0.9999998
# a PYTHONPATH holding only scripts/ (a symlink): a line's hosts import the vllm of their venv
SCRIPTS_ONLY = BUILD / "bench" / "pythonpath"


@dataclass(frozen=True)
class Line:
    """A line's installed vLLM: ``name`` (as in ``mrv2@NAME``), its
    interpreter ``python`` and the ``PYTHONPATH`` its hosts get
    (``pythonpath``: the repository for the in-tree ``vllm/``, or
    ``SCRIPTS_ONLY`` so that vLLM comes from the venv), and the model
    runners that vLLM has (``runners``: ``("MRV2",)`` from 0.34.0, which
    removed V1; ``scripts.validation.engine.base_runners``)."""

    name: str
    python: str
    pythonpath: str
    runners: tuple[str, ...] = ("MRV2", "V1")


_RUNNERS_PROBE = "from scripts.validation.engine import base_runners; print(','.join(base_runners()))"


def runners_of(python: str, pythonpath: str) -> tuple[str, ...]:
    """The model runners of the vLLM that ``python`` imports with ``pythonpath``
    (``base_runners``, called in that interpreter); ``subprocess.CalledProcessError``
    when it cannot run."""
    out = subprocess.run([python, "-c", _RUNNERS_PROBE], env={**os.environ, "PYTHONPATH": pythonpath},
                         capture_output=True, text=True, check=True).stdout
    return tuple(out.strip().split(","))


def in_tree_line() -> Line:
    """The line ``make bench`` runs on: the bench's interpreter with the
    ``vllm`` it imports (the line's applied tree under make) and the
    repository on the path (``scripts.common.paths.child_pythonpath``)."""
    return Line("in-tree", sys.executable, child_pythonpath(), base_runners())


def parse_line(text: str) -> Line:
    """``NAME=VENV`` (a venv directory or its ``bin/python``): that venv's
    installed vLLM, the repository's ``scripts`` alone on the path.
    ``ValueError`` without ``=`` or when the interpreter does not exist."""
    name, sep, where = text.partition("=")
    if not sep or not name or not where:
        raise ValueError(f"--line {text!r}: expected NAME=VENV, e.g. 0.32.0=.venv-0.32.0")
    path = Path(where)
    python = path / "bin" / "python" if path.is_dir() else path
    if not python.exists():
        raise ValueError(f"--line {text!r}: {python} does not exist (make that line's venv first)")
    SCRIPTS_ONLY.mkdir(parents=True, exist_ok=True)
    link = SCRIPTS_ONLY / "scripts"
    if not link.is_symlink():
        link.symlink_to(REPO / "scripts")
    return Line(name, str(python.absolute()), str(SCRIPTS_ONLY),
                runners_of(str(python.absolute()), str(SCRIPTS_ONLY)))


def thread_env(threads: int | None) -> dict:
    """The engine host's environment for ``threads`` worker threads: vLLM's
    documented ``VLLM_CPU_OMP_THREADS_BIND`` naming the first ``threads``
    CPUs this process may run on (the worker's OpenMP threads, one per CPU,
    bound); ``None`` leaves vLLM's default (``auto``: the NUMA node's cores
    but one, which is kept for the engine core)."""
    if threads is None:
        return {"VLLM_CPU_OMP_THREADS_BIND": None}
    cpus = sorted(os.sched_getaffinity(0))[:threads]
    return {"VLLM_CPU_OMP_THREADS_BIND": ",".join(map(str, cpus))}


def parse_threads(text: str) -> list[int | None]:
    """``--threads``: comma-separated counts, ``all`` (the CPUs this process
    may use) or ``default`` (each library's own default: ``None``).
    ``ValueError`` for anything else or a count below 1."""
    out: list[int | None] = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        if part == "default":
            out.append(None)
        elif part == "all":
            out.append(len(os.sched_getaffinity(0)))
        elif part.isdigit() and int(part) >= 1:
            out.append(int(part))
        else:
            raise ValueError(f"--threads {text!r}: {part!r} is not a count, 'all' or 'default'")
    return list(dict.fromkeys(out))


def threads_key(threads: int | None) -> str:
    """The results' key of a thread setting: ``"1"``, ``"2"``, ``"default"``."""
    return "default" if threads is None else str(threads)


@dataclass
class Lineup:
    """Who runs: engine configurations of each line, the peers (their venv's
    interpreter ``peers_python``, None to leave them out), batch size of
    sentence-transformers and the peers, ``gpu_memory_utilization`` of the
    engines."""

    engines: list[str]
    lines: list[Line] = field(default_factory=lambda: [in_tree_line()])
    peers_python: str | None = None
    batch_size: int = 64
    gpu_memory_utilization: float = 0.1

    def engine_name(self, engine: str, line: Line) -> str:
        """``mrv2``, or ``mrv2@0.32.0`` when more than one line runs."""
        return engine if len(self.lines) == 1 else f"{engine}@{line.name}"

    def engine_specs(self, engines, model, threads: int | None, llm_kwargs: dict | None = None) -> dict[str, Spec]:
        """A ``Spec`` per engine configuration (``engines``) and line."""
        specs = {}
        for line in self.lines:
            for e in engines:
                if ENGINES[e]["want"] not in line.runners:
                    continue  # V1 on a line whose vLLM has none (0.34.0)
                env = {"TRITON_INTERPRET": "1" if ENGINES[e]["triton_interpret"] else None, **thread_env(threads)}
                specs[self.engine_name(e, line)] = Spec(
                    ENGINE_FACTORY, {"name": e, "model": str(model), "llm_kwargs": {
                        "gpu_memory_utilization": self.gpu_memory_utilization, **(llm_kwargs or {})}},
                    python=line.python, pythonpath=line.pythonpath, env=env, root_label="front end")
        return specs

    def st_spec(self, model, threads: int | None) -> Spec:
        """sentence-transformers in a process of its own (the bench's venv)."""
        return Spec(ST_FACTORY, {"model_dir": str(model), "threads": threads, "batch_size": self.batch_size},
                    env={"TRITON_INTERPRET": None})

    def peer_specs(self, model, threads: int | None, exports: dict[str, Path]) -> dict[str, Spec]:
        """ONNX Runtime and OpenVINO in the peers' venv, on their exports."""
        return {p: Spec(PEER_FACTORIES[p], {"model_dir": str(exports[p]), "threads": threads,
                                            "batch_size": self.batch_size},
                        python=self.peers_python, env={"TRITON_INTERPRET": None})
                for p in PEERS if p in exports}


def peer_exports(lineup: Lineup, model) -> tuple[dict[str, Path], dict[str, dict]]:
    """The model exported for each peer (``scripts.bench.peers.export`` in
    the peers' venv, cached): ``(peer -> directory, peer -> {"error": ...}
    for those that could not be had)``."""
    from scripts.bench.peers import export_in

    exports, errors = {}, {}
    for peer in PEERS:
        if not lineup.peers_python or not Path(lineup.peers_python).exists():
            errors[peer] = {"error": f"the peers' environment ({lineup.peers_python or 'none given'}) does not "
                                     "exist: make bench-env (or --peers-python PATH)"}
            continue
        try:
            exports[peer] = export_in(lineup.peers_python, PEER_EXPORTS[peer], model)
        except (subprocess.CalledProcessError, OSError) as e:
            errors[peer] = {"error": f"export failed: {e} (its output is in the bench's log)"}
    return exports, errors


def cosines(embeddings: dict, reference: str = ST) -> dict[str, float]:
    """Smallest cosine similarity, over the sentences, of each system's
    embeddings (name -> [n, d]) with ``reference``'s."""
    ref = embeddings.get(reference)
    if ref is None:
        return {}
    return {name: float(rowwise_cosine(e, ref).min()) for name, e in embeddings.items() if name != reference}


def fastest_peer(runs: dict, metric: str) -> tuple[str, float] | None:
    """The peer (``PEERS``) with the highest ``metric`` (``per_s`` or
    ``per_cpu_s``) in ``runs`` (name -> summary), and that value; None
    when no peer has it."""
    have = [(runs[p][metric], p) for p in PEERS if p in runs and runs[p].get(metric)]
    if not have:
        return None
    value, peer = max(have)
    return peer, value


def versus_fastest_peer(runs: dict, system: str) -> dict:
    """``system``'s ratio to the fastest peer, per metric: ``{metric: {"peer":
    name, "peer_value": its value, "value": system's, "ratio": system /
    peer}}`` for ``per_s`` and ``per_cpu_s`` (metrics without figures left
    out)."""
    out = {}
    for metric in ("per_s", "per_cpu_s"):
        best, mine = fastest_peer(runs, metric), (runs.get(system) or {}).get(metric)
        if best and mine:
            out[metric] = {"peer": best[0], "peer_value": best[1], "value": mine, "ratio": mine / best[1]}
    return out


def ratios(runs: dict, lineup: Lineup) -> dict[str, float]:
    """Sentences per second: each line's MRV2 configurations to its V1 and to
    sentence-transformers (``"mrv2/v1"``, ``"mrv2@L/sentence-transformers"``),
    and each configuration of a later line to the first line's
    (``"mrv2@0.32.0/mrv2@0.26.0"``), for the names present in ``runs``."""
    per_s = {n: r["per_s"] for n, r in runs.items() if r.get("per_s")}
    out = {}
    for line in lineup.lines:
        v1 = lineup.engine_name("v1", line)
        for e in ("mrv2", "mrv2-interpreter"):
            name = lineup.engine_name(e, line)
            for ref in (v1, ST):
                if name in per_s and ref in per_s:
                    out[f"{name}/{ref}"] = per_s[name] / per_s[ref]
    first = lineup.lines[0]
    for line in lineup.lines[1:]:
        for e in ENGINES:
            a, b = lineup.engine_name(e, line), lineup.engine_name(e, first)
            if a in per_s and b in per_s:
                out[f"{a}/{b}"] = per_s[a] / per_s[b]
    return out


def _close_systems_info(systems: dict) -> tuple[dict, dict]:
    """Peak RSS and idle CPU per second of each open system."""
    memory, idle = {}, {}
    for name, system in systems.items():
        memory[name] = system.peak_rss()
        idle[name] = system.idle_cpu()
    return memory, idle


def bench_embed(sentences: list[str], reps: int, bar, lineup: Lineup, threads_list: list[int | None],
                log=print) -> dict:
    """``embed`` with all-MiniLM-L6-v2 over ``sentences``, once per thread
    setting of ``threads_list``: the engine configurations of every line,
    sentence-transformers, ONNX Runtime and OpenVINO, each in its own
    process, opened together for that setting. Each system's first call
    embeds all the sentences (warm-up) and returns them: their smallest
    cosine with sentence-transformers' (``cosine_min``); then ``reps``
    interleaved rounds (``measure_rounds``): per system the medians of wall
    time, sentences/s, CPU seconds per call of all its processes and
    sentences per CPU second (``runs``, ``summarise``); its peak RSS
    (``memory``, all processes), its idle CPU (``idle_cpu_per_s``); the
    worker's fp32 matmul rate and each system's achieved TFLOP/s
    (``flops``); ratios, and MRV2's ratio to the fastest peer
    (``versus_fastest_peer``)."""
    from scripts.validation.checkpoints.models import minilm_path

    model = minilm_path()
    counts = token_counts(model, sentences)
    with open(model / "config.json") as f:
        flops = minilm_flops(counts, json.load(f))
    exports, export_errors = peer_exports(lineup, model) if lineup.peers_python is not None else ({}, {})
    result = {"task": "embed", "model": "all-MiniLM-L6-v2", "sentences": len(sentences), "tokens": sum(counts),
              "batch_size": lineup.batch_size, "model_tflop": flops / 1e12, "cosine_min_required": COSINE_MIN,
              "exports": {p: str(d) for p, d in exports.items()}, "threads": {}}
    for threads in threads_list:
        key = threads_key(threads)
        log(f"== embed, {key} thread(s)")
        specs = {**lineup.engine_specs(lineup.engines, model, threads), ST: lineup.st_spec(model, threads),
                 **lineup.peer_specs(model, threads, exports)}
        with open_systems(specs, log) as (systems, infos):
            infos.update(export_errors)
            sec: dict = {"threads": threads, "systems": infos}
            engines = [n for n in systems if n not in (ST, *PEERS)]
            probe = next((n for n in engines if n.startswith("v1")), engines[0] if engines else None)
            matmul = [systems[probe].call("matmul_rate")[0]] if probe else []
            embeddings = {}
            for name, system in systems.items():
                bar.set_postfix_str(f"{name} warm-up")
                embeddings[name] = system.call("embed", items=sentences, return_embeddings=True)[1]
            sec["cosine_min"] = cosines(embeddings)
            del embeddings
            calls = {name: (system, "embed", {"items": sentences}) for name, system in systems.items()}
            times = measure_rounds(calls, reps, {name: (None, None) for name in calls}, bar)
            sec["runs"] = {name: summarise(t, len(sentences), sum(counts)) for name, t in times.items()}
            sec["memory"], sec["idle_cpu_per_s"] = _close_systems_info(systems)
            if probe:
                matmul.append(systems[probe].call("matmul_rate")[0])
                peak = max(m["tflops"] for m in matmul)
                sec["flops"] = {"matmul_tflops": peak, "matmul_runs": matmul, "probe": probe, "achieved": {
                    n: {"tflops": flops / 1e12 / r["median_s"], "fraction_of_matmul": flops / 1e12 / r["median_s"] / peak}
                    for n, r in sec["runs"].items()}}
            sec["ratios"] = ratios(sec["runs"], lineup)
            sec["versus_fastest_peer"] = {lineup.engine_name("mrv2", line): versus_fastest_peer(
                sec["runs"], lineup.engine_name("mrv2", line)) for line in lineup.lines}
        result["threads"][key] = sec
    return result


def bench_token_embed(sentences: list[str], reps: int, bar, lineup: Lineup, engines, threads: int | None,
                      log=print, warmup_n: int = 128) -> dict:
    """``token_embed`` with all-MiniLM-L6-v2 (``pooler_config`` task
    ``token_embed``): the ``engines`` configurations of every line and
    sentence-transformers' token embeddings (normalised per token), each in
    its own process, ``threads`` threads; a warm-up on the first
    ``warmup_n`` sentences, ``reps`` interleaved rounds; per system
    ``runs`` (``summarise``), ``memory``, ``idle_cpu_per_s``, ``ratios``."""
    from scripts.validation.checkpoints.models import minilm_path

    model = minilm_path()
    counts = token_counts(model, sentences)
    specs = {**lineup.engine_specs(engines, model, threads, {"pooler_config": {"task": "token_embed"}}),
             ST: lineup.st_spec(model, threads)}
    with open_systems(specs, log) as (systems, infos):
        calls = {name: (system, "token_embed", {"items": sentences}) for name, system in systems.items()}
        warm = {name: ("token_embed", {"items": sentences[:warmup_n]}) for name in calls}
        times = measure_rounds(calls, reps, warm, bar)
        result = {"task": "token_embed", "model": "all-MiniLM-L6-v2", "sentences": len(sentences),
                  "tokens": sum(counts), "threads": threads, "systems": infos,
                  "runs": {name: summarise(t, len(sentences), sum(counts)) for name, t in times.items()}}
        result["memory"], result["idle_cpu_per_s"] = _close_systems_info(systems)
    result["ratios"] = ratios(result["runs"], lineup)
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


def bench_colbert(sentences: list[str], doc_counts: list[int], reps: int, bar, lineup: Lineup, engines,
                  threads: int | None, log=print) -> dict:
    """``LLM.score`` with a tiny random ``HF_ColBERT``: 1 query and N
    documents, the ``engines`` configurations of every line in processes of
    their own, interleaved; per engine, documents per second and CPU
    seconds per call for each N, query encodings and documents scored per
    call (counted in the worker), growth with N (``fit_growth``)."""
    from scripts.bench.engines import TINY_COLBERT
    from scripts.validation.checkpoints.zoo import make_tiny_colbert

    model = make_tiny_colbert(TINY_COLBERT)
    query, docs = sentences[0], sentences[1:]
    with open_systems(lineup.engine_specs(engines, model, threads), log) as (systems, infos):
        for system in systems.values():
            system.call("score", query=query, docs=docs[:8])  # warm-up
            system.call("count_late_interaction_requests")
        calls = {(name, n): (system, "score", {"query": query, "docs": docs[:n]})
                 for n in doc_counts for name, system in systems.items()}
        times = measure_rounds(calls, reps, {k: (None, None) for k in calls}, bar)
        result = {"task": "late-interaction score", "model": "tiny HF_ColBERT (random, 2 layers, dim 32)",
                  "doc_counts": list(doc_counts), "threads": threads, "systems": infos, "per_engine": {}}
        for name, system in systems.items():
            counts = system.call("late_interaction_counts")[0]
            n_calls = reps * len(doc_counts)
            runs = {str(n): summarise(times[(name, n)], 1) for n in doc_counts}
            for n in doc_counts:
                runs[str(n)]["docs_per_s"] = n / runs[str(n)]["median_s"]
            result["per_engine"][name] = {
                "runs": runs,
                "query_encodings_per_call": counts.get("cache_query", 0) / n_calls,
                "documents_scored_per_call": counts.get("score_doc", 0) / n_calls,
                "growth": fit_growth(list(doc_counts), [runs[str(n)]["median_s"] for n in doc_counts]),
                "memory": system.peak_rss(),
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
    opened, in the first thread setting of ``embed``, else ``token_embed``,
    ``colbert``); without engines, the CPU worker's default on this
    machine: one core is left to the engine core (1 on 2 cores)."""
    sections = [*((results.get("embed") or {}).get("threads") or {}).values(), results.get("token_embed") or {},
                results.get("colbert") or {}]
    for sec in sections:
        for info in (sec.get("systems") or {}).values():
            if "torch_threads" in info:
                return int(info["torch_threads"])
    return max(1, (os.cpu_count() or 2) - 1)
