"""Without the shared STS-B data, ``make`` and ``make test`` stop before
building anything, and a job reading the data stops, each naming the
directory they looked in and ``STS_DATA`` (README, "Two commands"); it
used to build everything and then fail in the smoke job with a bare
``FileNotFoundError``."""

from __future__ import annotations

import subprocess

import pytest

from scripts.common.paths import REPO
from scripts.validation.checkpoints.models import StsDataMissing, sts_test


def test_reading_missing_data_names_sts_data(tmp_path):
    missing = tmp_path / "nowhere" / "sts-test.csv"
    with pytest.raises(StsDataMissing, match=rf"{tmp_path / 'nowhere'} has no sts-test\.csv.*STS_DATA=") as e:
        sts_test(missing)
    assert isinstance(e.value, FileNotFoundError)


@pytest.mark.parametrize("target", ["all", "test"])
def test_make_stops_first_without_the_data(tmp_path, target):
    """The check fails before any other recipe runs (nothing on stdout, where make echoes them)."""
    proc = subprocess.run(["make", "--no-print-directory", f"STS_DATA={tmp_path}", target], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert (f"make: the STS-B test split is not at {tmp_path}/sts-test.csv: put the shared data beside the "
            "repository (../shared/data/stsbenchmark) or name its directory with STS_DATA=dir") in proc.stderr
