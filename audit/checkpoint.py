"""Signed checkpoints of the chain heads, kept outside the DuckDB file.

A checkpoint is one JSON line ``{"payload": "<json>", "signature": "<hex>", "key_id": "<hex>"}`` where
``payload`` is the exact signed text: ``{"v": 1, "seq", "time", "heads": [{"topic", "partition",
"next_offset", "head"}]}``. The sink appends it to the checkpoint file (fsync), publishes it on the
checkpoints topic and records it in the ``checkpoints`` table. Whoever can rewrite the DuckDB file cannot
forge these without the private key, and cannot drop records a published checkpoint already covers.
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from streams.errors import StoreError

Heads = dict[tuple[str, int], tuple[int, bytes]]


def fingerprint(public: Ed25519PublicKey) -> str:
    """SHA-256 of the raw public key, hex (what ``DRIFTLOG_CHECKPOINT_KEY_FINGERPRINT`` pins)."""
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


def _key_id(public: Ed25519PublicKey) -> str:
    return fingerprint(public)[:16]


def public_key_path(private_path: Path) -> Path:
    return private_path.with_name(private_path.name + ".pub")


class Signer:
    """An Ed25519 key pair kept in files (private key 0600, public key beside it with ``.pub``)."""

    def __init__(self, private: Ed25519PrivateKey) -> None:
        self.private = private
        self.key_id = _key_id(private.public_key())

    @classmethod
    def load_or_create(cls, path: Path) -> Signer:
        if path.exists():
            key = serialization.load_pem_private_key(path.read_bytes(), password=None)
            if not isinstance(key, Ed25519PrivateKey):
                raise StoreError(f"{path} is not an Ed25519 private key")
            return cls(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        key = Ed25519PrivateKey.generate()
        pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(pem)
        public = key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        with open(public_key_path(path), "ab") as f:  # a rotated key joins the earlier ones (a key ring)
            f.write(public)
        return cls(key)

    def checkpoint(self, seq: int, heads: Heads) -> dict[str, Any]:
        payload = orjson.dumps(
            {
                "v": 1,
                "seq": seq,
                "time": round(time.time(), 3),
                "heads": [
                    {"topic": t, "partition": p, "next_offset": n, "head": h.hex()}
                    for (t, p), (n, h) in sorted(heads.items())
                ],
            },
            option=orjson.OPT_SORT_KEYS,
        ).decode()
        return {"payload": payload, "signature": self.private.sign(payload.encode()).hex(), "key_id": self.key_id}


def load_public_key(path: Path) -> Ed25519PublicKey:
    """The newest key of a public key file (its last PEM block)."""
    return list(load_public_keys(path).values())[-1]


def load_public_keys(path: Path) -> dict[str, Ed25519PublicKey]:
    """Every public key of a file (one PEM block per key: the keys before and after rotations), by key id."""
    try:
        text = path.read_bytes()
    except OSError as exc:
        raise StoreError(f"cannot read the public key {path}: {exc}") from exc
    end = b"-----END PUBLIC KEY-----"
    blocks = [block + end for block in text.split(end) if block.strip()]
    keys = {}
    for block in blocks or [text]:
        try:
            key = serialization.load_pem_public_key(block.strip())
        except ValueError as exc:
            raise StoreError(f"cannot read the public key {path}: {exc}") from exc
        if not isinstance(key, Ed25519PublicKey):
            raise StoreError(f"{path} holds a key that is not an Ed25519 public key")
        keys[_key_id(key)] = key
    return keys


@dataclass(frozen=True)
class Checkpoint:
    seq: int
    heads: Heads
    payload: str = ""  # the exact signed text (two copies of one checkpoint have the same)


Keys = Ed25519PublicKey | dict[str, Ed25519PublicKey]  # one pinned key, or a ring of them by key id


def parse_lines(lines: list[bytes], origin: str, public: Keys) -> tuple[list[Checkpoint], list[str]]:
    """The checkpoints among ``lines`` whose signatures hold, and a problem naming ``origin:line`` for each
    that does not. With several public keys (a key ring, after rotations) each checkpoint is checked with
    the key its ``key_id`` names."""
    keys = public if isinstance(public, dict) else {_key_id(public): public}
    only = next(iter(keys.values())) if len(keys) == 1 else None
    good: list[Checkpoint] = []
    problems: list[str] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            doc = orjson.loads(line)
            key = keys.get(doc.get("key_id")) or only
            if key is None:
                problems.append(f"{origin}:{number}: signed by key {doc.get('key_id')!r}, not in the public key file")
                continue
            key.verify(bytes.fromhex(doc["signature"]), doc["payload"].encode())
            payload = orjson.loads(doc["payload"])
            heads = {
                (h["topic"], h["partition"]): (h["next_offset"], bytes.fromhex(h["head"])) for h in payload["heads"]
            }
            good.append(Checkpoint(payload["seq"], heads, doc["payload"]))
        except InvalidSignature:
            problems.append(
                f"{origin}:{number}: signature does not match the pinned key (forged, altered or re-signed)"
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            problems.append(f"{origin}:{number}: not a checkpoint line ({exc!r})")
    return good, problems


def read_checkpoints(path: Path, public: Keys) -> tuple[list[Checkpoint], list[str]]:
    """The checkpoints of a file whose signatures hold, and a problem line for each that does not."""
    if not path.exists():
        return [], [f"checkpoint file {path} does not exist"]
    return parse_lines(path.read_bytes().splitlines(), str(path), public)


def append_line(path: Path, line: dict[str, Any]) -> None:
    """Append one checkpoint line durably (fsync) before it is published anywhere else."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as f:
        f.write(orjson.dumps(line) + b"\n")
        f.flush()
        os.fsync(f.fileno())


def last_seq(path: Path) -> int:
    """The highest seq in the file (signature not checked: this only numbers the next checkpoint)."""
    best = 0
    if path.exists():
        for line in path.read_bytes().splitlines():
            try:
                best = max(best, int(orjson.loads(orjson.loads(line)["payload"])["seq"]))
            except (ValueError, KeyError, TypeError):
                continue
    return best
