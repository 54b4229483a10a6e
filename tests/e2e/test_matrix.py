"""The validation matrix's MTEB STS rows (scripts/matrix.py), which no other
test covers: STS-B test through mteb, sentence-transformers against the
patched engine on MRV2 (by default) and on V1, |delta| <= 1e-4. `make matrix`
and the Buildkite pipeline run every row; the HF-comparison rows are
exercised here by test_pooling_mrv2.py and test_late_interaction_mrv2.py."""

from __future__ import annotations

import pytest

from scripts.matrix import ROW_IDS, run_row

MTEB_ROWS = [r for r in ROW_IDS if r.startswith("mteb-sts/")]


def test_matrix_has_every_design_row_on_both_runners():
    checks = {r.split("/")[0] for r in ROW_IDS}
    assert checks == {"embed", "embed-last-token", "classify", "token-classify", "token-embed",
                      "late-interaction", "mteb-sts"}
    assert all(f"{c}/{runner}" in ROW_IDS for c in checks for runner in ("MRV2", "V1"))


@pytest.mark.parametrize("row_id", MTEB_ROWS)
def test_mteb_sts_row(row_id):
    row = run_row(row_id)
    assert row.passed, row.reason
    assert row.value is not None and 0 <= row.value <= 1e-4
