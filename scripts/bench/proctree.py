"""CPU seconds and peak resident memory of a measured system's whole process
tree: its host process (for vLLM, the ``LLM`` front end) and every process
under it (engine core, worker, helpers), read from the kernel.

CPU: ``cpu_sample(pid)`` reads, for each process of the tree, user + system
time of all its threads plus the user + system time of its children that
exited and were waited for (``psutil.Process.cpu_times()``: ``utime``,
``stime``, ``cutime``, ``cstime`` of ``/proc/<pid>/stat``), in seconds.
``cpu_delta(before, after)`` is the sum over the tree after minus the sum
before: a process alive at both samples counts its own growth; one that
exited in between and was waited for by a process of the tree is counted
through its parent's ``cutime``/``cstime`` (its CPU before the first sample
is subtracted with its own entry, so nothing counts twice). Only a process
that exits without being waited for by a member of the tree loses its
time (none of vLLM's does while a call runs).

Memory: ``peak_rss(pid)`` sums ``VmHWM`` (the peak resident set since the
process started, ``/proc/<pid>/status``) over the processes alive now.
Each process's peak is counted whole, so the sum is an upper bound of the
tree's resident memory at any one moment: pages shared between processes
(the libraries' text, copy-on-write pages) count once per process, and the
peaks need not coincide.
"""

from __future__ import annotations

# process titles vLLM gives its processes (setproctitle) -> the labels of the report
TITLES = {"VLLM::EngineCore": "engine core", "VLLM::Worker": "worker", "VLLM::APIServer": "api server"}


def vm_hwm_mib(pid: int | str = "self") -> float | None:
    """Peak resident set size (``VmHWM`` of ``/proc/PID/status``) in MiB,
    None where it cannot be read (the process is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            kib = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
        return kib / 1024
    except (OSError, StopIteration, ValueError):
        return None


def tree(pid: int) -> list:
    """``psutil.Process`` of ``pid`` and of every process under it (any
    depth), ``pid`` first. ``psutil.NoSuchProcess`` when ``pid`` is gone."""
    import psutil

    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def label(process, root_label: str) -> str:
    """Report label of one process of a tree: ``root_label`` for the root,
    vLLM's process title (``engine core``, ``worker``) where it set one,
    else the executable's name (``python3``, ``resource_tracker`` when the
    command line says so)."""
    try:
        cmd = process.cmdline()
    except Exception:  # noqa: BLE001 - gone or not ours: named by pid
        return f"pid {process.pid}"
    first = cmd[0] if cmd else ""
    for title, name in TITLES.items():
        if first.startswith(title):
            return name
    if any("resource_tracker" in part for part in cmd):
        return "resource tracker"
    return process.name()


def cpu_sample(pid: int, root_label: str = "main") -> dict[int, tuple[str, float]]:
    """CPU seconds so far of each process of ``pid``'s tree: ``{pid: (label,
    user + system + waited-for children's user + system)}``. Processes that
    end while being read are left out."""
    import psutil

    out = {}
    procs = tree(pid)
    for i, p in enumerate(procs):
        try:
            t = p.cpu_times()
            out[p.pid] = (root_label if i == 0 else label(p, root_label),
                          t.user + t.system + t.children_user + t.children_system)
        except psutil.Error:
            pass
    return out


def cpu_delta(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]) -> dict:
    """CPU seconds between two ``cpu_sample``s of one tree: ``{"total": s,
    "by_process": {label: s}}`` (processes with one label summed; see the
    module docstring for exited processes)."""
    by: dict[str, float] = {}
    for pid, (name, seconds) in after.items():
        by[name] = by.get(name, 0.0) + seconds - before.get(pid, (name, 0.0))[1]
    for pid, (name, seconds) in before.items():
        if pid not in after:
            by[name] = by.get(name, 0.0) - seconds
    return {"total": sum(by.values()), "by_process": by}


def peak_rss(pid: int, root_label: str = "main") -> dict:
    """Peak resident memory (MiB) of ``pid``'s tree: ``{"total_mib": sum of
    VmHWM over its processes alive now, "by_process": {label: MiB}}`` (see
    the module docstring for what the sum counts)."""
    by: dict[str, float] = {}
    for i, p in enumerate(tree(pid)):
        mib = vm_hwm_mib(p.pid)
        if mib is not None:
            name = root_label if i == 0 else label(p, root_label)
            by[name] = by.get(name, 0.0) + mib
    return {"total_mib": sum(by.values()), "by_process": by}
