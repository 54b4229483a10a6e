"""OCI images of the distribution (``make image``): ``vllm serve`` of a
flavor's wheel, built with buildah from ``docker/Containerfile.<flavor>`` as
upstream builds its images (``docker/Dockerfile.cpu``, ``vllm/vllm-openai``).

The build reads no package index: ``pip download`` on this machine gathers
the wheel and every wheel it requires into the build context (``wheels/``,
taken by the Containerfile through a bind mount, so they are not a layer of
the image), with pip's own configuration (``PIP_EXTRA_INDEX_URL=
https://download.pytorch.org/whl/cpu`` takes PyTorch's CPU build of torch).
Those wheels are for this interpreter (CPython 3.11 on glibc x86_64), so the
image's ``python3`` must be 3.11 too: the Containerfile checks it.

The base image is ``BASE_IMAGE`` when the user names one (an image buildah
can read, with Debian's ``apt-get`` and ``python3`` 3.11: Debian 12), else
``localhost/vllm-mrv2pool-debian:bookworm``, made here once from Debian's
archive: ``debootstrap --variant=minbase bookworm`` (its Release file checked
against ``debian-archive-keyring``), imported by ``docker/Containerfile.debian``.
buildah runs as root with ``--isolation chroot`` (what works on machines
without user namespaces, such as these).

    python -m scripts.series.image build WHEEL [--base-image IMAGE] [--tag TAG]

prints the image's name; ``buildah push NAME docker://REGISTRY/...`` or
``buildah push NAME oci-archive:FILE`` takes it elsewhere.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from packaging.utils import parse_wheel_filename

from scripts.common.paths import BUILD, REPO
from scripts.series.index import flavor_of

CONTAINERFILES = REPO / "docker"
DEBIAN_SUITE = "bookworm"
DEBIAN_MIRROR = os.environ.get("DEBIAN_MIRROR", "http://deb.debian.org/debian")
DEBIAN_SECURITY_MIRROR = os.environ.get("DEBIAN_SECURITY_MIRROR", "http://deb.debian.org/debian-security")
DEBIAN_BASE = f"localhost/vllm-mrv2pool-debian:{DEBIAN_SUITE}"
# The Python of the base image (Debian 12's python3), which the wheels gathered here must fit.
PYTHON_VERSION = "3.11"


class ImageError(RuntimeError):
    """A step of the image build failed; the message names the step, what
    its tool said, and the fix."""


def require_tools(*names: str) -> None:
    """``ImageError`` naming each of ``names`` that is not on ``PATH`` (Debian packages them under the same names)."""
    missing = [name for name in names if shutil.which(name) is None]
    if missing:
        raise ImageError(f"{', '.join(missing)} not found: make image builds with buildah and makes its base with "
                         f"debootstrap.\nFix: apt-get install {' '.join(missing)} (as root; make image-tools does it)")


def _run(step: str, cmd: list[str], fix: str, **kwargs) -> subprocess.CompletedProcess:
    """``cmd`` with its output captured; ``ImageError`` naming ``step``, the
    tail of the output and ``fix`` when it fails."""
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kwargs)
    if proc.returncode:
        raise ImageError(f"{step} failed (exit {proc.returncode}): {' '.join(cmd)}\n"
                         f"{proc.stdout[-3000:]}\nFix: {fix}")
    return proc


def image_exists(name: str) -> bool:
    """Whether buildah's storage holds an image named ``name``."""
    return subprocess.run(["buildah", "inspect", "--type", "image", name],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0


def image_tag(wheel: Path) -> str:
    """``localhost/vllm-mrv2pool-<flavor>:<version>`` for ``wheel``: the
    version without the flavor's ``.cpu``, ``+`` made ``-`` (a tag allows
    neither ``+`` nor more than letters, digits, ``_``, ``.`` and ``-``):
    ``vllm-0.32.0+mrv2pool.12.cpu-….whl`` gives
    ``localhost/vllm-mrv2pool-cpu:0.32.0-mrv2pool.12``."""
    version = str(parse_wheel_filename(wheel.name)[1])
    flavor = flavor_of(wheel)
    if version.endswith(".cpu"):
        version = version[: -len(".cpu")]
    return f"localhost/vllm-mrv2pool-{flavor}:{version.replace('+', '-')}"


def debian_base(name: str = DEBIAN_BASE) -> str:
    """``name``, made from Debian's archive unless buildah's storage has it:
    ``debootstrap --variant=minbase`` of ``DEBIAN_SUITE`` from
    ``DEBIAN_MIRROR`` (``$DEBIAN_MIRROR``, default deb.debian.org) in a
    temporary directory, its apt sources the release, its updates and its
    security updates (``$DEBIAN_SECURITY_MIRROR``), packed as ``rootfs.tar`` and imported with
    ``docker/Containerfile.debian``. The temporary tree is removed whatever
    happens; ``ImageError`` when debootstrap or buildah fails."""
    if image_exists(name):
        return name
    require_tools("buildah", "debootstrap")
    BUILD.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="debian-base-", dir=BUILD) as tmp:
        rootfs, context = Path(tmp, "rootfs"), Path(tmp, "context")
        context.mkdir()
        _run("debootstrap", ["debootstrap", "--variant=minbase", DEBIAN_SUITE, str(rootfs), DEBIAN_MIRROR],
             f"check that {DEBIAN_MIRROR} serves Debian {DEBIAN_SUITE} (DEBIAN_MIRROR=URL names another "
             "mirror), or name an existing base image with BASE_IMAGE=")
        # debootstrap leaves the release alone in sources.list: the Containerfiles' apt-get upgrade
        # takes its point-release and security updates from these
        (rootfs / "etc/apt/sources.list").write_text(
            f"deb {DEBIAN_MIRROR} {DEBIAN_SUITE} main\n"
            f"deb {DEBIAN_MIRROR} {DEBIAN_SUITE}-updates main\n"
            f"deb {DEBIAN_SECURITY_MIRROR} {DEBIAN_SUITE}-security main\n")
        _run("packing the base's root file system",
             ["tar", "--numeric-owner", "-C", str(rootfs), "-cf", str(context / "rootfs.tar"), "."],
             "free disk space under .build/")
        _run("importing the base image", ["buildah", "bud", "--isolation", "chroot", "--format", "docker",
                                          "-f", str(CONTAINERFILES / "Containerfile.debian"), "-t", name,
                                          str(context)],
             "see buildah's message above")
    return name


def gather_wheels(wheel: Path, dest: Path) -> None:
    """``wheel`` and every wheel it requires, for this interpreter, in
    ``dest`` (``pip download --only-binary :all:``, pip's configuration and
    cache as the user has them). ``ImageError`` with pip's message when a
    requirement has no wheel or an index cannot be reached."""
    if f"{sys.version_info.major}.{sys.version_info.minor}" != PYTHON_VERSION:
        raise ImageError(f"the image's wheels are gathered for this interpreter, Python {sys.version.split()[0]}, "
                         f"and the image's python3 is {PYTHON_VERSION}.\nFix: run make image from a venv of "
                         f"Python {PYTHON_VERSION} (make's own venv on Debian 12)")
    dest.mkdir(parents=True, exist_ok=True)
    _run("gathering the wheels", [sys.executable, "-m", "pip", "download", "--progress-bar", "off",
                                  "--only-binary", ":all:", "--dest", str(dest), str(wheel)],
         "see pip's message above: a requirement without a wheel for Python "
         f"{PYTHON_VERSION} on x86_64, or an index pip cannot reach")


def build(wheel: Path, base_image: str | None = None, tag: str | None = None) -> str:
    """Build the image of ``wheel``'s flavor (``docker/Containerfile.<flavor>``)
    and return its name (``tag``, default ``image_tag(wheel)``). The build
    context is ``.build/image/<flavor>/``: the gathered wheels, removed after
    the build. ``base_image``: the image to build on (default: the Debian
    base, ``debian_base``). ``ImageError`` when a tool is missing or a step
    fails (buildah tags an image only once its build succeeded)."""
    wheel = Path(wheel).resolve()
    if not wheel.is_file():
        raise ImageError(f"{wheel} does not exist.\nFix: make wheel (make image builds it first)")
    flavor = flavor_of(wheel)
    require_tools("buildah")
    base_image = base_image or debian_base()
    tag = tag or image_tag(wheel)
    context = BUILD / "image" / flavor
    shutil.rmtree(context, ignore_errors=True)
    try:
        gather_wheels(wheel, context / "wheels")
        version = str(parse_wheel_filename(wheel.name)[1])
        _run(f"buildah bud of docker/Containerfile.{flavor}",
             ["buildah", "bud", "--isolation", "chroot", "--format", "docker",
              "--build-arg", f"BASE_IMAGE={base_image}", "--build-arg", f"VLLM_VERSION={version}",
              "--build-arg", f"PYTHON_VERSION={PYTHON_VERSION}",
              "-f", str(CONTAINERFILES / f"Containerfile.{flavor}"), "-t", tag, str(context)],
             "see buildah's message above")
    finally:
        shutil.rmtree(context, ignore_errors=True)
    return tag


def main(argv: list[str] | None = None) -> int:
    """The command line (module docstring); exit status 1 with the failed step."""
    parser = argparse.ArgumentParser(prog="python -m scripts.series.image", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build the image of a wheel's flavor; prints its name")
    b.add_argument("wheel", type=Path)
    b.add_argument("--base-image", default=None, help="the image to build on (default: a Debian 12 base made "
                                                      "from Debian's archive)")
    b.add_argument("--tag", default=None, help="the image's name (default: localhost/vllm-mrv2pool-<flavor>:"
                                               "<version>)")
    args = parser.parse_args(argv)
    try:
        print(build(args.wheel, args.base_image or None, args.tag or None))
    except ImageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
