"""`analyze` of a Parquet file of sample rows reads it by columns, and writes what reading it row by row
writes: the same records with the same provenance; a file with other rows (decisions) is read row by row."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from streams import analyze
from streams.contract.envelope import decode_telemetry
from streams.sim.scenarios import SCENARIOS


def sample_rows(scenario: str) -> list[dict[str, object]]:
    rows = []
    for kind, _, value in SCENARIOS[scenario](3, 16, 30).run():
        if kind == "telemetry":
            for batch in decode_telemetry(value).batches:
                rows.extend({"kind": batch.kind, **row} for row in batch.rows())
    return rows


def table(rows: list[dict[str, object]]) -> pa.Table:
    names = list(dict.fromkeys(k for row in rows for k in row))  # every kind's columns, null where absent
    return pa.table({name: [row.get(name) for row in rows] for name in names})


def encoded(path: Path) -> tuple[list[bytes], list[tuple[str, int]]]:
    """The engine's records as the audit topic carries them; dead letters as (reason, count): their
    positions and digests name the message they came in, which each reading cuts differently."""
    audit = analyze.analyze_files([path]).audit
    dead = sorted((r.body["reason"], r.body["count"]) for r in audit if r.type == "dead_letter")
    return [r.encode() for r in audit if r.type != "dead_letter"], dead


@pytest.mark.parametrize("scenario", ["training-fabric", "inference-sla"])
def test_columns_and_rows_give_the_same_records(scenario: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "samples.parquet"
    rows = sample_rows(scenario)
    pq.write_table(table(rows), path, row_group_size=1_234)  # row groups cut across messages
    assert analyze.samples_only(path)
    by_columns = encoded(path)
    monkeypatch.setattr(analyze, "samples_only", lambda _: False)
    by_rows = encoded(path)
    assert by_columns == by_rows
    assert len(by_columns[0]) > 5


def test_a_file_with_decisions_is_read_row_by_row(tmp_path: Path) -> None:
    path = tmp_path / "mixed.parquet"
    rows = sample_rows("training-fabric")[:100]
    decision = {"kind": "decision", "id": "d-1", "time": 1.0, "controller": "c", "layer": "power", "action": "cap"}
    pq.write_table(table([*rows, decision]), path)
    assert not analyze.samples_only(path)
