"""Rotating the signing key: the new public key joins the old ones, and checkpoints signed before and
after the rotation all verify with the key their key_id names; a key outside the ring is reported."""

from __future__ import annotations

from pathlib import Path

from audit.checkpoint import Signer, append_line, load_public_keys, public_key_path, read_checkpoints


def test_checkpoints_from_before_and_after_a_rotation_verify(tmp_path: Path) -> None:
    key, cps = tmp_path / "audit.duckdb.signing.pem", tmp_path / "cp.jsonl"
    old = Signer.load_or_create(key)
    append_line(cps, old.checkpoint(1, {("t", 0): (5, b"\x01" * 32)}))
    key.rename(tmp_path / "retired.pem")  # rotation: the private key moves away; the .pub stays
    new = Signer.load_or_create(key)
    append_line(cps, new.checkpoint(2, {("t", 0): (9, b"\x02" * 32)}))
    assert old.key_id != new.key_id
    ring = load_public_keys(public_key_path(key))
    assert set(ring) == {old.key_id, new.key_id}
    good, problems = read_checkpoints(cps, ring)
    assert problems == [] and [c.seq for c in good] == [1, 2]


def test_a_checkpoint_signed_by_a_key_outside_the_ring_is_a_problem(tmp_path: Path) -> None:
    cps = tmp_path / "cp.jsonl"
    a = Signer.load_or_create(tmp_path / "a.pem")
    b = Signer.load_or_create(tmp_path / "b.pem")
    c = Signer.load_or_create(tmp_path / "c.pem")
    append_line(cps, c.checkpoint(1, {}))
    ring = {**load_public_keys(tmp_path / "a.pem.pub"), **load_public_keys(tmp_path / "b.pem.pub")}
    assert set(ring) == {a.key_id, b.key_id}
    good, problems = read_checkpoints(cps, ring)
    assert good == [] and "not in the public key file" in problems[0]
    # one key only (as before): the signature itself is what fails
    good, problems = read_checkpoints(cps, load_public_keys(tmp_path / "a.pem.pub"))
    assert good == [] and "signature does not match" in problems[0]
