"""``vllm serve --shutdown-timeout N`` drains (docs/deploying.md,
"Draining"): on SIGTERM, what Kubernetes and ``docker stop`` send, the
server stops accepting connections, the requests in flight finish and get
their answers, and the server exits. Found by the deployment page's trial
on revision 12: every pooling request in flight got a 500 "cannot schedule
new futures after shutdown", because the engine client's shutdown stops the
renderer's thread pool, which tokenises a pooling request's inputs and
builds its response, before the engine drains; the server exited within
seconds, having answered none of them. With several API servers
(``--api-server-count 2``) the process that made the listening socket
keeps a copy of it, which still accepted connections into its backlog."""

from __future__ import annotations

import signal
import threading
import time

import numpy as np
import psutil
import pytest
import requests

from scripts.validation.checkpoints.models import minilm_path, sts_test
from scripts.validation.references import hf_mean_embed
from scripts.validation.server import VllmServer

REQUESTS, PER_REQUEST = 6, 256
TIMEOUT_S = 60


def running(server) -> float:
    """``vllm:num_requests_running`` plus ``..._waiting`` from ``/metrics``."""
    text = requests.get(server.url("/metrics"), timeout=10).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(("vllm:num_requests_running{", "vllm:num_requests_waiting{")))


def connections_to(port: int) -> int:
    """This process's established TCP connections to ``port`` on 127.0.0.1."""
    return sum(1 for c in psutil.Process().net_connections("tcp")
               if c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED)


@pytest.mark.parametrize("api_servers", [1, 2])
def test_sigterm_with_shutdown_timeout_answers_requests_in_flight(api_servers):
    pairs = sts_test()
    sentences = (pairs.first + pairs.second)[: REQUESTS * PER_REQUEST]
    batches = [sentences[i * PER_REQUEST:(i + 1) * PER_REQUEST] for i in range(REQUESTS)]
    want = hf_mean_embed(minilm_path(), batches[0]).astype(np.float64)
    answers: dict[int, requests.Response | Exception] = {}

    def post(i: int) -> None:
        try:
            answers[i] = requests.post(server.url("/v1/embeddings"), json={"model": model, "input": batches[i]},
                                       timeout=TIMEOUT_S + 30)
        except requests.RequestException as e:
            answers[i] = e

    extra = [] if api_servers == 1 else ["--api-server-count", str(api_servers)]
    with VllmServer(minilm_path(), "--shutdown-timeout", str(TIMEOUT_S), *extra, name=f"drain-{api_servers}") as server:
        assert server.runner() == "MRV2"
        model = server.served_model()
        clients = [threading.Thread(target=post, args=(i,)) for i in range(REQUESTS)]
        for client in clients:
            client.start()
        # every request sent and the engine at work on them before the signal
        deadline = time.monotonic() + 60
        while (connections_to(server.port) < REQUESTS or running(server) == 0) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert connections_to(server.port) >= REQUESTS
        signalled = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        # a new connection while they are in flight is refused: a load balancer sends it to another replica
        late: object = None
        while late is None and time.monotonic() < signalled + 10:
            try:
                with requests.get(server.url("/version"), timeout=1):
                    pass
                time.sleep(0.05)
            except requests.ConnectionError as e:
                late = e
            except requests.Timeout:
                late = "timed out: the connection was accepted and not answered"
        refused_after = time.monotonic() - signalled
        in_flight_then = REQUESTS - len(answers)
        for client in clients:
            client.join()
        status = server.proc.wait(TIMEOUT_S + 30)
        exited_after = time.monotonic() - signalled
        log = server.log_tail(200)

    assert isinstance(late, requests.ConnectionError), (late, refused_after)
    assert in_flight_then > 0, refused_after
    assert {i: getattr(a, "status_code", repr(a)) for i, a in answers.items()} == dict.fromkeys(range(REQUESTS), 200)
    for i, answer in answers.items():
        got = np.asarray([d["embedding"] for d in answer.json()["data"]], dtype=np.float64)
        assert got.shape == (PER_REQUEST, 384)
        if i == 0:
            cosine = (got * want).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
            assert cosine.min() >= 0.99999
    assert status == 0, log
    assert exited_after < TIMEOUT_S, log
