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
def dag_ends(layout: DagLayout, floor: Buffer, durations: Buffer, ends: Buffer) -> None: ...

# kind, first position, rows, (float64, int64, bool, uint32) buffers: the part's columns of each type, joined
# (objects of the native core that numpy reads, and writes, through the buffer protocol)
Part = tuple[str, int, int, tuple[Buffer, Buffer, Buffer, Buffer], tuple[float, float] | None]

class TelemetryDecoder:
    def __init__(
        self,
        schema: str,
        max_rows: int,
        max_batches: int,
        max_seq: int,
        kinds: list[tuple[str, list[tuple[object, ...]]]],
        times: dict[str, str] = ...,
    ) -> None: ...
    def decode(self, raw: bytes) -> tuple[str, int | None, int, list[str], list[Part]] | None: ...

def dag_masked_step_ends(
    layout: DagLayout,
    floor: Buffer,
    base: Buffer,
    alt: Buffer,
    mask_ptr: Buffer,
    masks: Buffer,
    out: Buffer,
) -> None: ...
def dag_valued_step_ends(
    layout: DagLayout,
    floor: Buffer,
    base: Buffer,
    mask_ptr: Buffer,
    masks: Buffer,
    values: Buffer,
    out: Buffer,
) -> None: ...
def dag_keyed_step_ends(
    layout: DagLayout,
    floor: Buffer,
    base: Buffer,
    alts: list[Buffer],
    keys: list[Buffer],
    alt_of: Buffer,
    key_of: Buffer,
    value_of: Buffer,
    out: Buffer,
) -> None: ...
def unit_deviations(
    values: Buffer, middle: Buffer, paired: Buffer, unit: Buffer, total: Buffer, squares: Buffer
) -> None: ...
def peer_medians_excluding(
    values: Buffer,
    sel: Buffer,
    order: Buffer,
    starts: Buffer,
    counts: Buffer,
    cells: Buffer,
    shape: tuple[int, int],
    how: int,
    groups: Buffer,
    keys: Buffer,
    out: Buffer,
) -> bool: ...
def typical_without(
    values: Buffer,
    keys: Buffer,
    kept: tuple[Buffer, Buffer, Buffer, Buffer],
    every: tuple[Buffer, Buffer, Buffer, Buffer],
    out: Buffer,
) -> bool: ...
def window_z(steps: list[tuple[Buffer, Buffer]], z: Buffer) -> int | None: ...

class PeerLayout:
    def units(self) -> tuple[int, int]: ...
    def at_ideal(self, values: Buffer, out: Buffer, sums_of: tuple[Buffer, Buffer, Buffer, Buffer]) -> bool: ...
    def without(self, values: Buffer, slow_ranks: Buffer, slow_links: Buffer, out: Buffer) -> bool: ...

def peer_layout(
    n: int,
    work: tuple[tuple[Buffer, Buffer, Buffer, Buffer], Buffer, Buffer],
    transfers: tuple[tuple[Buffer, Buffer, Buffer, Buffer], Buffer, Buffer],
    cross: tuple[Buffer, Buffer, tuple[Buffer, Buffer, Buffer, Buffer]],
) -> PeerLayout: ...

Cells = tuple[Buffer, Buffer, Buffer, tuple[int, int], tuple[Buffer, Buffer, Buffer], int]

class RoleLayout:
    def peers(self, values: Buffer, peer_med: Buffer, by_stage: Buffer, by_link: Buffer) -> bool: ...
    def ranked(self, values: Buffer, peer_med: Buffer) -> tuple[list[int], list[int]] | None: ...

def role_layout(
    n: int,
    ranks: int,
    spans: tuple[Buffer, Buffer, Buffer],
    position: tuple[Buffer, Buffer, int],
    stages: Cells,
    links: Cells,
) -> RoleLayout: ...

GROUPED_MEDIANS_READ_INT32: bool

def grouped_medians(
    values: Buffer, order: Buffer, through: Buffer, starts: Buffer, counts: Buffer, how: int, out: Buffer
) -> bool: ...
def dag_critical_path(indptr: Buffer, indices: Buffer, floor: Buffer, ends: Buffer) -> list[int]: ...
def rank_last_ends(rank: Buffer, span_ids: Buffer, ends: Buffer, out: Buffer) -> None: ...
def medians_excluding_each_row(values: Buffer, rows: int, out: Buffer) -> None: ...
def canonical_order(
    times: Buffer, columns: list[object], kinds: str, order: Buffer
) -> bool: ...  # kind s: a contiguous object array
def canonical_gather(
    parts: list[dict[str, object]], names: list[str], kinds: str, outs: list[object]
) -> bool: ...  # parts' columns joined, ordered and gathered into outs (fresh arrays)
def epoch_runs(
    times: object, epoch_s: float
) -> tuple[Buffer | None, list[tuple[int, int, int]]] | None: ...  # a batch's rows per epoch (int64 order or None)
def strings_at(strings: list[str], codes: object, out: object) -> None: ...  # out[i] = strings[codes[i]]
def codes_of(
    values: list[object] | Buffer, codes: dict[str, int], missing: int, out: Buffer
) -> bool | None: ...  # values: a list or a contiguous object array (None: an array not all str)

class DagLayout: ...

def dag_layout(order: Buffer, indptr: Buffer, indices: Buffer) -> DagLayout: ...
def change_alarms(
    x: Buffer,
    y: Buffer,
    n: Buffer,
    sigma: Buffer,
    rows: Buffer,
    min_side: int,
    scoring: tuple[float, float, float, float, float, float],
    out: Buffer,
) -> int: ...
def c_math(name: str, x: Buffer, y: Buffer, out: Buffer) -> None: ...
def change_round(
    x: Buffer,
    y: Buffer,
    n: Buffer,
    seen: Buffer,
    sigma: Buffer,
    phase: Buffer,
    rows: Buffer,
    values: Buffer,
    limits: tuple[int, int, int, int],
    scoring: tuple[float, float, float, float, float, float],
    due: Buffer,
    out: Buffer,
) -> tuple[int, int, int]: ...
def step_draft(
    head: Buffer,
    packed: Buffer,
    start: Buffer,
    end: Buffer,
    order: Buffer,
    tol: float,
    span_len: float,
    floor: Buffer,
    intrinsic: Buffer,
    src: Buffer,
    dst: Buffer,
) -> int: ...
def step_plan_check(head: Buffer, packed: Buffer) -> None: ...
def same_in_order(columns: list[Buffer], order: Buffer, kept: list[Buffer]) -> bool | None: ...
def step_tolerance(
    start: Buffer, end: Buffer, order: Buffer, pairs: Buffer, limits: tuple[float, float, float]
) -> float | None: ...
def sorted_rows(rows: Buffer, keys: list[Buffer], time: Buffer, out: Buffer) -> None: ...
def step_rows(
    start: Buffer,
    end: Buffer,
    ints: list[Buffer],
    inferred: Buffer,
    declared: Buffer | None,
    flag: Buffer | None,
    out: tuple[Buffer, Buffer, Buffer, Buffer, Buffer],
) -> int | None: ...
