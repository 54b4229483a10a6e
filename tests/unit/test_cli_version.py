"""Patch 0030: ``vllm --version`` answers without building the subcommand
parsers, so it works where the flavor's device is missing (the CUDA wheel on
a host without a GPU: building the ``serve`` parser infers the device and
raises "Failed to infer device type")."""

from __future__ import annotations

import importlib.metadata

import pytest


@pytest.mark.parametrize("flag", ["--version", "-v"])
def test_version_needs_no_subcommand_parser(flag, monkeypatch, capsys):
    from vllm.engine.arg_utils import EngineArgs
    from vllm.entrypoints.cli import main as cli

    def no_device(*args, **kwargs):  # what building `serve`'s parser does on a host without the device
        raise RuntimeError("Failed to infer device type")

    monkeypatch.setattr(EngineArgs, "add_cli_args", staticmethod(no_device))
    monkeypatch.setattr("sys.argv", ["vllm", flag])
    capsys.readouterr()  # vLLM's import-time log lines
    assert cli.main() is None  # the console script exits 0
    assert capsys.readouterr().out == importlib.metadata.version("vllm") + "\n"
