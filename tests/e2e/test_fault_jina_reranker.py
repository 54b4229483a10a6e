"""Issue 28 item 3 (patch 0047): the Jina reranker's offline path
(``LLM.score`` with a ``JinaForRanking`` model) honours ``max_tokens_per_query``
and ``max_tokens_per_doc`` as the server's path does: a limited call scores
what an unlimited call scores on the texts cut beforehand to the limits (a
text cut at the end of its limit-th token, MiniLM's WordPiece: no token
splits a character), with the same prompt token ids. Before 0047 the
offline path ignored the limits (the limited call scored the whole texts).

The model is a tiny random ``JinaForRanking`` in jina-reranker-v3's layout
(``scripts.validation.checkpoints.zoo_published.make_jina_reranker``: Qwen3 backbone,
projector, a tokenizer with the embed/rerank tokens at Qwen's ids 151670 and
151671, which vLLM's pooler looks for); no transformers class computes its
scores, so the reference is vLLM's own unlimited call.

``JinaForRanking`` is a decoder whose one task is ``token_embed``. On the
0.26.0 line Model Runner V2 serves token-level pooling tasks for
encoder-only models only (``PoolingRunner._get_enabled_tasks``, upstream PR
50574, kept by patch 0011), so vLLM runs it on V1 by default and refuses
``VLLM_USE_V2_MODEL_RUNNER=1`` at start-up (asserted); from 0.28.0
upstream's pooling runner serves them on MRV2, vLLM's default for it on
later lines (asserted), and V1 runs the same call. The limits are applied
before the engine, in the scoring io-processor, whichever runner runs."""

from __future__ import annotations

import numpy as np
import pytest

from scripts.series.lines import get_line
from scripts.validation.engine import vllm_runner
from scripts.validation.checkpoints.models import MODELS
from scripts.validation.checkpoints.zoo_published import make_jina_reranker

QUERY = "what is the capital city of france and how large is its population today"
DOCS = ["paris is the capital and largest city of france with more than two million residents",
        "the river flows north through the old town past the cathedral and the market square",
        "a man is playing a guitar"]
MAX_QUERY, MAX_DOC = 5, 6
# The runner vLLM picks for the model on the line under test, and the runners the test opens.
DEFAULT_RUNNER = {"0.26.0": "V1", "0.32.0": "MRV2", "0.34.0": "MRV2"}[get_line().name]
RUNNERS = {"default": DEFAULT_RUNNER} | ({} if DEFAULT_RUNNER == "V1" else {"v1": "V1"})


@pytest.fixture(scope="module")
def model():
    return make_jina_reranker(MODELS / "tiny-jina-reranker")


def cut(tok, text: str, limit: int) -> str:
    """``text`` up to the end of its ``limit``-th token (no special tokens)."""
    enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    return text if len(enc["input_ids"]) <= limit else text[: enc["offset_mapping"][limit - 1][1]]


@pytest.mark.line("0.26.0")
def test_model_runner_v2_refuses_the_model(model, monkeypatch):
    from vllm.engine.arg_utils import EngineArgs

    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "1")
    with pytest.raises(ValueError, match="token-level pooling tasks run on MRV2 for encoder-only models only"):
        EngineArgs(model=str(model), runner="pooling").create_engine_config()


@pytest.mark.parametrize("runner", list(RUNNERS))
def test_offline_score_honours_the_token_limits(model, in_process, runner):
    from transformers import AutoTokenizer

    from vllm import PoolingParams

    tok = AutoTokenizer.from_pretrained(str(model))
    query, docs = cut(tok, QUERY, MAX_QUERY), [cut(tok, d, MAX_DOC) for d in DOCS]
    assert query != QUERY and docs[:2] != DOCS[:2] and docs[2] == DOCS[2]
    limits = PoolingParams(extra_kwargs={"max_tokens_per_query": MAX_QUERY, "max_tokens_per_doc": MAX_DOC})
    with vllm_runner(model, runner, want=RUNNERS[runner]) as llm:
        assert llm.llm_engine.vllm_config.model_config.architecture == "JinaForRanking"
        limited = llm.score(QUERY, DOCS, pooling_params=limits, use_tqdm=False)
        cut_first = llm.score(query, docs, use_tqdm=False)
        whole = llm.score(QUERY, DOCS, use_tqdm=False)
    scores = {name: np.array([o.outputs.score for o in out])
              for name, out in (("limited", limited), ("cut", cut_first), ("whole", whole))}
    assert [o.prompt_token_ids for o in limited] == [o.prompt_token_ids for o in cut_first]
    np.testing.assert_allclose(scores["limited"], scores["cut"], rtol=0, atol=1e-6)
    # the limits matter: the whole texts score otherwise
    assert np.abs(scores["whole"] - scores["cut"]).max() > 1e-3
