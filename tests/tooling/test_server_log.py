"""What a failed ``vllm serve`` start says (``VllmServer.log_tail``): the
engine core's and the worker's ERROR lines, which hold the root cause, come
before the log's tail, whose API-server traceback only says that the engine
core failed. The log below has the shape of a real one (a worker that could
not import its extension class, logged without a process prefix, and the
engine core's traceback with one)."""

from __future__ import annotations

from scripts.validation.server import VllmServer

LOG = """\
$ vllm serve /models/tiny --port 1234
(APIServer pid=10) INFO 11-30 18:26:08 [api_server.py:1] vLLM API server version 0.26.0
(Worker pid=12) INFO 11-30 18:27:39 [model_runner.py:286] Loading model from scratch...
ERROR 11-30 18:27:40 [multiproc_executor.py:901] ModuleNotFoundError: No module named 'scripts'
(EngineCore pid=11) ERROR 11-30 18:27:46 [core.py:1336] EngineCore failed to start.
(APIServer pid=10) INFO 11-30 18:27:47 [api_server.py:2] shutting down
""" + "\n".join(f"(APIServer pid=10)   frame {i}" for i in range(50)) + """
(APIServer pid=10) RuntimeError: Engine core initialization failed. See root cause above.
"""


def test_failed_start_names_the_root_cause_before_the_tail(tmp_path):
    log = tmp_path / "server.log"
    log.write_text(LOG)
    server = VllmServer("/models/tiny", log=log, executable="vllm")
    lines = server.log_tail(lines=5).splitlines()
    assert lines == [
        "engine core / worker errors:",
        "ERROR 11-30 18:27:40 [multiproc_executor.py:901] ModuleNotFoundError: No module named 'scripts'",
        "(EngineCore pid=11) ERROR 11-30 18:27:46 [core.py:1336] EngineCore failed to start.",
        "...",
        "log tail:",
        *[f"(APIServer pid=10)   frame {i}" for i in range(46, 50)],
        "(APIServer pid=10) RuntimeError: Engine core initialization failed. See root cause above.",
        f"(full log: {log})",
    ]


def test_clean_log_gives_the_tail_alone(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("\n".join(f"(APIServer pid=10) INFO line {i}" for i in range(10)) + "\n")
    server = VllmServer("/models/tiny", log=log, executable="vllm")
    assert server.log_tail(lines=2).splitlines() == [
        "(APIServer pid=10) INFO line 8", "(APIServer pid=10) INFO line 9", f"(full log: {log})"]
