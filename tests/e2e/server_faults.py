"""Bad input for ``tests/e2e/test_server.py`` (``FAULTS`` there): each
endpoint with empty input, a prompt over max_model_len, a wrong model name,
a task the model does not serve, malformed JSON, a base64 request where the
endpoint cannot give it and token ids outside the vocabulary (issue 28), sent
while a concurrent stream of good requests must stay correct
(``check_faults``); and concurrent requests of different clients that carry
the same ``X-Request-Id`` header (``check_shared_request_id``)."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor

import requests

from scripts.validation.checkpoints.models import MINILM_VOCAB

LONG = "word " * 600  # over every model's max_model_len (MiniLM 256, the tiny BERTs 512)
QUERY = "A man is playing a guitar."


def post(server, path, body, timeout=300):
    """``requests.post`` of ``body`` as JSON to ``server``'s ``path``."""
    return requests.post(server.url(path), json=body, timeout=timeout)


ENDPOINTS = ("/v1/embeddings", "/pooling", "/classify", "/score", "/rerank")
GOOD = {"/v1/embeddings": {"input": "a cat"}, "/pooling": {"input": "a cat"}, "/classify": {"input": "a cat"},
        "/score": {"queries": QUERY, "documents": ["a cat"]}, "/rerank": {"query": QUERY, "documents": ["a cat"]}}
EMPTY = {"/v1/embeddings": {"input": []}, "/pooling": {"input": []}, "/classify": {"input": []},
         "/score": {"documents": []}, "/rerank": {"documents": []}}
TOO_LONG = {"/v1/embeddings": {"input": LONG}, "/pooling": {"input": LONG}, "/classify": {"input": LONG},
            "/score": {"documents": [LONG]}, "/rerank": {"documents": ["short", LONG]}}
EMPTY_MESSAGE = {"/v1/embeddings": "You must pass at least one prompt", "/pooling": "You must pass at least one prompt",
                 "/classify": "You must pass at least one prompt",
                 "/score": "At least one text_pair element must be given",
                 "/rerank": "At least one text_pair element must be given"}
ENCODES = ("/v1/embeddings", "/pooling")  # the endpoints with an encoding_format
# Token ids as input (issue 28): the endpoints that take them, and ids outside
# [0, vocabulary size) of the served models (all use MiniLM's 30,522 word pieces).
TOKEN_INPUT = ("/v1/embeddings", "/pooling", "/classify")
VOCAB_RANGE = f"[0, {MINILM_VOCAB})"
BAD_TOKEN_IDS = {"token id -1": ([101, -1, 102], -1),
                 "token id = vocabulary size": ([[101, 102], [101, 2023, MINILM_VOCAB, 102]], MINILM_VOCAB)}


def fault_cases(model: str, serves: set[str], max_len: int, pooling_tasks: dict[str, str]):
    """(endpoint, body or raw bytes, fault, status, words of the message) for
    every endpoint and fault. An endpoint the model does not serve answers
    every request with 404 naming that; ``pooling_tasks``: task asked of
    /pooling -> words of the refusal."""
    cases = []
    for e in ENDPOINTS:
        good = {"model": model, **GOOD[e]}
        if e not in serves:
            unserved = (404, [f"This server's model does not serve {e}"])
            cases += [(e, good, "task not served", *unserved),
                      (e, {**good, "encoding_format": "base64"}, "base64", *unserved)]
            continue
        cases += [
            (e, {**good, **EMPTY[e]}, "empty input", 400, [EMPTY_MESSAGE[e]]),
            (e, {**good, **TOO_LONG[e]}, "over max_model_len", 400, [f"maximum context length is {max_len} tokens"]),
            (e, {**good, "model": "no-such-model"}, "wrong model", 404, ["The model `no-such-model` does not exist"]),
            (e, json.dumps(good).encode()[:-5], "malformed JSON", 400, ["The request body is not valid JSON"]),
        ]
        if e not in ENCODES:
            cases.append((e, {**good, "encoding_format": "base64"}, "base64", 400,
                          ["encoding_format='base64' is not supported by this endpoint"]))
        if e in TOKEN_INPUT:
            cases += [(e, {**good, "input": ids}, fault, 400, [f"Token id {bad} is out of vocabulary", VOCAB_RANGE])
                      for fault, (ids, bad) in BAD_TOKEN_IDS.items()]
        else:  # /score and /rerank take text (or multimodal content) only
            field = "query" if e == "/rerank" else "queries"
            cases.append((e, {**good, field: [101, -1, 102]}, "token ids", 400, ["Input should be a valid string"]))
    # every server detokenizes; a negative id is refused by the request schema
    tokens = {"model": model, "tokens": [101, MINILM_VOCAB, 102]}
    cases += [("/detokenize", tokens, "token id = vocabulary size", 400,
               [f"Token id {MINILM_VOCAB} is out of vocabulary", VOCAB_RANGE]),
              ("/detokenize", {**tokens, "tokens": [101, -1, 102]}, "token id -1", 400,
               ["Input should be greater than or equal to 0"])]
    for task, words in pooling_tasks.items():
        cases.append(("/pooling", {"model": model, "input": "a cat", "task": task}, f"task {task}", 400, [words]))
    return cases


def send(server, endpoint, body):
    if isinstance(body, bytes):
        return requests.post(server.url(endpoint), data=body, headers={"Content-Type": "application/json"},
                             timeout=120)
    return post(server, endpoint, body, timeout=120)


def check_faults(server, serves: set[str], max_len: int, pooling_tasks: dict[str, str], good,
                 runner: str = "MRV2") -> None:
    """Send every case of ``fault_cases`` (``serves``, ``max_len``,
    ``pooling_tasks``: see there) to ``server`` while another client sends
    ``good`` = (endpoint, body without the model, check of the answer) again
    and again: each case gets its status and a message with its words, every
    good answer is correct, the worker still runs ``runner`` ("MRV2" or
    "V1"). Prints the rows (endpoint | fault | status | message)."""
    model = server.served_model()
    cases = fault_cases(model, serves, max_len, pooling_tasks)
    good = (good[0], {"model": model, **good[1]}, good[2])
    stop, results = threading.Event(), []

    def stream():
        while not stop.is_set():
            r = post(server, good[0], good[1], timeout=120)
            results.append(r.status_code == 200 and good[2](r.json()))

    thread = threading.Thread(target=stream)
    thread.start()
    rows, failures = [], []
    try:
        for endpoint, body, fault, status, words in cases:
            r = send(server, endpoint, body)
            try:
                message = r.json()["error"]["message"]
            except (ValueError, KeyError, TypeError):
                message = r.text
            rows.append((endpoint, fault, r.status_code, message))
            if r.status_code != status or not all(w in message for w in words):
                failures.append(f"{endpoint} {fault}: {r.status_code} {message!r} (want {status} naming {words})")
    finally:
        stop.set()
        thread.join()
    print("\n" + "\n".join(f"| {server.name} | {e} | {f} | {s} | {m[:200]!r} |" for e, f, s, m in rows))
    assert failures == [], "\n".join(failures)  # (a helper module: pytest does not rewrite its asserts)
    assert results and all(results), f"good requests: {results.count(False)} of {len(results)} wrong"
    assert server.runner() == runner, f"{server.runner()} ran, {runner} expected"  # still serving, same worker


SHARED_REQUEST_ID = "the-same-id"


def check_shared_request_id(server, cases, rounds: int = 3, runner: str = "MRV2") -> None:
    """Different clients' requests that carry the same ``X-Request-Id``
    header (issue 28): every round sends all ``cases`` = [(endpoint, body
    without the model, check of the answer)] at once, each with the header
    ``SHARED_REQUEST_ID``; every answer must be 200 and pass its own check
    (its own input's result, not another client's), ``rounds`` times; the
    worker still runs ``runner`` afterwards."""
    model = server.served_model()

    def one(case):
        endpoint, body, _ = case
        r = requests.post(server.url(endpoint), json={"model": model, **body},
                          headers={"X-Request-Id": SHARED_REQUEST_ID}, timeout=300)
        try:
            return r.status_code, r.json()
        except ValueError:
            return r.status_code, r.text

    failures = []
    with ThreadPoolExecutor(len(cases)) as pool:
        for round_ in range(rounds):
            for (endpoint, body, check), (status, answer) in zip(cases, pool.map(one, cases)):
                if status != 200 or not check(answer):
                    failures.append(f"round {round_} {endpoint} {json.dumps(body)[:80]}: {status} "
                                    f"{str(answer)[:300]}")
    assert failures == []
    assert server.runner() == runner, f"{server.runner()} ran, {runner} expected"  # still serving, same worker


