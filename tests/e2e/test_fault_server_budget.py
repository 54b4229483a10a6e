"""Issue 28, item 1, through ``vllm serve``: an encoder-only model (a tiny
BERT, 512 positions) started with ``--enable-chunked-prefill
--max-num-batched-tokens 32`` accepted prompts longer than 32 tokens and
never ran them (bidirectional attention cannot run a prompt in chunks, so
the engine turns chunked prefill off). The server must refuse that
configuration at start-up, as it does without the flag, on MRV2 (vLLM's
default) and V1; with ``--max-model-len 32`` it serves, and a longer
prompt gets a 400 at once while prompts that fit get transformers' CLS
embeddings. The three servers start at once."""

from __future__ import annotations

import random

import numpy as np
import pytest
import requests

from scripts.validation.checkpoints.models import MODELS
from scripts.validation.checkpoints.zoo import make_tiny_bert
from scripts.validation.engine import base_runners
from scripts.validation.references import embed
from scripts.validation.server import ServerError, VllmServer

BUDGET = 32
FLAGS = ("--enable-chunked-prefill", "--max-num-batched-tokens", str(BUDGET))
TOL = 1e-4


@pytest.fixture(scope="module")
def servers():
    model = make_tiny_bert(MODELS / "tiny-bert-base")
    launched = {"refused-default": VllmServer(model, *FLAGS, name="budget-refused-default"),
                "fits": VllmServer(model, *FLAGS, "--max-model-len", str(BUDGET), name="budget-fits")}
    if "V1" in base_runners():
        launched["refused-v1"] = VllmServer(model, *FLAGS, name="budget-refused-v1", runner="v1")
    try:
        for server in launched.values():
            server.launch()
        yield launched
    finally:
        for server in launched.values():
            server.stop()


@pytest.mark.parametrize("name", ["refused-default", pytest.param("refused-v1", marks=pytest.mark.v1)])
def test_budget_below_max_model_len_refused_at_startup(servers, name):
    server = servers[name]
    with pytest.raises(ServerError):
        server.wait_ready()
    log = server.log.read_text(errors="replace")
    assert f"max_num_batched_tokens ({BUDGET}) is smaller than max_model_len (512)" in log
    assert "Chunked prefill, which was enabled, cannot help: this model's prompts cannot run in chunks" in log


def test_budget_holding_max_model_len_serves_and_refuses_longer_prompts(servers):
    server = servers["fits"].wait_ready()
    assert server.runner() == "MRV2"
    rng = random.Random(28)
    prompts = [[101] + [rng.randrange(1000, 29000) for _ in range(n - 2)] + [102] for n in (BUDGET, 9, BUDGET)]
    model = server.served_model()
    r = requests.post(server.url("/v1/embeddings"), json={"model": model, "input": prompts}, timeout=120)
    assert r.status_code == 200, r.text
    got = np.asarray([d["embedding"] for d in sorted(r.json()["data"], key=lambda d: d["index"])])
    np.testing.assert_allclose(got, np.stack(embed(server.model, prompts, pooling="CLS")), rtol=0, atol=TOL)
    r = requests.post(server.url("/v1/embeddings"), json={"model": model, "input": [101] + [2000] * 38 + [102]},
                      timeout=120)
    assert r.status_code == 400
    assert f"maximum context length is {BUDGET} tokens" in r.json()["error"]["message"]
    assert "prompt contains 40 input tokens" in r.json()["error"]["message"]
