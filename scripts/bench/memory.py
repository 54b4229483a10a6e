"""Peak resident memory (``VmHWM``) of what the benchmarks measure: an engine's
worker and engine core (asked from the worker), and sentence-transformers
encoding the same sentences in a process of its own."""

from __future__ import annotations

import os


def vm_hwm_mib(pid: int | str = "self") -> float | None:
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
    core (``engine_core_title`` names that process), and their sum
    (``engine_mib``, None when either is unknown). The engine's front end
    lives in the bench process, shared by every engine and by
    sentence-transformers, and is left out."""
    ppid = os.getppid()
    try:
        with open(f"/proc/{ppid}/cmdline", "rb") as f:
            title = f.read().split(b"\0")[0].decode(errors="replace")
    except OSError:
        title = None
    worker_mib, core_mib = vm_hwm_mib(), vm_hwm_mib(ppid)
    total = worker_mib + core_mib if worker_mib is not None and core_mib is not None else None
    return {"worker_mib": worker_mib, "engine_core_mib": core_mib, "engine_core_title": title,
            "engine_mib": total}


def st_peak_memory(model_dir: str, sentences: list[str], threads: int | None, task: str) -> dict:
    """Runs in a fresh process (``st_memory``): sentence-transformers loads
    the model and encodes ``sentences`` once as the timed calls do (``task``
    ``embed`` or ``token_embed``, batch 64, ``threads`` torch threads);
    returns ``{"process_mib": that process's peak resident memory in MiB}``."""
    from scripts.bench.engines import st_model

    model = st_model(model_dir, threads)
    if task == "embed":
        model.encode(sentences, batch_size=64, convert_to_numpy=True)
    else:
        model.encode(sentences, batch_size=64, output_value="token_embeddings")
    return {"process_mib": vm_hwm_mib()}


def st_memory(model_dir, sentences: list[str], threads: int | None, task: str) -> dict:
    """``st_peak_memory`` in a spawned process of its own (the bench process
    also holds the engines' front ends); ``{"error": "Type: message"}`` if it
    fails."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    try:
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            return pool.submit(st_peak_memory, str(model_dir), sentences, threads, task).result()
    except Exception as e:  # noqa: BLE001 - reported, the figures still come
        return {"error": f"{type(e).__name__}: {e}"}
