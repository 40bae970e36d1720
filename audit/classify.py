"""The record type and id of raw audit-topic bytes: the one definition that the store writes and that
``driftlog verify`` checks again.

A value is a well-formed audit record when it is UTF-8 JSON whose top level is an object with ``v`` the
integer 1, ``type`` one of :data:`~audit.records.RECORD_TYPES`, ``id`` a string and ``body`` an object;
then its own type and id are used. Anything else is kept as type ``invalid`` with the first 32 hex digits
of the SHA-256 of its bytes as id. Only ``v``, ``type``, ``id`` and the first byte of ``body`` are
decoded; the rest is skipped by msgspec without building objects.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import msgspec

from audit.records import RECORD_TYPES, RECORD_VERSION

INVALID = "invalid"


class _Head(msgspec.Struct):
    v: int | None = None
    type: str | None = None
    id: str | None = None
    body: msgspec.Raw = msgspec.Raw(b"")


_decode = msgspec.json.Decoder(_Head).decode
_TYPES = frozenset(RECORD_TYPES)


def classify(values: Iterable[bytes]) -> tuple[list[str], list[str]]:
    """Types and ids of ``values``, in order."""
    types: list[str] = []
    ids: list[str] = []
    for value in values:
        try:
            if not value.isascii():
                value.decode()  # msgspec checks the UTF-8 of the strings it decodes, not of what it skips
            head: _Head | None = _decode(value)
        except (msgspec.DecodeError, UnicodeDecodeError):
            head = None
        if (
            head is not None
            and head.v == RECORD_VERSION
            and head.type in _TYPES
            and head.id is not None
            and len(head.body) > 0
            and memoryview(head.body)[0] == 0x7B  # {
        ):
            types.append(head.type)
            ids.append(head.id)
        else:
            types.append(INVALID)
            ids.append(hashlib.sha256(value).hexdigest()[:32])
    return types, ids
