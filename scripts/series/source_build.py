"""A flavor compiled from the base's sdist: its extensions built as upstream's
``setup.py`` builds them, with this machine's toolchain and nothing fetched
at build time, cached by the digest of every input.

A line's ``base.toml`` says how each flavor is obtained (``[build.<flavor>]``,
``Base.build``): from its pinned wheel, or ``from = "sdist"``: compiled from
the sdist of the base's own release (``Base.release_sdist``). For the latter,
``flavor_wheel`` returns a wheel made here that takes the place of the
pinned one everywhere (the applied trees of ``scripts.series.tree``,
``setup.py``):

1. the toolchain: ``g++`` on ``PATH``; ``cmake`` and ``ninja`` in the building
   Python's environment (both are its requirements, requirements/dev.txt);
2. the sdist, fetched and verified as every base artifact, unpacked;
3. the line's *build patches* applied to it strictly (``build_patches``: the
   patches whose files all lie outside the ``vllm/`` package, such as
   ``cmake/`` and ``csrc/``; they never apply to a package tree);
4. the third-party source trees (``[third-party.*]``: tarballs in
   ``third_party_dir()``, verified) unpacked, each handed to CMake through the
   variable that replaces its clone (``FETCHCONTENT_SOURCE_DIR_ONEDNN``);
5. the Debian build packages (``[build-packages.*]``: ``numa.h``,
   ``libnuma.so``) fetched as bundled packages are and unpacked, on the
   compiler's ``CPATH`` and ``LIBRARY_PATH``;
6. ``pip wheel --no-build-isolation --no-index`` on the patched sdist with
   ``VLLM_TARGET_DEVICE=<flavor>``: upstream's ``setup.py`` runs CMake and
   Ninja, ``MAX_JOBS`` jobs. ``FETCHCONTENT_FULLY_DISCONNECTED=ON``, pip
   without an index, ``GIT_ALLOW_PROTOCOL=file`` and an offline cargo make any
   attempt to clone or download fail (``OFFLINE_ENV``).

The work directory is ``<cache>/builds/<flavor>-<version>-<digest>/``
(``scripts.series.base.cache_dir``), shared by every clone on the machine:
a build whose ``built.json`` is there is not run again; a failed one resumes
where Ninja stopped. ``build_digest`` covers the sdist, the build patches,
the third-party sources, the Debian packages, the compiler, CMake, the
Python tag and torch of the building environment, and ``RECIPE``. The
build's output goes to ``reports/logs/build-<flavor>.log`` (and the work
directory's ``build.log``); progress (Ninja's ``[n/N]``) is printed every
5 %. A failure raises ``SourceBuildError`` naming the step, the file and the
fix.

Command line::

    python -m scripts.series.source_build [--line L] [--flavor cpu] [--jobs N] [--if-sdist]

prints the built wheel's path (building it when its inputs changed);
``--if-sdist`` builds only where the line (or ``VDIST_BUILD_<FLAVOR>``) says
the flavor comes from the sdist (``make wheel`` runs it before setup.py, so
that the build's progress shows).
"""

from __future__ import annotations

import argparse
import fcntl
import functools
import hashlib
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from scripts.common.paths import REPORTS
from scripts.series.base import (Base, BaseError, DebianPackage, ThirdPartySource, cache_dir, fetch, fetch_deb,
                                 load_base, sha256_file, third_party_dir, verify_digest)
from scripts.series.diff import parse_diff
from scripts.series.gitapply import apply_patch
from scripts.series.patchfile import Patch, SeriesError, read_series

# Bump when the way a build runs changes what it produces (its command,
# environment or post-processing): the digest of every cached build changes.
RECIPE = "1"
PACKAGE_PREFIX = "vllm/"
# What keeps a build from reaching the network: CMake's FetchContent skips
# every download and update step, and a dependency without a local tree is an
# error (policy CMP0170 NEW; OLD only warns and configures on), pip has no
# index, git clones only local paths, cargo is offline.
OFFLINE_ENV = {
    "PIP_NO_INDEX": "1",
    "GIT_ALLOW_PROTOCOL": "file",
    "CARGO_NET_OFFLINE": "true",
}
OFFLINE_CMAKE_ARGS = ("-DFETCHCONTENT_FULLY_DISCONNECTED=ON", "-DCMAKE_POLICY_DEFAULT_CMP0170=NEW")


class SourceBuildError(BaseError):
    """A flavor could not be compiled from the sdist: the message names the
    step, the file and the fix."""


def patch_files(path: Path) -> list[str]:
    """The paths a patch file changes (its diff's new or old names)."""
    return [fd.new or fd.old for fd in parse_diff(Patch.read(path).diff)]


def is_build_patch(path: Path) -> bool:
    """True for a patch of the sources the extensions are compiled from (every
    file outside the ``vllm/`` package: ``cmake/``, ``csrc/``, ``setup.py``),
    False for one of the package. ``SeriesError`` for a patch that changes
    both (one concern per patch: split it)."""
    files = patch_files(path)
    outside = [f for f in files if not f.startswith(PACKAGE_PREFIX)]
    if outside and len(outside) != len(files):
        raise SeriesError(f"{path.name} changes the package ({', '.join(sorted(set(files) - set(outside)))}) and "
                          f"the build sources ({', '.join(outside)}): split it, a build patch changes only "
                          "files outside vllm/")
    return bool(outside)


def build_patches(base: Base) -> list[Path]:
    """The build patches of ``base``'s line, in series order."""
    return [base.dir / n for n in read_series(base.dir / "series") if is_build_patch(base.dir / n)]


def _run(cmd: list[str], **kw) -> str:
    return subprocess.run(cmd, capture_output=True, text=True, check=True, **kw).stdout.strip()


def check_build_patches(base: Base, dest: Path) -> list[str]:
    """Apply the line's build patches strictly, in order, to the files they
    change, taken from the sdist of the base's release into ``dest``
    (``make lint``: they never apply to a package tree). Returns their
    names; ``PatchDoesNotApply`` names the patch and the hunk."""
    patches = build_patches(base)
    if not patches:
        return []
    top = dest / f"vllm-{base.version}"
    sdist_files(fetch(base.release_sdist()), {f for p in patches for f in patch_files(p)}, top)
    for p in patches:
        apply_patch(p, top)
    return [p.name for p in patches]


def sdist_files(sdist: Path, files: set[str], dest: Path) -> None:
    """Extract ``files`` (paths under the sdist's top folder, such as
    ``cmake/cpu_extension.cmake``) from ``sdist`` into ``dest``, at the same
    paths: the build sources a build patch is applied to or read against."""
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers() if "/" in m.name and m.name.split("/", 1)[1] in files]
        for m in members:
            m.name = m.name.split("/", 1)[1]
        tar.extractall(dest, members=members, filter="tar")


def sdist_package(base: Base) -> Path:
    """The directory holding ``vllm/``, the Python package of the base's own
    sdist (``Base.release_sdist``, fetched and verified), extracted once per
    sdist digest under ``<cache>/builds/src/`` and reused: what a flavor
    compiled from that sdist installs, without compiling it (the series
    applies to it; lint and the mapped tests read its names)."""
    import tempfile

    sdist = base.release_sdist()
    root = cache_dir() / "builds" / "src" / f"vllm-{base.version}-{sdist.sha256[:12]}"
    if (root / ".complete").exists():
        return root
    path = fetch(sdist)
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=root.parent, prefix=".extract-"))
    try:
        with tarfile.open(path) as tar:
            members = [m for m in tar.getmembers() if m.name.split("/")[1:2] == ["vllm"]]
            for m in members:
                m.name = m.name.split("/", 1)[1]
            tar.extractall(tmp, members=members, filter="tar")
        (tmp / ".complete").write_text(sdist.sha256 + "\n")
        if not (root / ".complete").exists():  # another run may have finished first
            try:
                os.rename(tmp, root)
            except OSError:  # root exists: another run's extraction, finished or under way
                if not (root / ".complete").exists():
                    shutil.rmtree(root, ignore_errors=True)
                    os.rename(tmp, root)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return root


def toolchain(python: str = sys.executable) -> dict[str, str]:
    """The versions of what compiles: g++, CMake, Ninja, the building Python's
    tag and torch (asked once per process and Python). ``SourceBuildError``
    naming the Debian or pip package that provides a missing tool."""
    return _toolchain(python)


@functools.cache
def _toolchain(python: str) -> dict[str, str]:
    tools = {}
    try:
        # the first line of --version carries the distribution's package version
        # (Debian: "g++ (Debian 12.2.0-14) 12.2.0"), which a point update changes
        tools["g++"] = _run(["g++", "--version"]).splitlines()[0] + " " + _run(["g++", "-dumpmachine"])
    except (FileNotFoundError, subprocess.CalledProcessError):
        raise SourceBuildError("step toolchain: g++ is not on PATH. Fix: install Debian's g++ package "
                               "(apt-get install g++), or set PATH to a gcc toolchain") from None
    bindir = Path(python).parent
    for tool in ("cmake", "ninja"):
        exe = bindir / tool if (bindir / tool).exists() else shutil.which(tool)
        if not exe:
            raise SourceBuildError(f"step toolchain: {tool} is not installed in {bindir.parent} nor on PATH. "
                                   f"Fix: {python} -m pip install {tool} (requirements/dev.txt has it: make env)")
        tools[tool] = _run([str(exe), "--version"]).splitlines()[0]
    tools["python"] = _run([python, "-c", "import sys; print(sys.implementation.cache_tag)"])
    try:
        tools["torch"], cuda = _run([python, "-c", "import torch; print(torch.__version__, torch.version.cuda)"]).split()
    except subprocess.CalledProcessError:
        raise SourceBuildError(f"step toolchain: {python} cannot import torch, which the extensions build "
                               "against. Fix: make env (it installs the line's torch)") from None
    if cuda != "None":
        # A CUDA build of torch (PyPI's) declares CUDA in its CMake config, which then needs the
        # toolkit's headers and libcudart even for the CPU extension. The toolkit: the first of
        # $CUDA_HOME, $CUDA_PATH, torch's own guess (torch.utils.cpp_extension.CUDA_HOME: nvcc's
        # parent directory, which a wrapper script in /usr/local/bin makes /usr/local) and
        # /usr/local/cuda that holds include/cuda_runtime.h and bin/nvcc; named here so that it
        # is in the digest.
        guess = _run([python, "-c", "from torch.utils.cpp_extension import CUDA_HOME; print(CUDA_HOME)"])
        home = cuda_toolkit([os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), guess.splitlines()[-1],
                             "/usr/local/cuda"], f"torch {tools['torch']} in {python} is a CUDA build (CUDA {cuda})")
        version = _run([str(home / "bin" / "nvcc"), "--version"]).splitlines()[-1]
        tools["cuda-toolkit"] = f"{home.resolve()} {version}"
        if nvrtc := cuda_nvrtc(python, home):  # by its content: the path may be inside a clone's venv
            tools["cuda-nvrtc"] = f"{nvrtc.name} sha256:{sha256_file(nvrtc)}"
    return tools


def cuda_toolkit(candidates: list[str | None], why: str) -> Path:
    """The first of ``candidates`` (paths; None and ``"None"`` skipped) that is
    a CUDA toolkit's root: ``include/cuda_runtime.h`` and ``bin/nvcc``. A
    directory holding only an ``nvcc`` wrapper (``/usr/local``) is not one.
    ``SourceBuildError`` naming ``why`` a toolkit is needed, where it was
    looked for, and the fix, when none is."""
    names = [c for c in candidates if c and c != "None"]
    for c in names:
        if (Path(c) / "include" / "cuda_runtime.h").is_file() and (Path(c) / "bin" / "nvcc").exists():
            return Path(c)
    raise SourceBuildError(
        f"step toolchain: {why}; its CMake config needs a CUDA toolkit's headers and libcudart even for the CPU "
        f"extension, and none was found (looked in {', '.join(names) or 'nothing'}). Fix: install torch's CPU build "
        "in that environment, or a CUDA toolkit of torch's CUDA version (CUDA_HOME names its root)")


def cuda_nvrtc(python: str, home: Path) -> Path | None:
    """The libnvrtc a CUDA build of torch links every extension against: the
    toolkit's at ``home`` (``lib*/``), else the one of torch's own
    ``nvidia-*`` packages beside it in ``python``'s environment (a toolkit
    with only the runtime and nvcc has none); None when neither has it."""
    site = Path(_run([python, "-c", "import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))"]))
    found = sorted(home.glob("lib*/libnvrtc.so*")) or sorted(site.glob("nvidia/*/lib/libnvrtc.so.*"))
    return found[0] if found else None


def build_digest(base: Base, flavor: str, tools: dict[str, str]) -> str:
    """sha256 over every input of the build of ``flavor``: ``RECIPE``, the
    sdist, each build patch's name and diff (not its header), third-party
    source and Debian package, and the toolchain (``toolchain``)."""
    build = base.build(flavor)
    sdist = base.release_sdist()
    h = hashlib.sha256(f"{RECIPE}\0{flavor}\0{sdist.sha256}\0".encode())
    for p in build_patches(base):  # their diffs: a header does not change what is compiled
        h.update(p.name.encode() + b"\0" + Patch.read(p).diff.encode())
    for t in build.third_party:
        h.update(f"{t.name}\0{t.sha256}\0{t.top}\0{t.cmake}\0".encode())
    for pkg in build.packages:
        h.update(f"{pkg.name}\0{pkg.sha256}\0".encode())
    h.update(json.dumps(tools, sort_keys=True).encode())
    return h.hexdigest()


def work_dir(base: Base, flavor: str, digest: str) -> Path:
    """Where the build of ``flavor`` with inputs ``digest`` runs and is kept."""
    return cache_dir() / "builds" / f"{flavor}-{base.version}-{digest[:16]}"


def built(base: Base, flavor: str, python: str = sys.executable) -> Path | None:
    """The wheel a finished build of ``flavor`` with the current inputs left,
    or None when there is none yet."""
    work = work_dir(base, flavor, build_digest(base, flavor, toolchain(python)))
    data = _read_record(work / "built.json")
    return work / "dist" / data["wheel"] if data else None


def _unpack(tarball: Path, dest: Path, top: str, what: str) -> Path:
    """Unpack ``tarball`` into ``dest`` (replaced) and return ``dest/top``."""
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    with tarfile.open(tarball) as tar:
        tar.extractall(dest, filter="tar")
    if not (dest / top).is_dir():
        raise SourceBuildError(f"step sources: {tarball.name} ({what}) has no top folder {top}/: the pinned file "
                               "is not what base.toml says; fix the line's base.toml")
    return dest / top


def third_party_tree(source: ThirdPartySource, dest: Path) -> Path:
    """The unpacked, verified tree of ``source`` under ``dest``."""
    tarball = _verified_third_party(source)
    return _unpack(tarball, dest / source.name, source.top, f"[third-party.{source.name}]")


def _verified_third_party(source: ThirdPartySource) -> Path:
    """The tarball of ``source`` in ``third_party_dir()``, its sha256 checked;
    ``SourceBuildError`` naming the step, the file and the fix."""
    tarball = third_party_dir() / source.filename
    if not tarball.is_file():
        raise SourceBuildError(
            f"step sources: {tarball} is missing ([third-party.{source.name}] of the line's base.toml). Fix: put "
            f"the pinned {source.filename} there (sha256 {source.sha256}; its README says where it comes from), "
            "or set VDIST_THIRD_PARTY to the folder that has it")
    try:
        verify_digest(tarball, source.sha256, source.filename,
                      f"It is not the pinned [third-party.{source.name}] of the line's base.toml: replace it.")
    except BaseError as e:
        raise SourceBuildError(f"step sources: {tarball}: {e}") from None
    return tarball


def unpack_packages(packages: tuple[DebianPackage, ...], dest: Path) -> Path:
    """Every Debian build package fetched (``fetch_deb``) and unpacked into
    ``dest`` (its ``usr/include``, ``usr/lib/<multiarch>``)."""
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    for pkg in packages:
        deb = fetch_deb(pkg)
        try:
            subprocess.run(["dpkg-deb", "-x", str(deb), str(dest)], check=True, capture_output=True)
        except FileNotFoundError:
            raise SourceBuildError(f"step packages: dpkg-deb is not installed; it unpacks {deb.name}. Fix: install "
                                   "Debian's dpkg package, or build on a Debian or Ubuntu machine") from None
        except subprocess.CalledProcessError as e:
            raise SourceBuildError(f"step packages: dpkg-deb could not unpack {deb}: {e.stderr.decode()[-500:]}. "
                                   "Fix: delete it and build again (it is fetched anew)") from None
    return dest


# Variables of the caller's environment that would change what is compiled
# without changing the build's digest (compilers and their flags, search paths,
# CMake's and vLLM's settings: VLLM_USE_PRECOMPILED would even download binaries):
# the build runs without them; g++ is the compiler (CC/CXX set), as toolchain() checks.
_BUILD_ENV_DROPPED = re.compile(r"(CC|CXX|CPP|CFLAGS|CXXFLAGS|CPPFLAGS|LDFLAGS|CPATH|LIBRARY_PATH|C_INCLUDE_PATH|"
                                r"CPLUS_INCLUDE_PATH|CMAKE_\w*|VLLM_\w*|FETCHCONTENT_\w*|MAX_JOBS|NVCC_THREADS|"
                                r"SETUPTOOLS_SCM_\w*|TORCH_CUDA_ARCH_LIST|CCACHE_\w*|SCCACHE_\w*|CUDA_HOME|CUDA_PATH)")


def build_environment(environ: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """The environment a build starts from: ``environ`` without the variables
    that would change the compiled result behind the digest's back
    (``_BUILD_ENV_DROPPED``), with ``OFFLINE_ENV`` and ``CC=gcc``, ``CXX=g++``;
    and the names dropped (the build prints them)."""
    dropped = sorted(k for k in environ if _BUILD_ENV_DROPPED.fullmatch(k))
    env = {k: v for k, v in environ.items() if k not in dropped}
    env.update(OFFLINE_ENV, CC="gcc", CXX="g++")
    return env, dropped


def _read_record(record: Path) -> dict | None:
    """A finished build's ``built.json``, or None when it is missing, not
    whole, or its wheel is gone (then the build is not finished)."""
    try:
        data = json.loads(record.read_text())
        return data if (record.parent / "dist" / data["wheel"]).is_file() else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _progress(line: str, state: dict) -> None:
    m = re.match(r"\[(\d+)/(\d+)\]", line)
    if m:
        done, total = int(m.group(1)), int(m.group(2))
        step = done * 20 // total
        if step > state.get("step", -1):
            state["step"] = step
            mins = (time.monotonic() - state["t0"]) / 60
            print(f"   {done}/{total} build steps ({done * 100 // total} %, {mins:.0f} min)", flush=True)


def _diagnose(log_tail: str) -> str:
    """The fix for a failed compile, from the log's last lines."""
    m = re.search(r"fatal error: (\S+): No such file or directory", log_tail)
    if m:
        return (f"a header is missing ({m.group(1)}): add the Debian package that provides it (apt-file search "
                f"{m.group(1)}) to [build-packages.*] and [build.<flavor>] packages of the line's base.toml")
    if "FETCHCONTENT_FULLY_DISCONNECTED" in log_tail or "Could not find" in log_tail and "FetchContent" in log_tail:
        return ("the build wanted to fetch a dependency: pin its source tree as [third-party.<name>] with the "
                "CMake variable that takes a local tree")
    if "internal compiler error" in log_tail:
        return ("the compiler crashed on a source: a build patch must leave that source out where the compiler "
                "cannot build it (as the line's probe of flash_mla.cpp does)")
    return "read the log above; a build patch or a pinned input of the line's base.toml must change"


def build_flavor(base: Base, flavor: str, python: str = sys.executable, jobs: int | None = None) -> Path:
    """Compile ``flavor`` from the sdist (see the module's docstring) unless a
    finished build with the same inputs is cached; return the built wheel.
    ``SourceBuildError`` (step, file, fix) when a step fails; the work
    directory is kept so that the next run resumes."""
    tools = toolchain(python)
    build = base.build(flavor)
    digest = build_digest(base, flavor, tools)
    work = work_dir(base, flavor, digest)
    record = work / "built.json"
    if data := _read_record(record):
        return work / "dist" / data["wheel"]
    # the pinned inputs first, before anything is fetched or unpacked
    for t in build.third_party:
        _verified_third_party(t)
    for pkg in build.packages:
        try:
            fetch_deb(pkg)
        except BaseError as e:
            raise SourceBuildError(f"step packages: {e}") from None
    work.mkdir(parents=True, exist_ok=True)
    with open(work / ".lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"   another build of these inputs runs in {work}: waiting for it", flush=True)
            fcntl.flock(lock, fcntl.LOCK_EX)
        if data := _read_record(record):
            return work / "dist" / data["wheel"]
        return _build_locked(base, flavor, python, jobs, tools, digest, work)


def _build_locked(base: Base, flavor: str, python: str, jobs: int | None, tools: dict[str, str], digest: str,
                  work: Path) -> Path:
    """``build_flavor``'s steps, in ``work``, whose lock the caller holds."""
    build = base.build(flavor)
    record = work / "built.json"
    sdist = base.release_sdist()
    print(f"== {flavor} flavor of vllm {base.version} compiled from {sdist.filename} in {work} "
          f"(g++ {tools['g++']}, {tools['cmake']}; log: reports/logs/build-{flavor}.log)", flush=True)
    src_stamp = work / "src.ok"
    top = f"vllm-{base.version}"
    if not src_stamp.is_file():
        print("   [1/4] sdist, build patches", flush=True)
        src = _unpack(fetch(sdist), work / "sdist", top, sdist.filename)
        for patch in build_patches(base):
            apply_patch(patch, src)
        src_stamp.write_text("\n".join(p.name for p in build_patches(base)) + "\n")
    src = work / "sdist" / top
    print("   [2/4] third-party sources, Debian build packages", flush=True)
    env, dropped = build_environment(dict(os.environ))
    if dropped:
        print(f"   not passed to the build (they would change it behind its digest): {', '.join(dropped)}", flush=True)
    env.update(VLLM_TARGET_DEVICE=flavor, MAX_JOBS=str(jobs or os.cpu_count() or 1),
               FETCHCONTENT_BASE_DIR=str(work / "fetchcontent"))
    cmake_args = list(OFFLINE_CMAKE_ARGS)
    for t in build.third_party:
        tree = third_party_tree(t, work / "third-party")
        env[t.cmake] = str(tree)
        cmake_args.append(f"-D{t.cmake}={tree}")
    env["CMAKE_ARGS"] = " ".join(cmake_args)
    if "cuda-toolkit" in tools:  # a CUDA build of torch: its CMake config needs the toolkit's headers
        cmake_args.append(f"-DCUDA_TOOLKIT_ROOT_DIR={tools['cuda-toolkit'].split()[0]}")
        if "cuda-nvrtc" in tools:
            cmake_args.append(f"-DCUDA_nvrtc_LIBRARY={cuda_nvrtc(python, Path(tools['cuda-toolkit'].split()[0]))}")
        env["CMAKE_ARGS"] = " ".join(cmake_args)
    path = [str(Path(python).parent)]
    if build.packages:
        root = unpack_packages(build.packages, work / "packages")
        multiarch = tools["g++"].split()[-1]
        env["CPATH"] = str(root / "usr" / "include")
        env["LIBRARY_PATH"] = str(root / "usr" / "lib" / multiarch)
        if (root / "usr" / "bin" / "ccache").exists():
            # upstream's setup.py launches the compiler through ccache when it is on PATH; the
            # objects are kept in <cache>/ccache, keyed by their preprocessed source with the
            # work directory's path taken out, so that a build in another work directory
            # (another digest) reuses every object whose source did not change
            path.append(str(root / "usr" / "bin"))
            env["LD_LIBRARY_PATH"] = os.pathsep.join(
                p for p in (str(root / "usr" / "lib" / multiarch), env.get("LD_LIBRARY_PATH")) if p)
            env.update(CCACHE_DIR=str(cache_dir() / "ccache"), CCACHE_BASEDIR=str(work), CCACHE_NOHASHDIR="true",
                       CCACHE_COMPILERCHECK="content", CCACHE_MAXSIZE="20G")
    env["PATH"] = os.pathsep.join([*path, env.get("PATH", "")])
    print(f"   [3/4] compile (upstream's setup.py: CMake, Ninja, {env['MAX_JOBS']} jobs)", flush=True)
    REPORTS.joinpath("logs").mkdir(parents=True, exist_ok=True)
    log_path = REPORTS / "logs" / f"build-{flavor}.log"
    dist = work / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    cmd = [python, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--no-index", "-v",
           "-w", str(dist), str(src)]
    t0, state = time.monotonic(), {"t0": time.monotonic()}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    tail: list[str] = []
    with open(log_path, "w") as log:
        log.write(f"$ {' '.join(cmd)}\n# CMAKE_ARGS={env['CMAKE_ARGS']}\n")
        proc = subprocess.Popen(cmd, cwd=src, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in proc.stdout:
            log.write(line)
            tail = (tail + [line])[-60:]
            _progress(line.strip(), state)
        code = proc.wait()
    shutil.copyfile(log_path, work / "build.log")
    if code != 0:
        text = "".join(tail)
        failed = re.findall(r"FAILED: (\S+)", text)
        raise SourceBuildError(
            f"step compile failed (exit {code}){' at ' + failed[-1] if failed else ''}; the log is {log_path}, "
            f"its end:\n{text[-3000:]}\nFix: {_diagnose(text)}. The work directory {work} is kept: a run with "
            "the same inputs resumes there; a changed input (a build patch, base.toml) builds in a new one, and "
            f"this one can go (rm -rf {work})")
    wheels = sorted(dist.glob("*.whl"))
    if len(wheels) != 1:
        raise SourceBuildError(f"step compile: pip left {len(wheels)} wheels in {dist}, not one (log {log_path})")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    print(f"   [4/4] {wheels[0].name}", flush=True)
    disk = sum(f.stat().st_size for f in work.rglob("*") if f.is_file() and not f.is_symlink())
    partial = record.with_suffix(".partial")  # written whole, then renamed: never half a record
    partial.write_text(json.dumps({"wheel": wheels[0].name, "wall_s": round(time.monotonic() - t0),
                                   "cpu_s": round(cpu), "disk_bytes": disk, "toolchain": tools,
                                   "digest": digest}, indent=1) + "\n")
    os.replace(partial, record)
    return wheels[0]


def flavor_wheel(base: Base, flavor: str) -> Path:
    """The wheel whose binaries ``flavor`` carries: the pinned wheel
    (``fetch``) or, for a flavor built from the sdist, the cached build
    (``build_flavor``, which compiles when its inputs changed)."""
    if base.build(flavor).source == "wheel":
        return fetch(base.artifact(flavor))
    return build_flavor(base, flavor)


def flavor_digest(base: Base, flavor: str) -> str:
    """What identifies ``flavor``'s binaries: the pinned wheel's sha256, or
    ``sdist:<build_digest>`` for a flavor built from the sdist."""
    if base.build(flavor).source == "wheel":
        return base.artifact(flavor).sha256
    return "sdist:" + build_digest(base, flavor, toolchain())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m scripts.series.source_build", description=__doc__.split("\n\n")[0])
    p.add_argument("--line", default=None)
    p.add_argument("--flavor", default="cpu")
    p.add_argument("--jobs", type=int, default=None, help="parallel compile jobs (default: the CPU count)")
    p.add_argument("--if-sdist", action="store_true",
                   help="only where the flavor is obtained from the sdist (base.toml, VDIST_BUILD_<FLAVOR>); quiet "
                        "when it is cached")
    args = p.parse_args(argv)
    try:
        base = load_base(args.line)
        if args.if_sdist:
            if base.build(args.flavor).source == "sdist" and built(base, args.flavor) is None:
                build_flavor(base, args.flavor, jobs=args.jobs)
            return 0
        print(build_flavor(base, args.flavor, jobs=args.jobs))
    except (BaseError, SeriesError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
