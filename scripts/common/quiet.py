"""A quiet terminal for the main job, the matrix and the benchmarks: vLLM's
output goes to a log file, the job's own lines, progress bars and tables
stay on the terminal.

``quiet_vllm("smoke")`` (called first thing in a job's ``main``):

- points file descriptors 1 and 2 at ``reports/logs/smoke.log``, so that
  whatever is written to them goes there: the engine processes vLLM spawns
  (they inherit them), native code (torch's C++ warnings) and anything that
  writes to ``sys.__stdout__`` / ``sys.__stderr__``;
- gives Python's ``sys.stdout`` and ``sys.stderr`` copies of the terminal's
  descriptors, so ``print`` and tqdm (which writes to ``sys.stderr``) still
  reach the terminal;
- makes vLLM's own log lines go to the same file in every process, through
  upstream's ``VLLM_LOGGING_CONFIG_PATH`` (a ``logging.FileHandler`` with
  vLLM's formatter), and Python warnings and torch's log lines too;
- says on the terminal where the log is.

``VERBOSE=1`` turns it off (everything on the terminal, as before).
"""

from __future__ import annotations

import io
import json
import logging
import os
import sys
import warnings
from pathlib import Path

from scripts.common.paths import REPO, REPORTS

LOGS = REPORTS / "logs"


def _terminal_stream(fd: int) -> io.TextIOWrapper:
    """A line-buffered text stream on a duplicate of ``fd``."""
    return io.TextIOWrapper(io.FileIO(os.dup(fd), "w"), encoding="utf-8", errors="replace",
                            line_buffering=True, write_through=True)


def quiet_vllm(job: str, directory: Path = LOGS) -> Path | None:
    """Send vLLM's output of this process and of the processes it starts to
    ``directory/<job>.log`` (truncated first) and keep ``print`` and progress
    bars on the terminal; print the log's path there. Returns the path, or
    None when ``VERBOSE=1`` is set (nothing changed). Call it before vLLM is
    imported and before any engine starts; once per process."""
    if os.environ.get("VERBOSE") == "1":
        return None
    directory.mkdir(parents=True, exist_ok=True)
    log = directory / f"{job}.log"
    log.write_text("")
    config = directory / f"{job}.logging.json"
    config.write_text(json.dumps({
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"vllm": {"class": "vllm.logging_utils.NewLineFormatter",
                                "format": "%(levelname)s %(asctime)s [%(fileinfo)s:%(lineno)d] %(message)s",
                                "datefmt": "%m-%d %H:%M:%S"}},
        "handlers": {"vllm": {"class": "logging.FileHandler", "filename": str(log), "mode": "a",
                              "formatter": "vllm", "level": os.environ.get("VLLM_LOGGING_LEVEL", "INFO")}},
        "loggers": {"vllm": {"handlers": ["vllm"], "level": os.environ.get("VLLM_LOGGING_LEVEL", "INFO"),
                             "propagate": False}},
    }, indent=2))
    os.environ["VLLM_LOGGING_CONFIG_PATH"] = str(config)
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

    # torch's logging handlers bind to the sys.stderr of the moment it is
    # imported: importing it before the swap sends its warnings (e.g. "No CUDA
    # runtime is found") to the standard error that goes to the log below.
    import torch  # noqa: F401

    sys.stdout.flush()
    sys.stderr.flush()
    terminal_out, terminal_err = _terminal_stream(1), _terminal_stream(2)
    fd = os.open(log, os.O_WRONLY | os.O_APPEND)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout, sys.stderr = terminal_out, terminal_err
    log_stream = open(log, "a", buffering=1, encoding="utf-8")
    # From torch 2.14 the "torch" logger's handler (torch._logging's _StderrHandler, a
    # logging.Handler whose ``stream`` property is sys.stderr at each record) writes to
    # the terminal now: its console handlers write to the log instead, with their
    # level, format and filters.
    torch_logger = logging.getLogger("torch")
    for handler in list(torch_logger.handlers):
        if not isinstance(handler, logging.FileHandler) and hasattr(handler, "stream"):
            to_file = logging.StreamHandler(log_stream)
            to_file.setLevel(handler.level)
            to_file.setFormatter(handler.formatter)
            for f in handler.filters:
                to_file.addFilter(f)
            torch_logger.removeHandler(handler)
            torch_logger.addHandler(to_file)

    def to_log(message, category, filename, lineno, file=None, line=None):
        log_stream.write(warnings.formatwarning(message, category, filename, lineno, line))

    warnings.showwarning = to_log
    print(f"vLLM's output (log lines, engine processes): {log.relative_to(REPO) if log.is_relative_to(REPO) else log}",
          flush=True)
    return log
