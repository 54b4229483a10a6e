"""What the benchmark figures were measured on and what that machine can do:
its description (CPU, memory, versions, commit, series state), its fp32 matmul
rate, and the FLOPs of an all-MiniLM-L6-v2 forward over given sentences."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time

from scripts.common.paths import REPO


def machine() -> dict:
    """What the figures were measured on: CPU model, cores, memory (GiB),
    Python, torch and vLLM versions, torch threads of this process, the
    load average at the start, the repository commit and whether ``vllm/``
    matched the series (``python -m scripts.series status``)."""
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
    """Output (stdout then stderr, stripped) of ``cmd`` run in the repository;
    None when it prints nothing, cannot start or takes over 60 s."""
    try:
        out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=60)
        return (out.stdout + out.stderr).strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


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


def minilm_flops(token_counts: list[int], config: dict) -> float:
    """FLOPs of a BERT encoder forward (all-MiniLM-L6-v2) over sequences of
    ``token_counts`` tokens (special tokens included), 2 FLOPs a multiply-add.
    ``config``: the model's ``config.json`` (``num_hidden_layers``,
    ``hidden_size``, ``intermediate_size``); ``KeyError`` without them.

    Per layer and sequence of n tokens, hidden size d, FFN size f:
    Q, K, V and output projections 4 * 2nd^2; FFN 2 * 2ndf; attention scores
    QK^T and their product with V 2 * 2n^2d (all heads together). Summed over
    the layers: L * (n * (8d^2 + 4df) + 4n^2d). Embeddings, layer norms,
    softmax, GELU and pooling are O(nd) and left out (< 1%)."""
    layers, d, f = config["num_hidden_layers"], config["hidden_size"], config["intermediate_size"]
    return float(sum(layers * (n * (8 * d * d + 4 * d * f) + 4 * n * n * d) for n in token_counts))


def token_counts(model_dir, sentences: list[str]) -> list[int]:
    """Tokens of each sentence as the engine sees them (the model's tokenizer
    from ``model_dir``, special tokens added), one int per sentence."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    return [len(ids) for ids in tok(sentences, add_special_tokens=True)["input_ids"]]
