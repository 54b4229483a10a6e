"""Where the time of a run goes, the two profilers of ``scripts.bench.profile_embed``:
py-spy samples of every process of an engine (``PySpy``, ``parse_raw``), each
stack put in one category (``CATEGORIES``, ``classify``); and
``torch.profiler`` in the process that runs the model (``torch_profile_start``
/ ``torch_profile_stop``), each operator's self CPU time put in one category,
GEMMs by their weight shape (``op_category``, ``summarise_ops``)."""

from __future__ import annotations

import ast
import collections
import re
import signal
import subprocess
import sys
import time
from pathlib import Path


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
