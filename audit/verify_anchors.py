"""The checkpoint history ``verify`` trusts, gathered from every copy and checked against a pinned key.

The sink writes each signed checkpoint to the checkpoint file (fsync), the optional external witness
file, the checkpoints topic and the ``checkpoints`` table, in that order. Whoever owns the host can
rewrite the file and the DuckDB file together, but not the topic (another system) nor the witness (another
host's storage), and cannot sign without the private key; so:

* signatures are checked against a key pinned by setting (``DRIFTLOG_CHECKPOINT_PUBLIC_KEY`` or
  ``DRIFTLOG_CHECKPOINT_KEY_FINGERPRINT``), never only against the ``.pub`` beside the private key;
* a copy written earlier must hold every checkpoint a copy written later holds (the file everything; the
  witness what the topic and table hold; the topic what the table holds): a checkpoint missing from an
  earlier copy was trimmed there, or the copy was restored from an older one;
* two copies of one checkpoint must be the same signed text (the host holds the private key: a checkpoint
  it re-signs after rewriting the store differs from the one the topic already holds);
* the newest checkpoint must be on every copy outside the host (one that only this host holds anchors
  nothing);
* an empty history is a failure: nothing would anchor the chain heads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import orjson

from audit.checkpoint import Checkpoint, Keys, fingerprint, load_public_keys, parse_lines
from streams.errors import DriftlogError

TopicReader = Callable[[], list[bytes]]  # the checkpoints topic's values; raises DriftlogError when unreachable


@dataclass(frozen=True)
class Anchors:
    """What verify trusts beyond this host's own files."""

    public_key: Path | None = None  # pinned public key (PEM)
    fingerprint: str = ""  # pinned SHA-256 fingerprint of the public key (hex prefix of 16+ digits)
    topic: TopicReader | None = None  # None: not compared (offline), which is said in the report
    topic_name: str = "checkpoints topic"
    witness: Path | None = None


@dataclass
class History:
    checkpoints: list[Checkpoint] = field(default_factory=list)  # one per seq, by seq
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def newest(self) -> Checkpoint | None:
        return self.checkpoints[-1] if self.checkpoints else None


def trusted_key(anchors: Anchors | None, beside: Path | None, history: History) -> Keys | None:
    """The keys to check signatures with (every key of the public key file: the keys before and after
    rotations, each checkpoint checked with the one its ``key_id`` names): the pinned file; or the one
    beside the private key when each of its keys' fingerprints is pinned (``DRIFTLOG_CHECKPOINT_KEY_FINGERPRINT``,
    comma-separated after a rotation); without any pin (``anchors`` given) a problem is reported."""
    pins = [p.strip().lower() for p in anchors.fingerprint.split(",") if p.strip()] if anchors else []
    if any(len(p) < 16 or any(c not in "0123456789abcdef" for c in p) for p in pins):
        history.problems.append("DRIFTLOG_CHECKPOINT_KEY_FINGERPRINT must be 16 or more hex digits (comma-separated)")
        return None
    path = anchors.public_key if anchors and anchors.public_key else beside
    if path is None:
        history.problems.append("no public key to check checkpoint signatures with: set DRIFTLOG_CHECKPOINT_PUBLIC_KEY")
        return None
    ring = load_public_keys(path)
    prints = ",".join(fingerprint(k) for k in ring.values())
    unpinned = [fingerprint(k) for k in ring.values() if not any(fingerprint(k).startswith(p) for p in pins)]
    if pins and unpinned:
        history.problems.append(
            f"the public key {path} (fingerprint {unpinned[0][:16]}) is not the pinned one "
            f"({', '.join(p[:16] for p in pins)}): checkpoints may have been re-signed with another key"
        )
        return None
    if anchors is not None and not pins and anchors.public_key is None:
        history.problems.append(
            f"no pinned checkpoint key: {path} sits beside the private key and could have been replaced; set "
            f"DRIFTLOG_CHECKPOINT_KEY_FINGERPRINT={prints} (or DRIFTLOG_CHECKPOINT_PUBLIC_KEY) from a trusted record"
        )
    return ring


def gather(
    con: duckdb.DuckDBPyConnection, table: str, file: Path | None, beside: Path | None, anchors: Anchors | None
) -> History:
    """Every copy of the checkpoint history, checked and compared (see the module's docstring)."""
    history = History()
    key = trusted_key(anchors, beside, history)
    if key is None:
        return history
    copies: list[tuple[str, dict[int, Checkpoint]]] = []  # in the order the sink writes them
    outside: list[str] = []  # the copies this host's owner cannot rewrite alone

    def add(origin: str, lines: list[bytes], anchor: bool = False) -> None:
        good, problems = parse_lines(lines, origin, key)
        history.problems.extend(problems)
        copies.append((origin, {c.seq: c for c in good}))
        if anchor:
            outside.append(origin)

    if file is None or not file.exists():
        history.problems.append(f"checkpoint file {file} does not exist")
        add("checkpoint file", [])
    else:
        add(str(file), file.read_bytes().splitlines())
    if anchors is not None and anchors.witness is not None:
        if anchors.witness.exists():
            add(f"witness {anchors.witness}", anchors.witness.read_bytes().splitlines(), anchor=True)
        else:
            history.problems.append(f"the witness file {anchors.witness} does not exist")
    if anchors is not None and anchors.topic is not None:
        try:
            add(anchors.topic_name, anchors.topic(), anchor=True)
        except DriftlogError as exc:
            history.problems.append(
                f"cannot read the {anchors.topic_name} ({exc}): the chain heads were not compared with it; "
                "pass --offline to check only this host's copies"
            )
    elif anchors is not None:
        history.notes.append(f"not compared with the {anchors.topic_name} (offline): only this host's copies")
    rows = con.execute(f"SELECT payload, signature, key_id FROM {table} ORDER BY seq").fetchall()
    add("checkpoints table", [orjson.dumps({"payload": p, "signature": s, "key_id": k}) for p, s, k in rows])
    _compare(copies, outside, history)
    return history


def _compare(copies: list[tuple[str, dict[int, Checkpoint]]], outside: list[str], history: History) -> None:
    union: dict[int, Checkpoint] = {}
    for i, (origin, held) in enumerate(copies):
        for seq, c in held.items():
            first = union.setdefault(seq, c)
            if first.payload != c.payload:
                history.problems.append(f"checkpoint {seq} differs between copies ({origin} holds another signed text)")
        for later, later_held in copies[i + 1 :]:
            lacking = sorted(set(later_held) - set(held))
            if lacking:
                history.problems.append(
                    f"the {origin} lacks checkpoint {lacking[0]}"
                    + (f" (and {len(lacking) - 1} more)" if len(lacking) > 1 else "")
                    + f" that the {later} holds: trimmed, or restored from an older copy"
                )
    history.checkpoints = [union[s] for s in sorted(union)]
    if not history.checkpoints:
        history.problems.append("no signed checkpoint in any copy: nothing anchors the chain heads (emptied history?)")
        return
    newest = history.checkpoints[-1].seq
    for origin, held in copies:
        if origin in outside and newest not in held:
            history.problems.append(
                f"the newest checkpoint ({newest}) is not on the {origin}: signed on this host only, so it anchors "
                "nothing (start the sink again to publish a new one)"
            )
