"""Run ``vllm serve`` on the CPU for the server tests, the load benchmark and
the scratch-venv wheel check: a free port, readiness through ``GET /health``,
the server's output in a log file, shutdown of the whole process group at the
end, and questions to its worker.

The worker is asked through upstream's own seams: ``--worker-extension-cls
scripts.validation.engine.WorkerProbe`` mixes our probe methods into the worker class,
and ``VLLM_SERVER_DEV_MODE=1`` opens ``POST /collective_rpc``, which runs a
worker method by name (``vllm/entrypoints/serve/dev/rpc/api_router.py``).
So ``server.runner()`` is the model runner class the server's worker built,
as ``scripts.validation.engine.runner_in_use`` is for an offline ``LLM``.

    with VllmServer(model, runner="default") as server:
        requests.post(server.url("/v1/embeddings"), json=...)
        assert server.runner() == "MRV2"
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from scripts.common.paths import BUILD
from scripts.validation.engine import RUNNER_ENV, runner_kind

LOGS = BUILD / "logs"
# The CPU worker refuses to start unless this share of the NUMA node's memory
# is free, and reserves it. The models served here are encoder-only (no KV
# cache), so a small share keeps several servers and engines side by side.
SERVER_MEMORY_UTILIZATION = 0.05
PROBE = "scripts.validation.engine.WorkerProbe"
# an ERROR line of the engine core or the worker: vLLM prefixes their output
# with the process' name and pid, except lines logged while a worker starts
ENGINE_ERROR = re.compile(r"^(\((EngineCore|Worker)[^)]*\) )?ERROR ")


class ServerError(RuntimeError):
    """The server did not start, or stopped while it was needed; the message
    ends with the tail of its log."""


def free_port() -> int:
    """A TCP port nothing listens on now (the kernel's choice)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def vllm_executable() -> str:
    """The ``vllm`` console script of this interpreter's environment."""
    path = Path(sys.executable).parent / "vllm"
    if not path.exists():
        raise ServerError(f"{path} does not exist: install the distribution's wheel (make install)")
    return str(path)


class VllmServer:
    """``vllm serve MODEL`` in a process group of its own.

    ``runner``: ``"default"`` (vLLM's choice), ``"v2"`` or ``"v1"``, through
    ``VLLM_USE_V2_MODEL_RUNNER`` as ``scripts.validation.engine.select_runner`` does.
    ``args``: more ``vllm serve`` options. ``executable``: the ``vllm`` script
    to run (default: this environment's). ``env``: the environment (default:
    ``os.environ`` without ``LD_PRELOAD``, which an engine opened in this
    process has set), to which the runner choice, ``HF_HUB_OFFLINE=1`` and,
    with ``probe``, ``VLLM_SERVER_DEV_MODE=1`` are added; ``probe`` also adds
    ``--worker-extension-cls scripts.validation.engine.WorkerProbe`` (``scripts`` must be
    importable in the worker: the repository on ``PYTHONPATH``).
    Output goes to ``log`` (default ``.build/logs/server-<name>.log``).
    Defaults match the offline engines of ``scripts.validation.engine.open_llm``: fp32,
    eager, seed 0; ``--gpu-memory-utilization`` is ``gpu_memory_utilization``
    (``SERVER_MEMORY_UTILIZATION`` by default). ``api_key``: the server is started
    with ``--api-key`` and this object's own calls (``served_model``, ``worker``)
    send it (``headers``)."""

    # A server started without --api-key (a subclass with its own command, such as the
    # bench's InfinityServer, inherits it).
    api_key: str | None = None

    def __init__(self, model, *args: str, name: str | None = None, runner: str = "default",
                 executable: str | None = None, env: dict | None = None, probe: bool = True,
                 api_key: str | None = None,
                 log: Path | None = None, start_timeout: float = 900.0,
                 gpu_memory_utilization: float = SERVER_MEMORY_UTILIZATION):
        if runner not in RUNNER_ENV:
            raise ValueError(f"runner {runner!r}: use one of {sorted(RUNNER_ENV)}")
        self.model = str(model)
        self.name = name or Path(self.model).name
        self.port = free_port()
        self.log = Path(log or LOGS / f"server-{self.name}.log")
        self.start_timeout = start_timeout
        self.env = dict(os.environ if env is None else env)
        if env is None:
            # what vLLM's CPU platform wrote into this process's environment when
            # an engine opened here (tcmalloc, libgomp): the server's own platform decides
            self.env.pop("LD_PRELOAD", None)
        self.env.setdefault("HF_HUB_OFFLINE", "1")
        # its log lines go to its own log (not to a quiet job's, scripts.common.quiet)
        self.env.pop("VLLM_LOGGING_CONFIG_PATH", None)
        self.env.pop("VLLM_USE_V2_MODEL_RUNNER", None)
        if RUNNER_ENV[runner] is not None:
            self.env["VLLM_USE_V2_MODEL_RUNNER"] = RUNNER_ENV[runner]
        self.cmd = [executable or vllm_executable(), "serve", self.model, "--host", "127.0.0.1",
                    "--port", str(self.port), "--dtype", "float32", "--enforce-eager", "--seed", "0",
                    "--gpu-memory-utilization", str(gpu_memory_utilization)]
        if probe:
            self.env["VLLM_SERVER_DEV_MODE"] = "1"
            self.cmd += ["--worker-extension-cls", PROBE]
        self.api_key = api_key
        if api_key is not None:
            self.cmd += ["--api-key", api_key]
        self.cmd += list(args)
        self.proc: subprocess.Popen | None = None
        self._log_file = None
        self._started = 0.0
        self.startup_seconds: float | None = None

    # ------------------------------------------------------------------ life cycle

    def launch(self) -> "VllmServer":
        """Start the server process and return at once (``wait_ready`` next):
        the caller can do other work while it loads."""
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = open(self.log, "w")
        self._log_file.write(f"$ {' '.join(self.cmd)}\n")
        self._log_file.flush()
        self._started = time.monotonic()
        self.proc = subprocess.Popen(self.cmd, env=self.env, stdout=self._log_file, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        return self

    def wait_ready(self) -> "VllmServer":
        """Wait until ``/health`` answers 200. ``ServerError`` (with the log's
        root cause and tail) when the server exits first or is not ready
        ``start_timeout`` seconds after ``launch``; the server is stopped then.

        The polls share one keep-alive connection: every new client
        connection takes an ephemeral port, and a starting server's worker
        binds a port its engine core picked earlier (vLLM's torch.distributed
        init, ``get_open_port`` in ``multiproc_executor.py``), which fails
        with EADDRINUSE if a client connection took it meanwhile."""
        import requests

        deadline = self._started + self.start_timeout
        with requests.Session() as session:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise ServerError(f"vllm serve exited with status {self.proc.returncode} while starting"
                                      f"\n{self.log_tail()}")
                try:
                    if session.get(self.url("/health"), timeout=5).status_code == 200:
                        self.startup_seconds = time.monotonic() - self._started
                        return self
                except requests.RequestException:
                    pass
                time.sleep(0.5)
        self.stop()
        raise ServerError(f"vllm serve not ready after {self.start_timeout:.0f} s\n{self.log_tail()}")

    def start(self) -> "VllmServer":
        """``launch`` then ``wait_ready``."""
        return self.launch().wait_ready()

    def stop(self, timeout: float = 60.0) -> int | None:
        """SIGTERM to the server (it shuts its engine down), then SIGKILL to
        its process group if anything of it is left after ``timeout``
        seconds. Returns the server's exit status."""
        if self.proc is None:
            return None
        pgid = self.proc.pid  # start_new_session: the group is the server's own
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(pgid, signal.SIGKILL)  # engine core / worker left behind, if any
        except ProcessLookupError:
            pass
        status = self.proc.wait()
        if self._log_file:
            self._log_file.close()
            self._log_file = None
        return status

    def __enter__(self) -> "VllmServer":
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()

    # ------------------------------------------------------------------ talking to it

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, path: str) -> str:
        """Full URL of ``path`` (``/v1/embeddings``) on this server."""
        return self.base_url + path

    @property
    def headers(self) -> dict[str, str]:
        """The headers a client of this server sends: the API key, if it has one."""
        return {} if self.api_key is None else {"Authorization": f"Bearer {self.api_key}"}

    def served_model(self) -> str:
        """The model name the server answers to (``GET /v1/models``)."""
        import requests

        (model,) = requests.get(self.url("/v1/models"), headers=self.headers, timeout=30).json()["data"]
        return model["id"]

    def worker(self, method: str, timeout: float = 120.0) -> list:
        """Run ``method`` (a worker method, e.g. one of ``WorkerProbe``) in every
        worker through ``POST /collective_rpc``; one result per worker.
        ``ServerError`` for a non-200 answer."""
        import requests

        r = requests.post(self.url("/collective_rpc"), json={"method": method}, headers=self.headers,
                          timeout=timeout)
        if r.status_code != 200:
            raise ServerError(f"/collective_rpc {method}: {r.status_code} {r.text[:500]}")
        return r.json()["results"]

    def runner(self) -> str:
        """``"MRV2"`` or ``"V1"``: the model runner the server's worker built."""
        (name,) = set(self.worker("probe_runner_class"))
        return runner_kind(name)

    def input_preparation(self) -> str:
        """How the worker's MRV2 runner prepares inputs (``input_preparation_kind``)."""
        (kind,) = set(self.worker("probe_input_preparation"))
        return kind

    def late_interaction_state(self) -> dict:
        """The worker's late-interaction runner state (``late_interaction_state``)."""
        (state,) = self.worker("probe_late_interaction_state")
        return state

    def worker_memory(self) -> dict:
        """The worker's ``WorkerProbe.probe_memory``: live Python objects,
        resident bytes, resident bytes after the allocator's release (``rss_after_release``)."""
        (memory,) = self.worker("probe_memory")
        return memory

    def rss_by_process(self) -> dict[str, int]:
        """Resident memory in bytes of the server's processes, by name: the
        API server (``api_server``) and each process under it by its title
        (``VLLM::EngineCore``, ``VLLM::Worker``; helpers such as
        multiprocessing's resource tracker by their command)."""
        import psutil

        root = psutil.Process(self.proc.pid)
        out = {"api_server": root.memory_info().rss}
        for p in root.children(recursive=True):
            try:
                name = p.cmdline()[0] if p.cmdline() else p.name()
                name = name if name.startswith("VLLM::") else p.name()
                out[name] = out.get(name, 0) + p.memory_info().rss
            except psutil.NoSuchProcess:
                pass
        return out

    def rss_bytes(self) -> int:
        """Resident memory of the server and every process under it (API
        server, engine core, worker), bytes."""
        return sum(self.rss_by_process().values())

    def log_tail(self, lines: int = 40) -> str:
        """The root cause and the last ``lines`` lines of the server's log.

        The API server's traceback at the end of a failed start only says
        that the engine core failed; the cause is in the ``ERROR`` lines the
        engine core and the worker logged before it, so the first
        ``lines`` of those come first."""
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        cause = [line for line in text if ENGINE_ERROR.match(line)][:lines]
        head = (["engine core / worker errors:", *cause, "...", "log tail:"] if cause else [])
        return "\n".join(head + text[-lines:]) + f"\n(full log: {self.log})"

