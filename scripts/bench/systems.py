"""The bench's side of the measured systems: each system (a vLLM engine
configuration with its ``LLM`` front end, sentence-transformers, ONNX
Runtime, OpenVINO) runs in a long-lived process of its own
(``scripts.bench.host``), started with the interpreter of its environment,
and is driven over a pipe (``scripts.bench.protocol``). So each system's CPU
seconds and peak memory are its own and complete (``scripts.bench.proctree``),
and the calls of several systems can still be interleaved.

``Spec`` says what to start; ``System`` is one running system;
``open_systems`` opens several for a block; ``measure_rounds`` runs named
calls in interleaved rounds and returns, per call, its wall time and the CPU
seconds of the system's whole process tree.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field

from scripts.bench import proctree
from scripts.bench.protocol import ProtocolError, receive, send
from scripts.common.paths import child_pythonpath

# An engine's shared-memory readers busy-poll for 1 s after their last message
# (vLLM's SpinCondition): a call's CPU is read this long after it returned, so
# that it includes that polling, and the next call starts once it is over.
SETTLE_S = 1.1


class HostError(RuntimeError):
    """A system's process answered an error (the message is its
    ``Type: message``; ``remote_traceback`` its traceback), or died."""

    def __init__(self, message: str, remote_traceback: str = ""):
        super().__init__(message)
        self.remote_traceback = remote_traceback


@dataclass
class Spec:
    """How to start one system. ``factory``: ``"module:Class"`` built in the
    host (``Class(**args)``); ``python``: the interpreter (its venv's
    ``bin/python``; default the bench's); ``env``: variables set (``str``)
    or removed (``None``) on top of the bench's environment;
    ``pythonpath``: the host's ``PYTHONPATH`` (default the ``vllm`` this
    process imports, then the repository: ``child_pythonpath``), whose first
    entry is also the host's working directory; ``root_label``: the report's name for the host process
    (``front end`` for an engine)."""

    factory: str
    args: dict = field(default_factory=dict)
    python: str = sys.executable
    env: dict = field(default_factory=dict)
    pythonpath: str = field(default_factory=child_pythonpath)
    root_label: str = "main"


class System:
    """One system in its own process (``scripts.bench.host``), opened by
    ``start`` and ended by ``close``. ``info``: what the system said about
    itself when it opened; ``pid``: its host process."""

    def __init__(self, name: str, spec: Spec):
        self.name, self.spec = name, spec
        self.proc: subprocess.Popen | None = None
        self.info: dict = {}
        self.pid: int | None = None

    def start(self) -> "System":
        """Start the host with the spec's interpreter and environment and
        open the system in it; returns ``self`` once it is open. Raises
        ``HostError`` with the host's answer when the system fails to open
        (the host has ended then) and ``OSError`` when the interpreter
        cannot start. A load takes as long as it takes: no timeout."""
        to_host_r, to_host_w = os.pipe()
        from_host_r, from_host_w = os.pipe()
        env = dict(os.environ)
        env["PYTHONPATH"] = self.spec.pythonpath
        for k, v in self.spec.env.items():
            if v is None:
                env.pop(k, None)
            else:
                env[k] = str(v)
        cmd = [self.spec.python, "-m", "scripts.bench.host", "--in", str(to_host_r), "--out", str(from_host_w)]
        try:
            # run in the PYTHONPATH's directory: ``-m`` puts the working directory first on
            # sys.path, so a line's host started in the repository would import its vllm/
            self.proc = subprocess.Popen(cmd, env=env, pass_fds=(to_host_r, from_host_w),
                                         cwd=self.spec.pythonpath.split(os.pathsep)[0], stdin=subprocess.DEVNULL)
        finally:
            os.close(to_host_r)
            os.close(from_host_w)
        self._to = os.fdopen(to_host_w, "wb")
        self._from = os.fdopen(from_host_r, "rb", buffering=0)
        reply, _ = self._ask({"op": "open", "factory": self.spec.factory, "args": self.spec.args})
        self.info, self.pid = reply.get("info", {}), reply.get("pid", self.proc.pid)
        return self

    def _ask(self, message: dict, array=None) -> tuple[dict, object]:
        try:
            send(self._to, message, array)
            reply, payload = receive(self._from)
        except (ProtocolError, BrokenPipeError) as e:
            code = self.proc.poll() if self.proc else None
            raise HostError(f"{self.name}: its process stopped answering ({e}; exit status {code}; "
                            "its output is in the bench's log)") from e
        if not reply.get("ok"):
            raise HostError(f"{self.name}: {reply.get('error')}", reply.get("traceback", ""))
        return reply, payload

    def call(self, op: str, array=None, **args) -> tuple[object, object, float]:
        """Run ``op`` in the system: ``(result, array or None, wall_s)``,
        ``wall_s`` the call's own time in seconds, measured in the host.
        ``HostError`` when it raised there (the system stays open)."""
        reply, payload = self._ask({"op": op, "args": args}, array)
        return reply.get("result"), payload, float(reply["wall_s"])

    def cpu_sample(self) -> dict:
        """``proctree.cpu_sample`` of this system's process tree."""
        return proctree.cpu_sample(self.pid, self.spec.root_label)

    def peak_rss(self) -> dict:
        """``proctree.peak_rss`` of this system's process tree (MiB)."""
        return proctree.peak_rss(self.pid, self.spec.root_label)

    def measure(self, op: str, settle_s: float = SETTLE_S, **args) -> dict:
        """Run ``op`` once and measure it: ``{"wall_s": the call's time in
        the host (s), "cpu_s": CPU seconds of the whole tree from just before
        the request to ``settle_s`` after the answer, "cpu_by_process": {label:
        s}, "result": what it returned}``."""
        before = self.cpu_sample()
        result, _, wall = self.call(op, **args)
        time.sleep(settle_s)
        cpu = proctree.cpu_delta(before, self.cpu_sample())
        return {"wall_s": wall, "cpu_s": cpu["total"], "cpu_by_process": cpu["by_process"], "result": result}

    def idle_cpu(self, seconds: float = 1.0) -> float:
        """CPU seconds per second the system's tree burns while it has
        nothing to do (after ``SETTLE_S`` of quiet)."""
        time.sleep(SETTLE_S)
        before = self.cpu_sample()
        time.sleep(seconds)
        return proctree.cpu_delta(before, self.cpu_sample())["total"] / seconds

    def close(self, timeout_s: float = 120.0) -> int | None:
        """Close the system and wait for its process (killed after
        ``timeout_s``); its exit status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            try:
                self._ask({"op": "close"})
            except HostError:
                pass
        for f in (self._to, self._from):
            try:
                f.close()
            except OSError:
                pass
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


@contextmanager
def open_systems(specs: dict[str, Spec], log=print) -> Iterator[tuple[dict, dict]]:
    """Several systems open for the block (started one after another),
    all closed after it. Yields ``(systems, infos)``: name -> ``System`` and
    name -> what it said when it opened; one that fails to open is recorded
    in ``infos`` (``{"error": "Type: message"}``), reported through ``log``
    and left out of ``systems``."""
    systems, infos = {}, {}
    with ExitStack() as stack:
        for name, spec in specs.items():
            log(f"  opening {name}")
            system = System(name, spec)
            try:
                system.start()
            except (HostError, OSError) as e:
                system.close()
                infos[name] = {"error": str(e).removeprefix(f"{name}: ")}
                log(f"  {name} failed to open: {infos[name]['error']}")
                continue
            stack.callback(system.close)
            systems[name], infos[name] = system, system.info
        yield systems, infos


def measure_rounds(calls: dict, reps: int, warmups: dict | None = None, bar=None,
                   settle_s: float = SETTLE_S) -> dict[object, list[dict]]:
    """Interleaved rounds: ``calls`` maps a name to ``(system, op, args)``.
    Each call runs once to warm up (``warmups[name]``, an ``(op, args)``,
    instead when given), then ``reps`` rounds of all of them, the order
    rotating each round; each timed call is ``System.measure`` (its CPU
    read ``settle_s`` after it). Returns name -> the measurements.
    ``bar``: a tqdm bar advanced once per timed call."""
    for name, (system, op, args) in calls.items():
        w_op, w_args = (warmups or {}).get(name, (op, args))
        if w_op is not None:
            system.call(w_op, **w_args)
    time.sleep(settle_s)
    names = list(calls)
    out: dict = {name: [] for name in names}
    for rep in range(reps):
        for name in names[rep % len(names):] + names[: rep % len(names)]:
            system, op, args = calls[name]
            if bar is not None:
                bar.set_postfix_str(name if isinstance(name, str) else " ".join(map(str, name)))
            out[name].append(system.measure(op, settle_s=settle_s, **args))
            if bar is not None:
                bar.update(1)
    return out


def summarise(measurements: list[dict], items: int, tokens: int | None = None) -> dict:
    """Medians of one call's measurements: ``median_s`` (wall), ``per_s``
    (``items`` per second), ``tokens_per_s`` (given ``tokens``), ``cpu_s``
    (median CPU seconds per call, all processes), ``per_cpu_s`` (``items``
    per CPU second), ``cpu_by_process`` (median per label), and the raw
    ``times_s`` and ``cpu_times_s``. ``StatisticsError`` without
    measurements."""
    walls = [m["wall_s"] for m in measurements]
    cpus = [m["cpu_s"] for m in measurements]
    med, cpu = statistics.median(walls), statistics.median(cpus)
    labels = {k for m in measurements for k in m["cpu_by_process"]}
    row = {"median_s": med, "times_s": walls, "per_s": items / med, "cpu_s": cpu, "cpu_times_s": cpus,
           "per_cpu_s": items / cpu if cpu > 0 else None,
           "cpu_by_process": {k: statistics.median(m["cpu_by_process"].get(k, 0.0) for m in measurements)
                              for k in sorted(labels)}}
    if tokens is not None:
        row["tokens_per_s"] = tokens / med
    return row
