"""A measured system's process: ``python -m scripts.bench.host --in FD --out FD``.

The bench (``scripts.bench.systems.System``) starts one host per system, with
the interpreter of the system's environment, and talks to it over two pipes
(``scripts.bench.protocol``); the host's standard output and error are free
for the libraries it runs (they go to the bench's log).

Messages, bench -> host, answered in order:

- ``{"op": "open", "factory": "module:Class", "args": {...}}`` (first):
  imports the class and builds the system, ``Class(**args)``; answers
  ``{"ok": true, "info": system.info(), "pid": ...}``.
- ``{"op": NAME, "args": {...}}``: calls ``system.op_NAME(**args)`` and
  answers ``{"ok": true, "result": ..., "wall_s": seconds}`` (``wall_s``: the
  call's own time, ``time.perf_counter``), with an array when the method
  returned ``(result, array)``.
- ``{"op": "close"}``: ``system.close()`` if it has one, answers, exits 0.

A method that raises answers ``{"ok": false, "error": "Type: message",
"traceback": ...}`` and the host goes on serving. A system class needs only
``info() -> dict`` and its ``op_*`` methods; imports of heavy libraries
belong in them, so that this module starts in any environment (standard
library and numpy).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
import traceback

from scripts.bench.protocol import ProtocolError, receive, send


def load(factory: str):
    """The class (or callable) named ``"module:attribute"``; ``ValueError``
    without the colon, ``ImportError``/``AttributeError`` when missing."""
    module, sep, attr = factory.partition(":")
    if not sep:
        raise ValueError(f"factory {factory!r}: expected 'module:attribute'")
    return getattr(importlib.import_module(module), attr)


def _error(e: BaseException) -> dict:
    return {"ok": False, "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}


def serve(inp, out) -> int:
    """Answer messages from the binary stream ``inp`` on ``out`` until
    ``close`` or the bench closes the pipe; 0, or 1 when the system failed
    to open (the answer says why)."""
    system = None
    while True:
        try:
            msg, array = receive(inp)
        except ProtocolError:
            break  # the bench went away
        op = msg.get("op")
        if op == "open":
            try:
                system = load(msg["factory"])(**msg.get("args", {}))
                send(out, {"ok": True, "info": system.info(), "pid": os.getpid()})
            except Exception as e:  # noqa: BLE001 - answered, then the host ends
                send(out, _error(e))
                return 1
            continue
        if op == "close":
            try:
                if system is not None and hasattr(system, "close"):
                    system.close()
                send(out, {"ok": True})
            except Exception as e:  # noqa: BLE001 - answered
                send(out, _error(e))
            break
        try:
            if system is None:
                raise RuntimeError("no system open: the first message must be 'open'")
            method = getattr(system, f"op_{op}", None)
            if method is None:
                raise AttributeError(f"{type(system).__name__} has no operation {op!r}")
            args = msg.get("args", {})
            if array is not None:
                args = {**args, "array": array}
            start = time.perf_counter()
            value = method(**args)
            wall = time.perf_counter() - start
            result, payload = value if isinstance(value, tuple) else (value, None)
            send(out, {"ok": True, "result": result, "wall_s": wall}, payload)
        except Exception as e:  # noqa: BLE001 - answered, the host goes on
            send(out, _error(e))
    return 0


def main(argv=None) -> int:
    """Command line: the two pipe descriptors the bench passed."""
    parser = argparse.ArgumentParser(prog="python -m scripts.bench.host", description=__doc__.split("\n\n")[0])
    parser.add_argument("--in", dest="inp", type=int, required=True, help="descriptor to read messages from")
    parser.add_argument("--out", type=int, required=True, help="descriptor to write answers to")
    args = parser.parse_args(argv)
    with os.fdopen(args.inp, "rb", buffering=0) as inp, os.fdopen(args.out, "wb") as out:
        return serve(inp, out)


if __name__ == "__main__":
    sys.exit(main())
