"""MRV2 without Triton on x86 CPUs (the 0.34.0 line's 0065 and 0066): the
standalone CPU model runner runs wherever the CPU extension registers MRV2's
native input preparation (``torch.ops._C.gather_block_table_cpu``, which 0065
compiles for x86 too), and an x86 installation with neither Triton nor that op
is refused at start-up naming both fixes, instead of 0.34.0's refusal of every
x86 CPU without Triton."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

pytestmark = pytest.mark.line("0.34.0")


@pytest.fixture
def cpu_platform(monkeypatch):
    """vLLM's ``CpuPlatform`` on an x86 CPU without Triton (this machine's case:
    PyPI's triton has no CPU backend, so ``HAS_TRITON`` is false)."""
    import vllm.triton_utils
    from vllm.platforms.cpu import CpuPlatform
    from vllm.platforms.interface import CpuArchEnum

    monkeypatch.setattr(vllm.triton_utils, "HAS_TRITON", False)
    monkeypatch.setattr(CpuPlatform, "get_cpu_architecture", classmethod(lambda cls: CpuArchEnum.X86))
    return CpuPlatform


def test_the_built_extension_registers_the_native_input_preparation(cpu_platform):
    # 0065: csrc/cpu/input_batch.cpp and block_table.cpp are in the x86 variants too
    cpu_platform.import_kernels()
    ops = ("gather_block_table_cpu", "compute_slot_mapping_cpu", "prepare_prefill_inputs_cpu",
           "prepare_pos_seq_lens_cpu")
    assert [op for op in ops if not hasattr(torch.ops._C, op)] == []


def test_x86_without_triton_uses_the_standalone_runner(cpu_platform):
    assert cpu_platform.uses_standalone_cpu_model_runner() is True


def test_triton_keeps_the_triton_runner(cpu_platform, monkeypatch):
    import vllm.triton_utils

    monkeypatch.setattr(vllm.triton_utils, "HAS_TRITON", True)
    assert cpu_platform.uses_standalone_cpu_model_runner() is False


def test_x86_without_triton_nor_the_native_ops_is_refused_naming_both_fixes(cpu_platform, monkeypatch):
    # an extension built without 0065 (upstream's x86 build): torch.ops._C without the op
    monkeypatch.setattr(cpu_platform, "import_kernels", classmethod(lambda cls: None))
    monkeypatch.setattr(torch.ops, "_C", SimpleNamespace())
    assert cpu_platform.uses_standalone_cpu_model_runner() is False
    with pytest.raises(RuntimeError) as e:
        cpu_platform.check_and_update_config(SimpleNamespace(model_config=None))
    assert str(e.value) == (
        "vLLM on this x86 CPU needs Triton (triton-cpu) or a CPU extension with MRV2's native input "
        "preparation (vllm._C's gather_block_table_cpu), and this installation has neither: install "
        "triton-cpu, or a vLLM whose CPU extension was built with csrc/cpu/input_batch.cpp and "
        "block_table.cpp for x86 (this distribution's CPU wheel is).")


def test_a_setting_the_standalone_runner_does_not_serve_is_refused_naming_it_and_the_fix(tiny_qwen3, real_config):
    # 0067: upstream's refusal (VllmConfig._validate_model_runner) names the feature only
    with pytest.raises(ValueError) as e:
        real_config(tiny_qwen3, "generate", triton=False, enable_prompt_embeds=True)
    # VllmConfig's validator raises it: pydantic's ValidationError carries it as its one error
    assert [err["msg"] for err in e.value.errors()] == [
        "Value error, The CPU model runner without Triton does not yet support: prompt embeddings "
        "(--enable-prompt-embeds). "
        "Start vLLM without those settings (or serve another model), or run it where Triton is installed "
        "(triton-cpu on x86 CPUs), which selects the Triton model runner."]


def test_the_same_settings_start_without_them(tiny_qwen3, real_config):
    from vllm.platforms import current_platform

    config = real_config(tiny_qwen3, "generate", triton=False)
    assert current_platform.uses_standalone_cpu_model_runner() is True
    assert config.model_config.enable_prompt_embeds is False
