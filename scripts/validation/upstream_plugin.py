"""The pytest plugin ``python -m scripts.validation.upstream_pooling`` loads into
upstream vLLM's own tests, run from the line's pinned sdist
(``-p scripts.validation.upstream_plugin``):

- it writes what the run did, one JSON object a line, to the file named by
  ``$VDIST_UPSTREAM_RESULTS`` (appended as the run goes, so a run that dies
  keeps what it did): the ``vllm`` the run imports (``kind: vllm``: its
  ``__file__`` and ``__version__``), the node ids pytest selected
  (``kind: selected``), and each test's outcome phase by phase, and each
  module that did not import (``kind: result``: ``node``, ``when``,
  ``outcome``, ``message``; a failure's pytest report in ``detail``);
- a test, or a module at collection, stopped because the Hugging Face hub or
  the network is out of reach (the run is offline: ``HF_HUB_OFFLINE=1``) is
  reported *skipped*, not failed, with a reason naming the hub model or the
  host it needs (``offline_reason``, ``offline_reason_in_text``): it needs what
  the machine does not hold, and says nothing about the code under test.
"""

from __future__ import annotations

import json
import os
import re
import socket

import pytest

RESULTS_ENV = "VDIST_UPSTREAM_RESULTS"
# How a Hugging Face repo id looks ("org/name"); a path that exists is a local model, not a repo.
_REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
# The frame locals through which huggingface_hub, transformers and vLLM pass the repo they look up.
_REPO_LOCALS = ("repo_id", "path_or_repo_id", "pretrained_model_name_or_path", "model_name_or_path", "model")
# vLLM's words when a model is neither a local directory nor in the hub cache, offline
# (vllm/transformers_utils: a ValueError inside ModelConfig's pydantic ValidationError).
_VLLM_NO_REPO = re.compile(r"Invalid repository ID or local directory specified: '([^']+)'")
_HUB_TEXT = re.compile(r"LocalEntryNotFoundError|OfflineModeIsEnabled|We couldn't connect to 'https://huggingface\.co'"
                       r"|Invalid repository ID or local directory specified")
_NETWORK_TEXT = re.compile(r"NameResolutionError|Failed to resolve|Name or service not known"
                           r"|Temporary failure in name resolution")
_LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1", "0.0.0.0")


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and the exceptions it was raised from or during (``__cause__``, ``__context__``)."""
    out: list[BaseException] = []
    while exc is not None and all(exc is not e for e in out):
        out.append(exc)
        exc = exc.__cause__ or exc.__context__
    return out


def _is_repo_id(value: object) -> bool:
    return isinstance(value, str) and _REPO_ID.fullmatch(value) is not None and not os.path.exists(value)


def _repo_in_frames(exc: BaseException) -> tuple[str | None, str | None]:
    """The repo id (and the file, when one is named) held by the innermost
    frame of ``exc``'s traceback that names one in ``_REPO_LOCALS``."""
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    for frame in reversed(frames):
        local = frame.f_locals
        for name in _REPO_LOCALS:
            if _is_repo_id(local.get(name)):
                filename = local.get("filename")
                return local[name], filename if isinstance(filename, str) else None
    return None, None


def _in_cache(repo: str) -> bool:
    """Whether the Hugging Face cache this run reads (``HF_HOME``) holds ``repo`` at all."""
    try:
        from huggingface_hub.constants import HF_HUB_CACHE
    except ImportError:
        return False
    return os.path.isdir(os.path.join(HF_HUB_CACHE, "models--" + repo.replace("/", "--")))


def _hub_reason(repo: str | None, filename: str | None = None) -> str:
    """The reason for a test that needs ``repo`` from the hub: the repo
    alone, or the file it lacks when the cache holds the repo."""
    if repo is None:
        return "needs the Hugging Face hub (offline, the model is not named)"
    if filename and _in_cache(repo):
        return f"needs {filename} of {repo} from the Hugging Face hub (the offline cache holds the repo without it)"
    return f"needs {repo} from the Hugging Face hub (not in the offline cache)"


def _host(text: str) -> str | None:
    m = re.search(r"host='([^']+)'", text) or re.search(r"https?://([^/:'\s]+)", text)
    return m.group(1) if m else None


def offline_reason(exc: BaseException) -> str | None:
    """Why ``exc`` says the test needs what an offline machine lacks, or None
    when it does not: huggingface_hub's offline errors
    (``LocalEntryNotFoundError``, ``OfflineModeIsEnabled``; transformers
    raises its ``OSError`` from them) or vLLM's "Invalid repository ID or
    local directory specified" anywhere in the exception's chain give
    ``needs <repo> from the Hugging Face hub (not in the offline cache)``, the
    repo read from the message or from the traceback's frames (the innermost
    one holding ``repo_id``, ``path_or_repo_id``, ...); a failed name
    resolution or connection to a host other than this machine
    (``socket.gaierror``, requests' or httpx's connection errors) gives
    ``needs the network (<host>)``. A connection refused by a local server is
    not offline (the server under test died)."""
    hub_errors: tuple[type, ...] = ()
    network_errors: tuple[type, ...] = (socket.gaierror,)
    try:
        from huggingface_hub.errors import LocalEntryNotFoundError, OfflineModeIsEnabled

        hub_errors = (LocalEntryNotFoundError, OfflineModeIsEnabled)
    except ImportError:
        pass
    try:
        import requests

        network_errors += (requests.exceptions.ConnectionError,)
    except ImportError:
        pass
    try:
        import httpx

        network_errors += (httpx.ConnectError,)
    except ImportError:
        pass
    chain = _chain(exc)
    for e in chain:
        m = _VLLM_NO_REPO.search(str(e))
        if m:
            return _hub_reason(m.group(1))
    for e in chain:
        if isinstance(e, hub_errors):
            for inner in chain:
                repo, filename = _repo_in_frames(inner)
                if repo:
                    return _hub_reason(repo, filename)
            return _hub_reason(None)
    for e in chain:
        if isinstance(e, network_errors):
            host = _host(str(e))
            if isinstance(e, socket.gaierror) or (host and host not in _LOCAL_HOSTS):
                return f"needs the network ({host or 'a name it could not resolve'})"
    return None


def offline_reason_in_text(text: str) -> str | None:
    """``offline_reason`` for a report that kept only text (a module that did
    not import: pytest keeps its formatted traceback, not the exception): the
    same hub and name-resolution errors, recognised by their messages."""
    if _HUB_TEXT.search(text):
        m = _VLLM_NO_REPO.search(text) or re.search(rf"\b(?:{'|'.join(_REPO_LOCALS)}) = '([^']+)'", text)
        return _hub_reason(m.group(1) if m and _is_repo_id(m.group(1)) else None)
    if _NETWORK_TEXT.search(text):
        return f"needs the network ({_host(text) or 'a name it could not resolve'})"
    return None


def _write(record: dict) -> None:
    path = os.environ.get(RESULTS_ENV)
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(record) + "\n")


def _skip_reason(report) -> str:
    if hasattr(report, "wasxfail"):
        return f"xfail: {report.wasxfail}" if report.wasxfail else "xfail"
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return reason.removeprefix("Skipped: ")


def _error_line(report) -> str:
    """The first line of the exception a failed report holds (pytest's
    ``reprcrash``), else the first ``E`` line of its text."""
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None and crash.message.strip():
        return crash.message.strip().splitlines()[0][:400]
    lines = [line for line in str(report.longrepr).splitlines() if line.strip()]
    errors = [line[1:].strip() for line in lines if line.startswith("E ")]
    return (errors[0] if errors else lines[-1] if lines else f"{report.when} failed")[:400]


def pytest_sessionstart(session):
    """Record the ``vllm`` this run imports (or why it does not import)."""
    try:
        import vllm

        _write({"kind": "vllm", "file": vllm.__file__, "version": vllm.__version__})
    except Exception as e:  # reported by the job, which refuses a run without the line's vllm
        _write({"kind": "vllm", "error": f"{type(e).__name__}: {e}"})


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """A module that does not import because the hub or the network is out
    of reach: skipped, with the reason."""
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        reason = offline_reason_in_text(str(report.longrepr))
        if reason:
            report.outcome = "skipped"
            report.longrepr = (str(collector.path), 0, f"offline: {reason}")


def pytest_collectreport(report):
    """Record a module that did not import, or that upstream skips whole."""
    if report.nodeid and (report.failed or report.skipped):
        record = {"kind": "result", "node": report.nodeid, "when": "collect", "outcome": report.outcome,
                  "message": _skip_reason(report) if report.skipped else _error_line(report)}
        if report.failed:
            record["detail"] = str(report.longrepr)[-6000:]
        _write(record)


def pytest_collection_finish(session):
    """Record the node ids selected (after ``-k``)."""
    _write({"kind": "selected", "nodes": [item.nodeid for item in session.items]})


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A test stopped by the hub or the network out of reach: skipped, with the reason."""
    outcome = yield
    report = outcome.get_result()
    if report.failed and call.excinfo is not None:
        reason = offline_reason(call.excinfo.value)
        if reason:
            report.outcome = "skipped"
            report.longrepr = (str(item.path), (item.location[1] or 0) + 1, f"offline: {reason}")


def pytest_runtest_logreport(report):
    """Record each phase's outcome (a failure with its error line and pytest's report)."""
    record = {"kind": "result", "node": report.nodeid, "when": report.when, "outcome": report.outcome,
              "message": ""}
    if report.skipped:
        record["message"] = _skip_reason(report)
    elif report.failed:
        record["message"] = _error_line(report)
        record["detail"] = report.longreprtext[-6000:]
    _write(record)
