"""The published contract: schema files, examples and docs/contract.md agree."""

import json
from pathlib import Path

import jsonschema
import pytest

from streams.contract.decision import decode_decision
from streams.contract.docs import EXAMPLES, render
from streams.contract.envelope import decode_telemetry
from streams.contract.schema import DECISION_SCHEMA, SCHEMA_DIR, SCHEMA_FILES, TELEMETRY_SCHEMA, load

ROOT = Path(__file__).resolve().parents[2]


def test_docs_are_rendered_from_the_schema_files() -> None:
    assert (ROOT / "docs" / "contract.md").read_text() == render(), "run: driftlog contract docs > docs/contract.md"


@pytest.mark.parametrize("name", sorted(SCHEMA_FILES.values()))
def test_schema_files_are_valid_json_schema(name: str) -> None:
    jsonschema.Draft202012Validator.check_schema(json.loads((SCHEMA_DIR / name).read_text()))


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.json")), ids=lambda p: p.name)
def test_every_example_validates_and_decodes_without_rejects(path: Path) -> None:
    doc = json.loads(path.read_text())
    raw = path.read_bytes()
    if doc["schema"] == DECISION_SCHEMA:
        jsonschema.validate(doc, load(DECISION_SCHEMA))
        decision, reject = decode_decision(raw)
        assert reject is None and decision is not None and decision["id"] == doc["id"]
    else:
        jsonschema.validate(doc, load(TELEMETRY_SCHEMA))
        decoded = decode_telemetry(raw)
        assert decoded.rejects == []
        assert decoded.count() == decoded.total > 0


def test_there_is_an_example_of_every_kind() -> None:
    names = {p.stem for p in EXAMPLES.glob("*.json")}
    assert names >= {"op", "metric", "step", "topology", "columnar", "decision"}


def test_unknown_schema_versions_are_refused_by_name() -> None:
    raw = (EXAMPLES / "step.json").read_bytes().replace(TELEMETRY_SCHEMA.encode(), b"driftlog.telemetry/2")
    assert [r.reason for r in decode_telemetry(raw).rejects] == ["unknown_schema"]
    raw = (EXAMPLES / "decision.json").read_bytes().replace(DECISION_SCHEMA.encode(), b"driftlog.decision/2")
    assert decode_decision(raw)[1].reason == "unknown_schema"  # type: ignore[union-attr]
