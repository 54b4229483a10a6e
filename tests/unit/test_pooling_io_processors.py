"""The front-end processors of pooling tasks (patch 0017): a model whose
pooling task is ``embed&token_classify`` (BGE-M3: its dense embedding and
its per-token sparse weights in one request, the task ``get_pooling_task``
picks first for it) gets a processor for that task, as every other pooling
task has one. Before the patch ``init_pooling_io_processors`` built none, so
``LLM.encode(..., pooling_task="embed&token_classify")`` failed on an
``AssertionError`` and the server's ``/pooling`` on a ``KeyError``, on
either runner. From 0.29.0 upstream builds its own processor for the task
(``UnsupportedCombinedTaskIOProcessor``: refused outside an IO processor
plugin), so on lines based on those releases the two ``test_bge_m3_*``
tests check upstream's processor and only the ``PoolingParams`` tests show
the patch (the line's ``tests.toml``)."""

from __future__ import annotations

import pytest

from scripts.validation.matrix.rows import case
from tests.unit.upstream_names import chat_template_config

# what BgeM3EmbeddingModel's DispatchPooler declares (vllm/model_executor/models/roberta.py)
BGE_M3_TASKS = ("token_embed", "token_classify", "embed", "embed&token_classify")


@pytest.fixture(scope="module")
def bge_m3(tmp_path_factory):
    """The matrix's tiny BGE-M3 (XLM-R backbone, sparse_linear.pt, colbert_linear.pt)."""
    return str(case("bge-m3").make(tmp_path_factory.mktemp("bge-m3") / "model"))


def processors_for(config, tasks):
    """The processors the server builds for ``config``, with the config's
    renderer as the server passes it (from 0.27.0 a processor takes its
    executor from the renderer)."""
    from vllm.entrypoints.pooling.factories import init_pooling_io_processors
    from vllm.renderers.registry import renderer_from_config

    return init_pooling_io_processors(tasks, config, renderer=renderer_from_config(config),
                                      chat_template_config=chat_template_config())


def test_bge_m3_default_task_is_embed_and_token_classify_and_has_a_processor(real_config, bge_m3):
    config = real_config(bge_m3, "pooling")
    assert config.model_config.architecture == "BgeM3EmbeddingModel"
    assert config.model_config.get_pooling_task(BGE_M3_TASKS) == "embed&token_classify"
    processors = processors_for(config, BGE_M3_TASKS)
    assert list(processors) == ["embed&token_classify"]
    assert processors["embed&token_classify"].name == "embed&token_classify"


def test_bge_m3_configured_for_its_sparse_part_gets_that_tasks_processor_only(real_config, bge_m3):
    config = real_config(bge_m3, "pooling", pooler_config={"task": "token_classify"})
    assert list(processors_for(config, BGE_M3_TASKS)) == ["token_classify"]


def test_embed_and_token_classify_requests_get_both_parts_defaults(real_config, bge_m3):
    """As an ``embed`` request is normalised and a ``token_classify`` one
    goes through the classifier's activation by default, so are both parts
    of an ``embed&token_classify`` request (FlagEmbedding's BGE-M3: dense
    normalised, sparse through ReLU); its per-token part never reads the
    prefix cache, as the other token tasks. Before the patch the task
    skipped ``PoolingParams.verify``: neither part was activated."""
    from vllm import PoolingParams

    model_config = real_config(bge_m3, "pooling").model_config
    params = PoolingParams(task="embed&token_classify")
    params.verify(model_config)
    assert (params.use_activation, params.skip_reading_prefix_cache) == (True, True)
    raw = PoolingParams(task="embed&token_classify", use_activation=False)
    raw.verify(model_config)
    assert raw.use_activation is False


def test_embed_and_token_classify_refuses_dimensions(real_config, bge_m3):
    from vllm import PoolingParams
    from vllm.exceptions import VLLMValidationError

    params = PoolingParams(task="embed&token_classify", dimensions=8)
    with pytest.raises(VLLMValidationError, match="dimensions"):
        params.verify(real_config(bge_m3, "pooling").model_config)
