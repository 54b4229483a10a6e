"""Patch 0041: the CPU platform preloads the tcmalloc it finds in ``vllm/libs/``
(the CPU wheel bundles Debian bookworm's since revision 10) only where a
process can start with it (``vllm.platforms.cpu.preload_error``).

A preloaded library whose needs the system cannot meet stops every process
that inherits ``LD_PRELOAD`` before it runs, the engine's included: Debian
bookworm's tcmalloc needs the symbol version ``GLIBC_2.29`` (``log2``), and
the wheel is tagged for an older glibc. The libraries below are built here
with gcc to fail the way that one fails on a glibc 2.28 system. An
``LD_PRELOAD`` that names another allocator is the user's choice and kept.

The mapped tests (the line's tests.toml) reach the behaviour through upstream's
names only: an engine's config (``EngineArgs.create_engine_config``, which runs
the CPU platform's ``check_and_update_config``) built in a fresh interpreter
whose ``vllm`` is the tree under test with another ``vllm/libs/`` (the
platform looks for tcmalloc beside its own package), and the ``LD_PRELOAD``
and log it leaves. ``preload_error`` is the series' own function: its tests
are not mapped."""

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


# --- through the engine's config, in a fresh interpreter (mapped) ------------------------

ENGINE_PRELOAD = """
import os, sys
os.environ.pop("LD_PRELOAD", None)
if os.environ.get("USER_PRELOAD"):
    os.environ["LD_PRELOAD"] = os.environ["USER_PRELOAD"]
from vllm.engine.arg_utils import EngineArgs
EngineArgs(model=sys.argv[1], runner="pooling").create_engine_config()
print("PRELOAD=" + os.environ.get("LD_PRELOAD", ""))
"""


def vllm_with_libs(tmp_path: Path, libs: dict[str, bytes]) -> Path:
    """A directory whose ``vllm`` package is the tree under test (its entries
    linked), except ``vllm/libs/``, which holds ``libs``: the CPU platform
    looks for tcmalloc in ``libs/`` beside its own package."""
    import vllm

    real = Path(vllm.__file__).parent
    pkg = tmp_path / "overlay" / "vllm"
    pkg.mkdir(parents=True)
    for entry in real.iterdir():
        if entry.name not in ("libs", "platforms", "__pycache__"):
            (pkg / entry.name).symlink_to(entry)
    (pkg / "platforms").mkdir()
    for entry in (real / "platforms").iterdir():
        if entry.name != "__pycache__":
            (pkg / "platforms" / entry.name).symlink_to(entry)
    (pkg / "libs").mkdir()
    for name, data in libs.items():
        (pkg / "libs" / name).write_bytes(data)
    return pkg.parent


def engine_preload(overlay: Path, user_preload: str = "") -> tuple[list[str], str]:
    """The LD_PRELOAD entries an engine config built with ``overlay``'s vllm
    leaves (``user_preload``: what the user had set), and the output (vLLM's
    log) of the process that built it."""
    from scripts.validation.checkpoints.models import minilm_path

    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "USER_PRELOAD")}
    env.update(PYTHONPATH=os.pathsep.join([str(overlay), *sys.path]), USER_PRELOAD=user_preload)
    proc = subprocess.run([sys.executable, "-c", ENGINE_PRELOAD, str(minilm_path())], env=env, cwd=overlay,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:]
    (line,) = [x for x in proc.stdout.splitlines() if x.startswith("PRELOAD=")]
    return [p for p in line.removeprefix("PRELOAD=").split(":") if p], proc.stdout


def bundled_library() -> bytes:
    """The tcmalloc the line's CPU wheel bundles, from its pinned Debian package."""
    from scripts.series.base import load_base
    from scripts.series.bundled import bundled_files

    return bundled_files(load_base(), "cpu")["libtcmalloc_minimal.so.4"]


def test_an_engine_preloads_a_bundled_tcmalloc_that_starts(tmp_path):
    overlay = vllm_with_libs(tmp_path, {"libtcmalloc_minimal.so.4": bundled_library()})
    preload, _ = engine_preload(overlay)
    assert preload[0] == str(overlay / "vllm" / "libs" / "libtcmalloc_minimal.so.4")


def test_an_engine_leaves_out_a_bundled_tcmalloc_missing_a_symbol_version(tmp_path, needs_a_missing_version):
    user, provider = needs_a_missing_version
    overlay = vllm_with_libs(tmp_path, {"libtcmalloc_minimal.so.4": user.read_bytes()})
    preload, log = engine_preload(overlay)
    assert [p for p in preload if "libtcmalloc" in p] == []
    # the log names the library and the loader's own words
    assert str(overlay / "vllm" / "libs" / "libtcmalloc_minimal.so.4") in log
    assert "version `VERS_2' not found" in log


def test_an_engine_leaves_out_a_bundled_tcmalloc_the_loader_cannot_open(tmp_path):
    overlay = vllm_with_libs(tmp_path, {"libtcmalloc_minimal.so.4": b"not a shared object\n" * 64})
    preload, log = engine_preload(overlay)
    assert [p for p in preload if "libtcmalloc" in p] == []
    assert "invalid ELF header" in log


@pytest.mark.parametrize("allocator", ["/usr/lib/x86_64-linux-gnu/libjemalloc.so.2",
                                       "/opt/mimalloc/lib/libmimalloc.so.2"])
def test_an_engine_keeps_the_allocator_a_user_preloads(tmp_path, allocator):
    overlay = vllm_with_libs(tmp_path, {"libtcmalloc_minimal.so.4": bundled_library()})
    preload, _ = engine_preload(overlay, user_preload=allocator)
    assert preload[0] == allocator and [p for p in preload if "libtcmalloc" in p] == []
