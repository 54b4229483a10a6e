"""The smoke job's verdict (``scripts.validation.smoke.check``): what README says it
asserts — MRV2 for both rows (MiniLM by default), the input preparation this
machine should use, DESIGN.md's cosine bar."""

from __future__ import annotations

from scripts.validation.smoke import check


def row(model="all-MiniLM-L6-v2", requested="default", runner="MRV2 (native)", preparation="native",
        min_cosine=0.999999):
    return {"model": model, "runner_requested": requested, "runner": runner,
            "input_preparation": preparation, "min_cosine": min_cosine}


def test_mrv2_with_the_expected_input_preparation_passes():
    assert check([row(), row(model="tiny-qwen3", requested="v2")], "native") == []


def test_minilm_on_v1_by_default_fails():
    assert check([row(runner="V1", preparation=None)], "native") == [
        "all-MiniLM-L6-v2: MRV2 expected (vLLM's default for it) but V1 ran"]


def test_requested_mrv2_on_v1_fails():
    assert check([row(model="tiny-qwen3", requested="v2", runner="V1", preparation=None)], "native") == [
        "tiny-qwen3: MRV2 expected (requested) but V1 ran"]


def test_other_input_preparation_fails():
    assert check([row(runner="MRV2 (triton-interpreter)", preparation="triton-interpreter")], "native") == [
        "all-MiniLM-L6-v2: MRV2 prepared its inputs with triton-interpreter, native expected on this machine"]


def test_cosine_under_the_bar_fails():
    assert check([row(min_cosine=0.9999)], "native") == ["all-MiniLM-L6-v2: min cosine 0.9999000 < 0.99999"]
