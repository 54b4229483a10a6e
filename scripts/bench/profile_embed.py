"""Profile one embed run (all-MiniLM-L6-v2 over the STS-B test sentences) of
an engine configuration (``mrv2``, ``v1``: ``scripts.bench.cli.ENGINES``) and of
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
systems within one run, not across runs.
"""

from __future__ import annotations

import argparse
import ast
import collections
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from scripts.series.base import REPO

ST = "sentence-transformers"

def _fn(*names: str) -> str:
    """Regex for a frame whose function (``Class.method`` or ``function``) is one of ``names``."""
    return r"(?:^|\.)(?:" + "|".join(names) + r") \("


def _file(*paths: str) -> str:
    """Regex for a frame in one of the files or directories ``paths``."""
    return r"\((?:" + "|".join(re.escape(p) for p in paths) + r")"


# Waiting: the innermost frame blocks or spins for work (vLLM's shared-memory
# queues spin with sched_yield for a while before they block).
WAITING = re.compile(_fn("wait", "poll", "select", "sched_yield", "acquire_read", "recv", "_recv",
                         "_recv_bytes", "sleep", "get", "recv_multipart", "_wait_for_response"))

# (category, regex on one frame "function (file:line)"), first rule that
# matches a frame wins, innermost frame first.
CATEGORIES: list[tuple[str, str]] = [
    ("attention metadata", _fn("prepare_attn", "build_attn_metadata", "prepare_dummy_attn",
                               "_build_attention_metadata", "build_slot_mappings_by_layer",
                               "CPUAttentionMetadataBuilder.build")),
    # the model's own arithmetic
    ("GEMM", _file("vllm/model_executor/layers/linear.py", "vllm/model_executor/layers/utils.py",
                   "torch/nn/modules/linear.py")),
    ("attention", _file("vllm/v1/attention/backends/", "transformers/integrations/sdpa_attention.py")
     + "|" + _fn("scaled_dot_product_attention", "eager_attention_forward")),
    ("activation", _file("vllm/model_executor/layers/activation.py", "transformers/activations.py")
     + "|" + _fn("gelu")),
    ("norms", _file("torch/nn/modules/normalization.py") + "|" + _fn("layer_norm")),
    ("embeddings", _file("vllm/model_executor/layers/vocab_parallel_embedding.py", "torch/nn/modules/sparse.py")
     + "|" + _fn("BertEmbedding.forward", "BertEmbeddings.forward")),
    # pooling: vLLM's poolers and pooling runners, sentence-transformers' Pooling / Normalize
    ("pooling", _file("vllm/model_executor/layers/pooler/", "vllm/v1/worker/gpu/pool/", "vllm/v1/pool/",
                      "sentence_transformers/models/Pooling.py", "sentence_transformers/models/Normalize.py",
                      "sentence_transformers/sentence_transformer/modules/pooling.py",
                      "sentence_transformers/sentence_transformer/modules/normalize.py")
     + "|" + _fn("GPUModelRunner._pool", "CPUModelRunner._pool", "GPUModelRunner.pool")),
    ("input preparation", _file("vllm/v1/worker/gpu/native_kernels.py", "vllm/v1/worker/gpu/input_batch.py",
                                "vllm/v1/worker/gpu/states.py", "vllm/v1/worker/gpu/block_table.py",
                                "vllm/v1/worker/gpu/buffer_utils.py", "vllm/v1/worker/gpu_input_batch.py")
     + "|" + _fn("prepare_inputs", "_prepare_inputs", "add_requests", "update_requests", "finish_requests",
                 "free_states", "_update_states", "_prepare_input_ids", "_get_positions")),
    ("output hand-off", _fn("_copy_pooler_output_to_cpu", "_pooling_output", "enqueue",
                            "process_output_sockets", "process_outputs_socket", "MsgpackEncoder.encode",
                            "MsgpackDecoder.decode", "get_output", "process_outputs", "from_base",
                            "_run_tiling_engine")),
    ("model (other)", _fn("forward", "_call_impl", "_wrapped_call_impl")),
    ("scheduling", _file("vllm/v1/core/")),
    ("tokenisation", _file("transformers/tokenization", "tokenizers/", "vllm/tokenizers/", "vllm/renderers/",
                           "vllm/inputs/", "vllm/v1/engine/input_processor.py")
     + "|" + _fn("tokenize", "_tokenize", "_validate_and_add_requests", "_render_and_add_requests",
                 "add_request", "_add_request", "preprocess_add_request", "process_input_sockets",
                 "_send_input")),
]


def classify(frames: list[str]) -> str:
    """Category of one stack (outermost first): the first ``CATEGORIES`` rule
    matching a frame, innermost frame first; ``other`` when none does."""
    if frames and WAITING.search(frames[-1]):
        return "waiting"
    for frame in reversed(frames):
        for name, pattern in _COMPILED:
            if pattern.search(frame):
                return name
    return "other"


_COMPILED = [(name, re.compile(p)) for name, p in CATEGORIES]


def parse_raw(path: str) -> dict:
    """py-spy ``--format raw --threads`` output to ``{(pid, thread): Counter(category)}``
    plus the top stacks per (pid, thread). Lines: ``process PID:"cmd";thread
    (0x...);frame;frame... COUNT``."""
    per_thread: dict = collections.defaultdict(collections.Counter)
    stacks: dict = collections.defaultdict(collections.Counter)
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            body, _, count = line.rpartition(" ")
            # Subprocesses are nested: process A:"cmd";process B:"cmd";thread (...);frames
            procs = re.match(r'^((?:process \d+:"[^"]*";)+)', body)
            head = procs.group(1) if procs else ""
            m = re.findall(r'process (\d+):"([^"]*)"', head)
            pid, cmd = m[-1] if m else ("?", "")
            thread, *frames = body[len(head):].split(";")
            key = (pid, cmd[:80], thread.split(": ", 1)[-1])
            cat = classify(frames)
            per_thread[key][cat] += int(count)
            stacks[key][(cat, ";".join(frames[-4:]))] += int(count)
    return {"per_thread": per_thread, "stacks": stacks}


class PySpy:
    """``py-spy record`` of process ``pid`` and its subprocesses while the
    block runs (stopped with SIGINT, which makes py-spy write its file)."""

    def __init__(self, pid: int, out: str, rate: int):
        self.cmd = [str(Path(sys.executable).with_name("py-spy")), "record", "--pid", str(pid), "--subprocesses",
                    "--threads", "--format", "raw", "--rate", str(rate), "--nonblocking",
                    "--output", out]

    def __enter__(self):
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(2.0)  # py-spy attaches
        return self

    def __exit__(self, *exc):
        self.proc.send_signal(signal.SIGINT)
        _, err = self.proc.communicate(timeout=120)
        if self.proc.returncode not in (0, -signal.SIGINT):
            print(err.decode(errors="replace")[-2000:], file=sys.stderr)


# --------------------------------------------------------------------------- torch.profiler

def torch_profile_start(worker=None) -> None:
    """Start a CPU ``torch.profiler`` (shapes recorded) in this process (a
    worker through ``collective_rpc``)."""
    import torch

    prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True)
    # Functions sent through collective_rpc are rebuilt in the worker: keep
    # the profiler on the worker object (or here, in this process).
    holder = worker if worker is not None else sys.modules[__name__]
    holder._profiler = prof
    prof.__enter__()


def torch_profile_stop(worker=None) -> list[dict]:
    """Stop the profiler of ``torch_profile_start``; operators with their
    input shapes, calls, self and total CPU microseconds."""
    holder = worker if worker is not None else sys.modules[__name__]
    prof = holder._profiler
    del holder._profiler
    prof.__exit__(None, None, None)
    rows = []
    for e in prof.key_averages(group_by_input_shape=True):
        rows.append({"name": e.key, "shapes": str(e.input_shapes), "calls": e.count,
                     "self_us": e.self_cpu_time_total, "total_us": e.cpu_time_total})
    return rows


GEMM_OPS = ("aten::addmm", "aten::mm", "aten::matmul", "aten::linear", "_C::onednn_mm", "aten::bmm",
            "aten::baddbmm", "_C::weight_packed_linear", "aten::mkldnn_linear")


def gemm_dims(name: str, shapes: list) -> tuple[int, int] | None:
    """(input features, output features) of a GEMM operator from its input
    shapes: ``_C::onednn_mm(handler, x, bias)``, ``aten::addmm(bias, x, w.T)``,
    ``aten::linear(x, w, bias)``, ``aten::mm(x, w.T)``; None when unknown."""
    try:
        if name == "_C::onednn_mm" and len(shapes[2]) == 1:
            return shapes[1][-1], shapes[2][0]
        if name == "aten::addmm":
            return shapes[1][-1], shapes[2][-1]
        if name == "aten::linear":
            return shapes[1][1], shapes[1][0]
        if name in ("aten::mm", "aten::matmul"):
            return shapes[0][-1], shapes[1][-1]
    except (IndexError, TypeError):
        pass
    return None


def op_category(row: dict, d: int, f: int) -> str:
    """Category of one profiler row: GEMMs named by their weight shape for a
    hidden size ``d`` and FFN size ``f``; attention, activation, norms,
    embeddings, memory operations; else ``other ops``."""
    name = row["name"]
    if name in GEMM_OPS:
        try:
            shapes = ast.literal_eval(row["shapes"])
        except (ValueError, SyntaxError):
            shapes = []
        labels = {(d, 3 * d): "GEMM QKV", (d, d): "GEMM attention out", (d, f): "GEMM FFN up",
                  (f, d): "GEMM FFN down"}
        return labels.get(gemm_dims(name, shapes), "GEMM (other)")
    if "attention" in name or "attn" in name or "softmax" in name:
        return "attention"
    if "gelu" in name:
        return "activation"
    if "norm" in name:
        return "norms"
    if "embedding" in name or "index_select" in name:
        return "embeddings"
    if name in ("aten::copy_", "aten::clone", "aten::contiguous", "aten::zeros", "aten::zero_", "aten::fill_",
                "aten::empty", "aten::cat", "aten::to", "aten::_to_copy"):
        return f"memory ({name.split('::')[1]})"
    return "other ops"


def summarise_ops(rows: list[dict], d: int, f: int) -> dict[str, float]:
    """Self CPU microseconds per ``op_category`` (leaf time, no double count)."""
    out: dict[str, float] = collections.Counter()
    for r in rows:
        out[op_category(r, d, f)] += r["self_us"]
    return dict(out)


# --------------------------------------------------------------------------- systems

def profile_engine(name: str, sentences: list[str], rate: int, tmp: str, engine_kwargs: dict) -> dict:
    """Both passes for engine configuration ``name``."""
    from scripts.bench.cli import close_engines, open_engine
    from scripts.validation.models import minilm_path

    llm, info = open_engine(name, minilm_path(), **engine_kwargs)
    try:
        llm.embed(sentences[:128], use_tqdm=False)
        llm.embed(sentences, use_tqdm=False)
        time.sleep(1.2)
        out = os.path.join(tmp, f"{name}.raw")
        with PySpy(os.getpid(), out, rate):
            start = time.perf_counter()
            llm.embed(sentences, use_tqdm=False)
            wall = time.perf_counter() - start
        spy = parse_raw(out)
        time.sleep(1.2)
        llm.collective_rpc(torch_profile_start)
        start = time.perf_counter()
        llm.embed(sentences, use_tqdm=False)
        wall_torch = time.perf_counter() - start
        (ops,) = llm.collective_rpc(torch_profile_stop)[:1]
        time.sleep(1.2)
        start = time.perf_counter()
        llm.embed(sentences, use_tqdm=False)
        wall_plain = time.perf_counter() - start
    finally:
        close_engines({name: llm})
    return {"info": info, "wall_s": wall, "wall_torch_profiler_s": wall_torch, "wall_unprofiled_s": wall_plain,
            "spy": spy, "ops": ops}


def profile_st(sentences: list[str], rate: int, tmp: str, threads: int) -> dict:
    """Both passes for sentence-transformers (``threads`` torch threads,
    ``batch_size=64``: as ``make bench``)."""
    import torch

    from scripts.bench.cli import _st_model
    from scripts.validation.models import minilm_path

    model = _st_model(minilm_path(), threads)
    model.encode(sentences[:128], batch_size=64)
    model.encode(sentences, batch_size=64)
    out = os.path.join(tmp, "st.raw")
    with PySpy(os.getpid(), out, rate):
        start = time.perf_counter()
        model.encode(sentences, batch_size=64, convert_to_numpy=True)
        wall = time.perf_counter() - start
    spy = parse_raw(out)
    torch_profile_start()
    start = time.perf_counter()
    model.encode(sentences, batch_size=64, convert_to_numpy=True)
    wall_torch = time.perf_counter() - start
    ops = torch_profile_stop()
    start = time.perf_counter()
    model.encode(sentences, batch_size=64, convert_to_numpy=True)
    wall_plain = time.perf_counter() - start
    return {"info": {"torch_threads": torch.get_num_threads()}, "wall_s": wall, "wall_torch_profiler_s": wall_torch,
            "wall_unprofiled_s": wall_plain, "spy": spy, "ops": ops}


# --------------------------------------------------------------------------- report

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
    parser = argparse.ArgumentParser(prog="python -m scripts.bench.profile_embed", description=__doc__.split("\n")[0])
    parser.add_argument("--systems", default=f"mrv2,{ST}")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--rate", type=int, default=250)
    parser.add_argument("--out", default=str(REPO / "reports" / "profile"))
    parser.add_argument("--engine-arg", action="append", default=[],
                        help="KEY=VALUE passed to LLM (JSON value), e.g. max_num_seqs=512")
    parser.add_argument("--top", type=int, default=0, help="print the N most sampled stacks per busy thread")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    os.environ["TRITON_INTERPRET"] = "1"  # as scripts.bench.cli: the interpreter engines validate
    from scripts.validation.models import minilm_path, sts_test

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
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "profile.md").write_text(md + "\n")
    serial = {s: {**{k: v for k, v in r.items() if k != "spy"},
                  "spy": {thread_label(k): dict(c) for k, c in r["spy"]["per_thread"].items()}}
              for s, r in results.items()}
    (out / "profile.json").write_text(json.dumps({"sentences": len(sentences), "engine_kwargs": engine_kwargs,
                                                   "results": serial}, indent=1, default=str))
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
