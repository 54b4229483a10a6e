"""BGE-M3 offline as its users call it (patch 0017): ``LLM.encode(prompts,
pooling_task="embed&token_classify")`` on a model left at its default
pooling task returns, per prompt, the dense embedding followed by the
sparse weight of every token but the first and last, equal to FlagEmbedding's
recipe on the same weights (``scripts.validation.references.bgem3``), on the runner
vLLM picks (MRV2, asserted) and on V1. Before the patch both runners failed
on an ``AssertionError`` in ``LLM.encode`` (no front-end processor for the
task)."""

from __future__ import annotations

import pytest

from scripts.validation import references as ref
from scripts.validation.engine import assert_runner, close_llm, open_llm
from scripts.validation.matrix import max_abs_error
from scripts.validation.matrix_rows import case
from scripts.validation.matrix_tasks import PROMPTS


@pytest.fixture(scope="module")
def bge_m3(tmp_path_factory):
    return case("bge-m3").make(tmp_path_factory.mktemp("bge-m3") / "model")


@pytest.mark.parametrize("runner", ["MRV2", "V1"])
def test_bge_m3_dense_and_sparse_in_one_call(bge_m3, runner, monkeypatch):
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    want = ref.bgem3(bge_m3, PROMPTS, part="dense+sparse")
    llm = open_llm(bge_m3, runner="default" if runner == "MRV2" else "v1", kv_cache_memory_bytes=64 << 20)
    try:
        assert_runner(llm, runner)
        assert llm.pooling_task == "embed&token_classify"
        outputs = llm.encode(PROMPTS, pooling_task="embed&token_classify", use_tqdm=False)
        got = [o.outputs.data.float().numpy() for o in outputs]
    finally:
        close_llm(llm)
        from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

        cleanup_dist_env_and_memory()
    assert [g.shape for g in got] == [w.shape for w in want]
    assert max_abs_error(got, want) <= 1e-4
