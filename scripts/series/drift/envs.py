"""A release's own environment for ``drift test-upstream``: its torch, its
other requirements and its CPU extension compiled from its sdist, so that a
mapped test that fails there says the behaviour is missing, not that the
environment is another release's.

For release ``R`` of a line whose ``base.toml`` has a ``[build.cpu]`` table:

1. the sdist ``vllm-R.tar.gz`` (``scripts.series.base.cached_sdist``: the
   download cache, else pip; not pinned, so the build is keyed by the
   sha256 of the file the cache holds);
2. its torch: the ``torch`` requirement of the sdist's
   ``requirements/cpu.txt`` for this machine (markers evaluated with
   ``packaging``), relaxed to the same minor release (``torch==X.Y.Z+cpu``
   gives ``torch==X.Y.*``): the ``+cpu`` builds are on PyTorch's own index,
   which the package registries here do not include, and a patch release
   keeps the C++ ABI the extension is built against;
3. a venv ``.build/drift-envs/R/`` with that torch and requirements/dev.txt
   (what our tests and the build need), every later install constrained to
   the torch installed;
4. the CPU extension: ``scripts.series.source_build.build_flavor`` on the
   line's base with R's version and sdist (``release_base``): the line's
   build patches applied to R's sdist, the line's third-party sources and
   Debian build packages, cached by the digest of all of them;
5. the built wheel's own ``Requires-Dist`` (``base_requirements``: torch's
   family left out, as the line's venv does), except requirements on a
   direct URL, which pip could only fetch from that address (0.34.0's
   ``triton @ https://github.com/triton-lang/triton-cpu/...``): they are
   left out and ``TargetEnv.left_out`` names them, so the report says what
   the environment lacks.

The venv is made again when the interpreter it was made with changed, and
its packages installed again when what they come from changed (the
``.installed`` record: the interpreter, the torch asked for,
requirements/dev.txt's digest, the built wheel's digest, the
requirements)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from scripts.common.paths import BUILD, REPO
from scripts.series.base import (Base, UpstreamSources, base_requirements, cached_sdist, sdist_requirement_lines,
                                 sha256_file, split_url_requirements)
from scripts.series.drift.releases import DriftError

FLAVOR = "cpu"


@dataclass(frozen=True)
class TargetEnv:
    """A release's environment: ``python`` (its venv's interpreter), ``wheel``
    (the CPU flavor built from its sdist, whose ``.so`` files the shadow
    repository takes), ``torch`` (the version installed) and ``left_out``
    (the requirements not installed, each with the reason)."""

    version: str
    python: Path
    wheel: Path
    torch: str
    left_out: tuple[str, ...] = ()

    def describe(self) -> str:
        """One line for the report: what the environment is and lacks."""
        text = f"vLLM {self.version}'s own environment: torch {self.torch}, its cpu extension from {self.wheel.name}"
        return text + (f"; not installed: {'; '.join(self.left_out)}" if self.left_out else "")


def torch_spec(lines: list[str]) -> str:
    """The pip requirement for the torch of requirement ``lines`` on this
    machine: its ``==X.Y.Z[+local]`` pin relaxed to ``==X.Y.*`` (see the
    module's docstring). ``DriftError`` when no line pins torch here."""
    from packaging.requirements import Requirement
    from packaging.version import Version

    for line in lines:
        req = Requirement(line)
        if req.name != "torch" or (req.marker and not req.marker.evaluate()):
            continue
        pins = [s.version for s in req.specifier if s.operator == "=="]
        if pins:
            v = Version(pins[0])
            return f"torch=={v.major}.{v.minor}.*"
    raise DriftError("the release's requirements/cpu.txt pins no torch for this machine")


def release_base(base: Base, version: str, sdist: Path) -> Base:
    """``base`` (a line's) moved to release ``version``: its sdist ``sdist``
    pinned by its sha256 as the release's, its cpu flavor built from it with
    the line's ``[build.cpu]`` (third-party sources, Debian packages) and the
    line's build patches (``base.dir``). ``DriftError`` when the line has no
    ``[build.cpu]`` table (nothing says how to compile the extension)."""
    if FLAVOR not in base.builds:
        raise DriftError(f"line {base.line} has no [build.{FLAVOR}] table in base.toml: nothing says how to "
                         f"compile vLLM {version}'s {FLAVOR} extension (use --env line)")
    release = UpstreamSources(flavor="source", project="vllm", version=version, filename=sdist.name,
                              sha256=sha256_file(sdist))
    return dataclasses.replace(base, version=version, upstream={"release": release},
                               builds={FLAVOR: dataclasses.replace(base.builds[FLAVOR], source="sdist")})


def _pip(python: Path, args: list[str], what: str) -> None:
    proc = subprocess.run([str(python), "-m", "pip", "install", "--quiet", *args],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        raise DriftError(f"the environment's {what} did not install (pip exit {proc.returncode}):\n"
                         f"{proc.stdout[-3000:]}")


def _installed_torch(python: Path) -> str:
    """The installed torch distribution's version (its metadata: PyPI's CUDA
    build says 2.14.1 there and ``2.14.1+cu130`` in ``torch.__version__``,
    which no requirement on PyPI's file satisfies)."""
    return subprocess.run([str(python), "-c", "from importlib.metadata import version; print(version('torch'))"],
                          check=True, stdout=subprocess.PIPE, text=True).stdout.strip()


def target_env(base: Base, version: str, root: Path | None = None) -> TargetEnv:
    """Release ``version``'s own environment for ``base``'s line (the
    module's docstring), made or reused under ``root`` (``.build/drift-envs``).
    The first call for a release compiles its cpu extension (about 40
    minutes on 2 cores; cached). Raises ``DriftError`` (the step and pip's
    or the build's message) when a step fails."""
    from scripts.series.source_build import SourceBuildError, build_flavor

    sdist = cached_sdist("vllm", version)
    torch = torch_spec(sdist_requirement_lines(sdist, "cpu.txt"))
    venv = (root or BUILD / "drift-envs") / version
    python = venv / "bin" / "python"
    record = venv / ".installed"
    base_python = f"{Path(sys.executable).resolve()} {sys.version.split()[0]}"
    done = json.loads(record.read_text()) if record.is_file() else {}
    if not python.exists() or done.get("python") != base_python:  # new, broken, or of another interpreter
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        done = {}
    # dev.txt and the file it includes (-r sdist.txt): a change to either remakes the venv
    dev = " ".join(sha256_file(REPO / "requirements" / name) for name in ("dev.txt", "sdist.txt"))
    if (done.get("torch_spec"), done.get("dev")) != (torch, dev):
        print(f"== drift: vLLM {version}'s environment {venv}: {torch}, requirements/dev.txt", flush=True)
        _pip(python, [torch, "packaging"], torch)
        installed = _installed_torch(python)
        (venv / "constraints.txt").write_text(f"torch=={installed}\n")
        _pip(python, ["-c", str(venv / "constraints.txt"), "-r", str(REPO / "requirements" / "dev.txt")],
             "requirements/dev.txt")
        done = {"python": base_python, "torch_spec": torch, "dev": dev}
        record.write_text(json.dumps(done))
    installed = _installed_torch(python)
    try:
        wheel = build_flavor(release_base(base, version, sdist), FLAVOR, python=str(python))
    except SourceBuildError as e:
        raise DriftError(f"vLLM {version}'s {FLAVOR} extension: {e}") from None
    index, url = split_url_requirements(base_requirements(wheel))
    want = {"python": base_python, "torch_spec": torch, "dev": dev, "wheel": sha256_file(wheel),
            "requirements": index}
    if done != want:
        print(f"== drift: vLLM {version}'s requirements ({len(index)}) into {venv}", flush=True)
        req_file = venv / "requirements-release.txt"
        req_file.write_text("\n".join(index) + "\n")
        _pip(python, ["-c", str(venv / "constraints.txt"), "-r", str(req_file)], f"vLLM {version} requirements")
        record.write_text(json.dumps(want))
    left_out = tuple(f"{r} (a direct URL: the registries here serve no such file)" for r in url)
    return TargetEnv(version, python, wheel, installed, left_out)
