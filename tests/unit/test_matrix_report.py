"""The matrix's reports (scripts/validation/matrix/report.py), without an engine: rows
grouped by family with their failures first, and ``--update`` replacing rows
by id while keeping the others."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from scripts.validation.matrix.report import MatrixRow, write


def row(row_id, value, passed, family="encoders"):
    return MatrixRow(row_id, family, "BertModel", row_id.split("/")[1], row_id.split("/")[2], "MRV2", "native",
                     "text", "references.embed", "max abs error", value, 1e-4, passed, 1.0,
                     None if passed else (f"max abs error {value:.2g} > 0.0001" if value else "engine: AssertionError"))


def test_reports_group_by_family_and_list_failures(tmp_path):
    write([row("bert-cls/embed/MRV2", 3e-8, True), row("bert-cross/score/MRV2", 5.7e-4, False, "cross-encoders")],
          [], 60.0, directory=tmp_path)
    md = (tmp_path / "matrix.md").read_text()
    assert "1 rows passed, 1 failed" in md
    assert md.index("## Failures (1)") < md.index("### encoders") < md.index("### cross-encoders")
    assert "| bert-cross/score/MRV2 | max abs error 0.00057 > 0.0001 |" in md
    suite = ET.parse(tmp_path / "matrix-junit.xml").getroot()
    assert (suite.get("tests"), suite.get("failures")) == ("2", "1")


def test_update_replaces_rows_by_id_and_keeps_the_others(tmp_path):
    write([row("bert-cls/embed/MRV2", 3e-8, True), row("gemma2-last/embed/MRV2", None, False)], [], 60.0,
          directory=tmp_path)
    write([row("gemma2-last/embed/MRV2", 7e-8, True)], [], 30.0, directory=tmp_path, update=True)
    report = json.loads((tmp_path / "matrix.json").read_text())
    assert [(r["id"], r["value"], r["passed"]) for r in report["rows"]] == [
        ("bert-cls/embed/MRV2", 3e-8, True), ("gemma2-last/embed/MRV2", 7e-8, True)]
    assert report["wall_seconds"] == 90.0
