"""MRV2 pooling, part 2 (patches 0004, 0005, 0006): ColBERT-style late
interaction through the LateInteractionRunner (the query encoded once per
``LLM.score`` call, cached query embeddings released, aborted documents), the
ColBERT start-up fault. Through the engine on the CPU, fp32, against
transformers references; every engine is opened by ``vllm_runner``, which
asserts the runner that ran. (MiniLM's token_embed against transformers is the
matrix's ``minilm-token-embed`` rows, in ``tests/e2e/test_matrix.py``.)"""

from __future__ import annotations

import numpy as np
import pytest

from scripts.validation.engine import (count_late_interaction_requests, late_interaction_counts,
                                       late_interaction_state, maxsim, vllm_runner)
from scripts.validation.checkpoints.zoo import make_tiny_colbert
from scripts.validation.references import colbert_tokens
from tests.e2e.support import drain

TOL = 1e-4  # docs/validation.md (upstream's bar for ColBERT was 1e-2)


@pytest.fixture(scope="module")
def colbert(tmp_path_factory):
    return make_tiny_colbert(tmp_path_factory.mktemp("models") / "tiny-hf-colbert")


@pytest.fixture(scope="module")
def colbert_modernbert(tmp_path_factory):
    return make_tiny_colbert(tmp_path_factory.mktemp("models") / "tiny-modernbert-colbert", "modernbert")


def token_embed(llm, prompts):
    return [o.outputs.data.float().numpy() for o in
            llm.encode(prompts, pooling_task="token_embed", use_tqdm=False)]


def score_call(llm, query, docs):
    """``LLM.score(query, docs)`` (a query and N documents, or N:N lists), with
    the worker's request counts and late-interaction state afterwards."""
    llm.collective_rpc(count_late_interaction_requests)
    scores = [o.outputs.score for o in llm.score(query, docs, use_tqdm=False)]
    (counts,) = llm.collective_rpc(late_interaction_counts)
    (state,) = llm.collective_rpc(late_interaction_state)
    return scores, counts, state


def scores_on_mrv2(model, calls: list[tuple[str | list[str], list[str]]]) -> list[tuple[list[float], dict]]:
    """``LLM.score(queries, docs)`` for each of ``calls`` on one MRV2 engine
    (vLLM's default, asserted): 1:N when ``queries`` is a string, N:N (query
    i with document i) when it is a list. For each call the token embeddings
    of its texts match ``colbert_tokens``, the scores match MaxSim over
    them, each query was encoded once and nothing stays cached. Returns each
    call's scores and request counts by late-interaction mode."""
    results = []
    with vllm_runner(model, "default") as llm:
        for queries, docs in calls:
            texts = ([queries] if isinstance(queries, str) else queries) + docs
            results.append((texts, token_embed(llm, texts), *score_call(llm, queries, docs)))
    checked = []
    for texts, tokens, scores, counts, state in results:
        ref = colbert_tokens(model, texts)
        for got, want in zip(tokens, ref, strict=True):
            assert got.shape == want.shape and want.shape[1] == 32
            np.testing.assert_allclose(got, want, rtol=0, atol=TOL)
        n_queries = len(texts) - len(scores)
        pairs = [(0 if n_queries == 1 else i, n_queries + i) for i in range(len(scores))]
        np.testing.assert_allclose(scores, [maxsim(ref[q], ref[d]) for q, d in pairs], rtol=0, atol=TOL)
        assert counts == {"cache_query": n_queries, "score_doc": len(scores)}  # one forward per query
        assert state == {"cached_queries": [], "query_uses": {}, "pending_docs": 0}
        checked.append((scores, counts))
    return checked


def scoring_calls(sts) -> list[tuple[str | list[str], list[str]]]:
    """1 query with 1 and with 8 documents, and 2 queries paired with 2 documents (N:N)."""
    return [(sts.first[0], sts.second[:1]), (sts.first[0], sts.second[:8]), (sts.first[1:3], sts.second[8:10])]


def test_colbert_scoring_encodes_each_query_once(sts, colbert, in_process):
    """``LLM.score`` for ``scoring_calls`` on MRV2 (``scores_on_mrv2``), one
    engine for all calls."""
    on_mrv2 = scores_on_mrv2(colbert, scoring_calls(sts))
    assert [(len(scores), counts["cache_query"]) for scores, counts in on_mrv2] == [(1, 1), (8, 1), (2, 2)]


@pytest.mark.v1
def test_colbert_scoring_on_v1_gives_mrv2s_scores_and_counts(sts, colbert, in_process):
    """The same calls on V1 (where the base has it): MaxSim over the reference
    token embeddings, each query encoded once."""
    calls = scoring_calls(sts)
    with vllm_runner(colbert, "v1") as llm:
        on_v1 = [score_call(llm, q, d) for q, d in calls]
    for (queries, docs), (scores, counts, _) in zip(calls, on_v1, strict=True):
        texts = ([queries] if isinstance(queries, str) else queries) + docs
        ref = colbert_tokens(colbert, texts)
        n_queries = len(texts) - len(scores)
        pairs = [(0 if n_queries == 1 else i, n_queries + i) for i in range(len(scores))]
        np.testing.assert_allclose(scores, [maxsim(ref[q], ref[d]) for q, d in pairs], rtol=0, atol=TOL)
        assert counts == {"cache_query": n_queries, "score_doc": len(scores)}


def test_modernbert_colbert_with_declared_dim_starts_and_scores(sts, colbert_modernbert, in_process):
    """The other ColBERT backbone buildable small (patch 0005 changed where
    every backbone builds its projection): starts with ``dim`` declared,
    token embeddings and scores match transformers on MRV2."""
    ((scores, counts),) = scores_on_mrv2(colbert_modernbert, [(sts.first[1], sts.second[:4])])
    assert (len(scores), counts) == (4, {"cache_query": 1, "score_doc": 4})


def test_aborted_documents_release_the_cached_query(colbert, monkeypatch):
    """A query cached for 4 documents; 2 documents aborted while waiting (the
    worker never saw them; patch 0006): once the others are scored and the
    worker has run the next step, no query embedding stays cached. Engine
    core in this process, so steps are ours."""
    from vllm import PoolingParams
    from vllm.v1.pool.late_interaction import (build_late_interaction_doc_params,
                                               build_late_interaction_query_params)

    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    q = [2000, 2001, 2002, 2003]
    docs = [[3000 + i, 3100 + i, 3200 + i] for i in range(4)]

    def scenario(llm):
        eng = llm.llm_engine
        eng.add_request("q", {"prompt_token_ids": q}, PoolingParams(
            task="token_embed", late_interaction_params=build_late_interaction_query_params("k", 4)))
        drain(eng)
        (cached,) = llm.collective_rpc(late_interaction_state)
        for i, d in enumerate(docs[:3]):
            eng.add_request(f"d{i}", {"prompt_token_ids": d}, PoolingParams(
                task="token_embed", late_interaction_params=build_late_interaction_doc_params("k")))
        eng.abort_request(["d1"])  # never scheduled
        outs, _ = drain(eng)
        (middle,) = llm.collective_rpc(late_interaction_state)
        eng.add_request("d3", {"prompt_token_ids": docs[3]}, PoolingParams(
            task="token_embed", late_interaction_params=build_late_interaction_doc_params("k")))
        eng.abort_request(["d3"])
        # Workers hear of finished requests with the next step: run one.
        eng.add_request("other", {"prompt_token_ids": docs[0]}, PoolingParams(task="token_embed"))
        drain(eng)
        (after,) = llm.collective_rpc(late_interaction_state)
        return cached, outs, middle, after

    with vllm_runner(colbert, "v2") as llm:
        cached, outs, middle, after = scenario(llm)
    assert cached == {"cached_queries": ["k"], "query_uses": {"k": 4}, "pending_docs": 0}
    assert sorted(outs) == ["d0", "d2"]
    ref = colbert_tokens(colbert, [q] + docs)
    for name, d in (("d0", ref[1]), ("d2", ref[3])):
        assert abs(float(outs[name].outputs.data) - maxsim(ref[0], d)) <= TOL
    assert middle == {"cached_queries": ["k"], "query_uses": {"k": 1}, "pending_docs": 0}
    assert after == {"cached_queries": [], "query_uses": {}, "pending_docs": 0}
