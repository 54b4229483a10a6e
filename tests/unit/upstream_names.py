"""Upstream names that later releases moved, found where the release under
test keeps them: the base's home first, then the later one, so that a
mapped test reaches the same upstream object on every release
(``python -m scripts.series.drift test-upstream``). The later homes sit in
``except ImportError`` blocks, which ``python -m scripts.series lint`` (it
checks what mapped tests reach against the line's unpatched base) reads as
alternatives: each line's base must keep the names of the ``try`` body or
of the handler (``scripts.series.testmap``)."""

from __future__ import annotations


def chat_template_config():
    """``ChatTemplateConfig()``: in ``vllm.entrypoints.chat_utils`` in the base
    and up to 0.31.0, ``vllm.renderers.chat_utils`` from 0.32.0."""
    try:
        from vllm.entrypoints.chat_utils import ChatTemplateConfig
    except ImportError:
        from vllm.renderers.chat_utils import ChatTemplateConfig
    return ChatTemplateConfig()


def set_has_triton(monkeypatch, available: bool) -> None:
    """Make the release see Triton as ``available`` for the test, where its
    runner selection reads it: ``vllm.config.vllm.HAS_TRITON`` (read by
    ``VllmConfig`` when it picks MRV2 or V1) up to 0.33.0;
    ``vllm.triton_utils.HAS_TRITON`` from 0.34.0, which has no V1 and whose
    CPU platform reads it at each call to pick its runner
    (``CpuPlatform.uses_standalone_cpu_model_runner``)."""
    try:
        import vllm.config.vllm as vllm_config_module
        from vllm.config.vllm import HAS_TRITON  # noqa: F401 - its home up to 0.33.0

        monkeypatch.setattr(vllm_config_module, "HAS_TRITON", available)
    except ImportError:
        import vllm.triton_utils

        monkeypatch.setattr(vllm.triton_utils, "HAS_TRITON", available)


def model_runner_output(req_ids: list[str], **fields):
    """``vllm.v1.outputs.ModelRunnerOutput`` for ``req_ids`` (in batch order)
    with ``fields``: up to 0.33.0 it also takes ``req_id_to_index`` (each id's
    row), which 0.34.0 dropped (the row is the id's place in ``req_ids``)."""
    import dataclasses

    from vllm.v1.outputs import ModelRunnerOutput

    if "req_id_to_index" in {f.name for f in dataclasses.fields(ModelRunnerOutput)}:
        fields["req_id_to_index"] = {r: i for i, r in enumerate(req_ids)}
    return ModelRunnerOutput(req_ids=req_ids, **fields)


def serve_cli():
    """``(make_arg_parser, validate_parsed_serve_args)`` of ``vllm serve``: in
    ``vllm.entrypoints.openai.cli_args`` in the base, in
    ``vllm.entrypoints.launchers.cli_args`` from 0.30.0, in
    ``vllm.entrypoints.common.cli_args`` from 0.34.0."""
    try:
        from vllm.entrypoints.openai.cli_args import make_arg_parser, validate_parsed_serve_args
    except ImportError:
        try:
            from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
        except ImportError:
            from vllm.entrypoints.common.cli_args import make_arg_parser, validate_parsed_serve_args
    return make_arg_parser, validate_parsed_serve_args


def server_app_builders():
    """``(make_arg_parser, build_app)`` of the OpenAI server: ``serve_cli``'s
    parser, and ``build_app`` of ``vllm.entrypoints.launchers.app`` from
    0.30.0, else ``vllm.entrypoints.openai.api_server`` (the base's home, a
    deprecated re-export from 0.30.0 that warns when imported)."""
    try:
        from vllm.entrypoints.launchers.app import build_app
    except ImportError:
        from vllm.entrypoints.openai.api_server import build_app
    return serve_cli()[0], build_app


def serve_context(request, model_name: str, request_id: str, pooling_params):
    """A ``PoolingServeContext`` (``vllm.entrypoints.pooling.typing``) for
    ``request`` (an OpenAI pooling request model) and ``pooling_params``, as
    the release's ``ServingPooling._init_ctx`` builds it for a request
    without a LoRA adapter: in the base, request, model name, request id and
    params; from 0.27.0 also the keyword-only ``lora_request`` (None),
    ``priorities`` (the request's ``priority``, else 0) and ``prompt_extras``
    (those of its ``mm_processor_kwargs``, ``cache_salt`` and
    ``chat_template_kwargs`` that are set)."""
    import dataclasses

    from vllm.entrypoints.pooling.typing import PoolingServeContext

    kwargs = dict(request=request, model_name=model_name, request_id=request_id, pooling_params=pooling_params)
    if "prompt_extras" in {f.name for f in dataclasses.fields(PoolingServeContext)}:
        kwargs.update(lora_request=None, priorities=getattr(request, "priority", 0),
                      prompt_extras={k: v for k in ("mm_processor_kwargs", "cache_salt", "chat_template_kwargs")
                                     if (v := getattr(request, k, None)) is not None})
    return PoolingServeContext(**kwargs)


def server_pre_process(io_processor, ctx) -> list[tuple[list[int], object]]:
    """The server's pre-processing of ``ctx`` (``serve_context``) through
    ``io_processor``, the embeddings or a scoring io-processor
    (``llm.pooling_io_processors[...]`` or one built as the server builds it),
    as the release runs it for a request, up to the engine: sets
    ``ctx.engine_inputs``, verifies the params against the model config in
    place as ``_prepare_generators`` does before it sends them (every
    release), and returns, per engine request, its prompt token ids and its
    ``PoolingParams``.

    In the base the io-processor does it all (``pre_process_online``; the
    params are ``ctx.pooling_params``: one set, or one per engine input).
    From 0.27.0 the serving class runs it (``PoolingServing._preprocessing``:
    the io-processor's request factory, each request rendered; the
    embeddings endpoint's ``ServingEmbedding`` then splits long inputs into
    chunks) and each engine input carries its params; the serving object is
    a bare instance holding the io-processor, with no engine (as
    tests/unit/test_late_interaction_query_keys.py stands it in)."""
    if hasattr(io_processor, "pre_process_online"):
        io_processor.pre_process_online(ctx)
        params = ctx.pooling_params
        params = list(params) if isinstance(params, (list, tuple)) else [params] * len(ctx.engine_inputs)
        inputs = [(list(e["prompt_token_ids"]), p) for e, p in zip(ctx.engine_inputs, params, strict=True)]
    else:
        import asyncio

        from vllm.entrypoints.pooling.embed.io_processor import EmbedIOProcessor
        from vllm.entrypoints.pooling.embed.serving import ServingEmbedding
        from vllm.entrypoints.pooling.scoring.serving import ServingScores

        serving = object.__new__(ServingEmbedding if isinstance(io_processor, EmbedIOProcessor) else ServingScores)
        serving.io_processor = io_processor
        asyncio.run(type(serving)._preprocessing(serving, io_processor, ctx))
        inputs = [(list(e["prompts"]["prompt_token_ids"]), e["params"]) for e in ctx.engine_inputs]
    shared = ctx.pooling_params if isinstance(ctx.pooling_params, (list, tuple)) else [ctx.pooling_params]
    for params in {id(p): p for p in [*shared, *(p for _, p in inputs)]}.values():
        params.verify(io_processor.model_config)
    return inputs


def pooling_runner_tasks(model, model_config) -> list:
    """``PoolingRunner.get_supported_tasks`` of MRV2
    (``vllm.v1.worker.gpu.pool.pooling_runner``): the pooling tasks the runner
    serves for ``model``. Called with ``(model, model_config)`` in 0.27.0 (PR
    50574, whose interface the 0.26.0 line's patch 0003 has: the tasks depend
    on the model config's attention type), with ``(model)`` from 0.28.0."""
    import inspect

    from vllm.v1.worker.gpu.pool.pooling_runner import PoolingRunner

    if "model_config" in inspect.signature(PoolingRunner.get_supported_tasks).parameters:
        return PoolingRunner.get_supported_tasks(model, model_config)
    return PoolingRunner.get_supported_tasks(model)
