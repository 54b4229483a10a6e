"""Upstream names that later releases moved, found where the release under
test keeps them: the base's home first, then the later one, so that a
mapped test reaches the same upstream object on every release
(``python -m scripts.series.drift test-upstream``). The later homes sit in
``except ImportError`` blocks, which ``python -m scripts.series lint`` (it
checks what mapped tests reach against the line's unpatched base) reads as
fallbacks for other releases."""

from __future__ import annotations


def chat_template_config():
    """``ChatTemplateConfig()``: in ``vllm.entrypoints.chat_utils`` in the base
    and up to 0.31.0, ``vllm.renderers.chat_utils`` from 0.32.0."""
    try:
        from vllm.entrypoints.chat_utils import ChatTemplateConfig
    except ImportError:
        from vllm.renderers.chat_utils import ChatTemplateConfig
    return ChatTemplateConfig()


def server_app_builders():
    """``(make_arg_parser, build_app)`` of the OpenAI server: in
    ``vllm.entrypoints.openai.cli_args`` and ``.api_server`` in the base,
    ``vllm.entrypoints.launchers.cli_args`` and ``.app`` from 0.30.0."""
    try:
        from vllm.entrypoints.openai.api_server import build_app
        from vllm.entrypoints.openai.cli_args import make_arg_parser
    except ImportError:
        from vllm.entrypoints.launchers.app import build_app
        from vllm.entrypoints.launchers.cli_args import make_arg_parser
    return make_arg_parser, build_app
