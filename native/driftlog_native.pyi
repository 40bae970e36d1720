# Type stubs for the native core (src/), packed into the wheel by maturin.
from typing_extensions import Buffer

def chain_links(
    prev: bytes,
    topic: bytes,
    partition: int,
    n: int,
    offsets: tuple[Buffer, int],
    timestamps: tuple[Buffer, int],
    keys: tuple[Buffer, Buffer, Buffer | None, int],
    values: tuple[Buffer, Buffer, Buffer | None, int],
) -> bytes: ...
def classify_values(
    values: tuple[Buffer, Buffer, Buffer | None, int], n: int, types: list[str]
) -> tuple[bytes, bytes, bytes]: ...
def dag_ends(
    order: Buffer, indptr: Buffer, indices: Buffer, floor: Buffer, durations: Buffer, ends: Buffer
) -> None: ...
def canonical_order(times: Buffer, columns: list[object], kinds: str, order: Buffer) -> bool: ...
