"""The audit hash chain: the native loop (driftlog_native, Rust) gives exactly the links of the Python
definition (audit/chain.py), over any Arrow layout the sink and verify hand it."""

from __future__ import annotations

import hashlib

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from audit import native
from audit.chain import chain_arrow, chain_run, genesis, link
from audit.store import RawRecord
from tests.conftest import require_native

# One record's link, pinned: any implementation must give these bytes.
VECTOR = RawRecord("audit", 3, 41, 1_767_225_600_000, b"job:j", b'{"v":1}')
VECTOR_LINK = hashlib.sha256(
    genesis("audit", 3)
    + (3).to_bytes(4, "big")
    + (41).to_bytes(8, "big")
    + (1_767_225_600_000).to_bytes(8, "big")
    + (5).to_bytes(4, "big")
    + b"audit"
    + (5).to_bytes(4, "big")
    + b"job:j"
    + (7).to_bytes(4, "big")
    + b'{"v":1}'
).digest()

records = st.lists(
    st.tuples(
        st.integers(-(2**63), 2**63 - 1),  # offset
        st.integers(-(2**63), 2**63 - 1),  # timestamp
        st.one_of(st.none(), st.binary(max_size=40)),  # key
        st.binary(max_size=600),  # value
    ),
    min_size=1,
    max_size=60,
)


def columns(rows: list[tuple[int, int, bytes | None, bytes]]) -> list[pa.Array]:
    offsets, stamps, keys, values = zip(*rows, strict=True)
    return [pa.array(offsets, pa.int64()), pa.array(stamps, pa.int64()), pa.array(keys, pa.binary()),
            pa.array(values, pa.binary())]  # fmt: skip


def test_the_pinned_vector(chain_impl: str) -> None:
    assert link(genesis("audit", 3), VECTOR) == VECTOR_LINK
    cols = columns([(VECTOR.offset, VECTOR.timestamp_ms, VECTOR.key, VECTOR.value)])
    assert chain_arrow(genesis("audit", 3), b"audit", 3, *cols) == VECTOR_LINK


def test_the_native_core_is_built_where_required() -> None:
    """Under ``DRIFTLOG_REQUIRE_NATIVE=1`` (CI) the property below must run natively, not on the fallback."""
    require_native()
    assert native.core is not None


@settings(max_examples=200, deadline=None)
@given(rows=records, cut=st.integers(0, 59), partition=st.integers(-(2**31), 2**31 - 1))
def test_arrow_columns_chain_like_the_definition(rows: list[tuple[int, int, bytes | None, bytes]], cut: int,
                                                 partition: int) -> None:  # fmt: skip
    """Natively when the extension is built (CI requires it), else the fallback's conversions."""
    prev, topic = genesis("t", partition), "tópico".encode()
    expected = b"".join(chain_run(prev, topic, partition, *map(list, zip(*rows, strict=True))))
    cols = columns(rows)
    assert chain_arrow(prev, topic, partition, *cols) == expected
    # a slice (non-zero array offset, null bitmap not byte-aligned) continues from the link before it
    cut = min(cut, len(rows) - 1)
    start = expected[(cut - 1) * 32 : cut * 32] if cut else prev
    window = [c.slice(cut) for c in cols]
    assert chain_arrow(start, topic, partition, *window) == expected[cut * 32 :]


def test_native_refuses_malformed_buffers() -> None:
    require_native()
    cols = columns([(1, 2, b"k", b"v"), (2, 3, None, b"w")])
    with pytest.raises(ValueError, match="32 bytes"):
        chain_arrow(b"short", b"audit", 0, *cols)
    assert native.core is not None
    links = native.core.chain_links
    fixed, binary = native.int64s(cols[0]), native.binaries(cols[3])
    with pytest.raises(ValueError, match="fewer than 3 int64"):
        links(genesis("a", 0), b"a", 0, 3, fixed, fixed, binary, binary)
    bad_offsets = (memoryview(pa.array([0, 99, 100], pa.int32()).buffers()[1]).cast("B"), binary[1], None, 0)
    with pytest.raises(ValueError, match="outside the data buffer"):
        links(genesis("a", 0), b"a", 0, 2, fixed, fixed, binary, bad_offsets)
    with pytest.raises(ValueError, match="fewer than"):  # sizes that overflow are refused, not wrapped
        links(genesis("a", 0), b"a", 0, 2**62, fixed, fixed, binary, binary)
    with_null = native.binaries(pa.array([b"v", None], pa.binary()))
    with pytest.raises(ValueError, match="values: null at row 1"):
        links(genesis("a", 0), b"a", 0, 2, fixed, fixed, binary, with_null)


@pytest.mark.usefixtures("chain_impl")
def test_columns_must_agree_and_values_must_not_be_null() -> None:
    cols = columns([(1, 2, b"k", b"v"), (2, 3, None, b"w")])
    with pytest.raises(ValueError, match="different lengths"):
        chain_arrow(genesis("a", 0), b"a", 0, cols[0], cols[1], cols[2].slice(0, 1), cols[3].slice(0, 1))
    with pytest.raises(ValueError, match="null values"):
        chain_arrow(genesis("a", 0), b"a", 0, *cols[:3], pa.array([b"v", None], pa.binary()))
    empty = [c.slice(0, 0) for c in cols]
    assert chain_arrow(genesis("a", 0), b"a", 0, *empty) == b""
    zero_length = [pa.array([], t) for t in (pa.int64(), pa.int64(), pa.binary(), pa.binary())]
    assert chain_arrow(genesis("a", 0), b"a", 0, *zero_length) == b""


@pytest.mark.usefixtures("chain_impl")
def test_other_integer_and_binary_layouts_are_refused_or_converted() -> None:
    cols = columns([(1, 2, b"k", b"v")])
    with pytest.raises(ValueError, match="int64"):
        chain_arrow(genesis("a", 0), b"a", 0, cols[0].cast(pa.int32()), *cols[1:])
    large = [cols[0], cols[1], cols[2].cast(pa.large_binary()), cols[3].cast(pa.large_binary())]
    assert chain_arrow(genesis("a", 0), b"a", 0, *large) == chain_arrow(genesis("a", 0), b"a", 0, *cols)
