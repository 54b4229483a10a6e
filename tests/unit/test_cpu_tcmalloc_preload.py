"""Patch 0041: the CPU platform preloads the tcmalloc it finds in ``vllm/libs/``
(the CPU wheel bundles Debian bookworm's since revision 10) only where a
process can start with it (``vllm.platforms.cpu.preload_error``).

A preloaded library whose needs the system cannot meet stops every process
that inherits ``LD_PRELOAD`` before it runs, the engine's included: Debian
bookworm's tcmalloc needs the symbol version ``GLIBC_2.29`` (``log2``), and
the wheel is tagged ``manylinux_2_28``. The libraries below are built here
with gcc to fail the way that one fails on a glibc 2.28 system. An
``LD_PRELOAD`` that names another allocator is the user's choice and kept."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest

from scripts.validation.engine import bundled_tcmalloc
from tests.unit.stand_ins import minilm_engine_config


def gcc(*args: str) -> None:
    subprocess.run(["gcc", "-shared", "-fPIC", *args], check=True, capture_output=True)


@pytest.fixture
def needs_a_missing_version(tmp_path) -> tuple[Path, Path]:
    """``(libuser.so, libprovider.so)``: libuser needs ``foo@VERS_2``, which the
    libprovider found at run time (its RUNPATH) no longer defines: the class of
    a library built against a newer C library than the system's."""
    (tmp_path / "provider.c").write_text("int foo(void) { return 1; }\n")
    (tmp_path / "user.c").write_text("int foo(void);\nint bar(void) { return foo(); }\n")
    provider, user = tmp_path / "libprovider.so", tmp_path / "libuser.so"
    for version in ("VERS_2", "VERS_1"):  # link against VERS_2, then leave only VERS_1
        (tmp_path / "map").write_text(f"{version} {{ global: foo; local: *; }};\n")
        gcc("-o", str(provider), str(tmp_path / "provider.c"), f"-Wl,--version-script={tmp_path / 'map'}")
        if version == "VERS_2":
            gcc("-o", str(user), str(tmp_path / "user.c"), f"-L{tmp_path}", "-lprovider", f"-Wl,-rpath,{tmp_path}")
    return user, provider


def test_the_bundled_tcmalloc_starts_here():
    from vllm.platforms.cpu import preload_error

    assert bundled_tcmalloc().is_file()
    assert preload_error(str(bundled_tcmalloc())) is None


def test_a_missing_symbol_version_is_named(needs_a_missing_version):
    from vllm.platforms.cpu import preload_error

    user, provider = needs_a_missing_version
    assert preload_error(str(user)) == \
        f"{sys.executable}: {provider}: version `VERS_2' not found (required by {user})"


def test_a_missing_dependency_is_named(tmp_path):
    from vllm.platforms.cpu import preload_error

    (tmp_path / "gone.c").write_text("int gone(void) { return 1; }\n")
    (tmp_path / "user.c").write_text("int gone(void);\nint bar(void) { return gone(); }\n")
    gcc("-o", str(tmp_path / "libgone.so"), str(tmp_path / "gone.c"))
    gcc("-o", str(tmp_path / "libuser.so"), str(tmp_path / "user.c"), f"-L{tmp_path}", "-lgone")
    (tmp_path / "libgone.so").unlink()
    assert preload_error(str(tmp_path / "libuser.so")) == (
        f"{sys.executable}: error while loading shared libraries: libgone.so: "
        "cannot open shared object file: No such file or directory")


def test_engine_config_preloads_the_bundled_tcmalloc():
    with mock.patch.dict(os.environ):  # the environment the platform writes is restored after
        os.environ.pop("LD_PRELOAD", None)
        minilm_engine_config()
        assert os.environ["LD_PRELOAD"].split(":")[0] == str(bundled_tcmalloc())


def test_a_library_the_loader_cannot_open_is_named(tmp_path):
    from vllm.platforms.cpu import preload_error

    (tmp_path / "libnot-elf.so").write_text("not a shared object\n" * 64)
    assert preload_error(str(tmp_path / "libnot-elf.so")) == (
        f"ERROR: ld.so: object '{tmp_path / 'libnot-elf.so'}' from LD_PRELOAD cannot be preloaded "
        "(invalid ELF header): ignored.")


def test_loader_debug_output_is_not_the_librarys_error(tmp_path, monkeypatch):
    """``LD_DEBUG`` makes every child write to stderr: the library still starts."""
    from vllm.platforms.cpu import preload_error

    copy = tmp_path / "libtcmalloc_minimal.so.4"  # a path the process has not checked yet
    copy.write_bytes(bundled_tcmalloc().read_bytes())
    monkeypatch.setenv("LD_DEBUG", "statistics")
    assert preload_error(str(copy)) is None


def test_without_an_interpreter_nothing_is_preloaded(tmp_path, monkeypatch):
    from vllm.platforms.cpu import preload_error

    monkeypatch.setattr(sys, "executable", "")
    assert preload_error(str(tmp_path / "libtcmalloc_minimal.so.4")) == \
        "no interpreter to start a child process with (sys.executable is empty)"


def test_engine_config_leaves_out_a_tcmalloc_that_cannot_start():
    error = "python: /lib/x86_64-linux-gnu/libm.so.6: version `GLIBC_2.29' not found (required by libtcmalloc_minimal.so.4)"
    with mock.patch.dict(os.environ), \
            mock.patch("vllm.platforms.cpu.preload_error", return_value=error) as check, \
            mock.patch("vllm.platforms.cpu.logger.warning_once") as warn:
        os.environ.pop("LD_PRELOAD", None)
        minilm_engine_config()
        assert "libtcmalloc" not in os.environ.get("LD_PRELOAD", "")
    check.assert_called_with(str(bundled_tcmalloc()))
    (message, lib, said), _ = warn.call_args
    assert (message.startswith("Not preloading %s: a process could not be shown to start with it"), lib, said) == \
        (True, str(bundled_tcmalloc()), error)


@pytest.mark.parametrize("allocator", ["/usr/lib/x86_64-linux-gnu/libjemalloc.so.2",
                                       "/opt/mimalloc/lib/libmimalloc.so.2"])
def test_engine_config_keeps_the_allocator_a_user_preloads(allocator):
    with mock.patch.dict(os.environ, {"LD_PRELOAD": allocator}):
        minilm_engine_config()
        assert os.environ["LD_PRELOAD"].split(":")[0] == allocator
        assert "libtcmalloc" not in os.environ["LD_PRELOAD"]
