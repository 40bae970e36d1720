"""The longest-path evaluation of a step's graph, and its critical path, in the native core
(``native/src/dag.rs``), when it is built: one pass over the nodes in topological order per row of
durations, instead of numpy calls level by level (a step of 1,024 ranks has hundreds of levels), and a walk
back from the last end without a numpy call per node. Same ends and path as :class:`StepGraph`'s
definitions, bit for bit (``tests/unit/test_dag.py``); without the native core (or ``DRIFTLOG_NATIVE=0``),
those definitions run."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

import numpy as np

from audit import native
from streams.engine.codes import compact

if TYPE_CHECKING:
    from streams.engine.stepgraph import Floats, Ints, Schedule

available = hasattr(native.core, "dag_layout")  # (an extension built before it: the definitions)
walks = hasattr(native.core, "dag_critical_path")
KEEP = 64  # schedules whose topological order is kept (a job has a few structures: MAX_STRUCTURES)
_orders: dict[int, tuple[Schedule, Ints]] = {}  # id(schedule) -> (schedule, its order): a cache


def topological(schedule: Schedule) -> Ints:
    """The schedule's nodes, sources first, then level by level."""
    kept = _orders.get(id(schedule))
    if kept is not None and kept[0] is schedule:
        return kept[1]
    order = compact(np.concatenate([schedule.sources, *schedule.levels]))  # (kept: int32; a layout reads int64)
    while len(_orders) >= KEEP:
        del _orders[next(iter(_orders))]
    _orders[id(schedule)] = (schedule, order)
    return order


_layouts: dict[tuple[int, int, int], tuple[Any, ...]] = {}  # a graph's arrays' ids -> (weakrefs, layout)


def layout(schedule: Schedule, indptr: Ints, indices: Ints) -> Any:
    """The native layout of the graph (``dag_layout``: checked once), kept while its arrays live (a step's
    what-if and decomposition make several calls over one graph)."""
    key = (id(schedule), id(indptr), id(indices))
    kept = _layouts.get(key)
    if kept is not None and all(ref() is a for ref, a in zip(kept[:3], (schedule, indptr, indices), strict=True)):
        return kept[3]
    assert native.core is not None
    i64 = (np.ascontiguousarray(a, np.int64) for a in (topological(schedule), indptr, indices))
    made = native.core.dag_layout(*i64)
    _layouts[key] = (weakref.ref(schedule), weakref.ref(indptr), weakref.ref(indices), made)
    weakref.finalize(indptr, _layouts.pop, key, None)  # (the layout goes with the graph)
    return made


def ends(schedule: Schedule, indptr: Ints, indices: Ints, floor: Floats, durations: Floats) -> Floats:
    """End times of every node for each row of ``durations`` (rows x nodes, each row contiguous)."""
    assert native.core is not None
    d = np.ascontiguousarray(durations, np.float64)
    out = np.empty(d.shape)
    native.core.dag_ends(layout(schedule, indptr, indices), np.ascontiguousarray(floor, np.float64), d, out)
    return out


masked_available = available


def masked_step_ends(
    schedule: Schedule, indptr: Ints, indices: Ints, floor: Floats, base: Floats, alt: Floats, masks: list[Ints]
) -> Floats:
    """Per mask: the step end (the latest node end) with the mask's nodes at ``alt`` and every other node at
    ``base``, without a row of durations per mask (``native/src/dag.rs``, ``dag_masked_step_ends``)."""
    assert native.core is not None
    out = np.empty(len(masks))
    f64 = (np.ascontiguousarray(a, np.float64) for a in (floor, base, alt))
    native.core.dag_masked_step_ends(layout(schedule, indptr, indices), *f64, *_flat(masks), out)
    return out


def _flat(masks: list[Ints]) -> tuple[Ints, Ints]:
    """Masks (node indices) as one array and where each begins (CSR)."""
    ptr = np.zeros(len(masks) + 1, np.int64)
    np.cumsum([len(m) for m in masks], out=ptr[1:])
    return ptr, np.concatenate(masks).astype(np.int64) if masks else np.zeros(0, np.int64)


valued_available = available


def valued_step_ends(
    schedule: Schedule, indptr: Ints, indices: Ints, floor: Floats, base: Floats, masks: list[Ints],
    values: list[Floats],
) -> Floats:  # fmt: skip
    """Per mask: the step end with the mask's nodes at its ``values`` (one per node of the mask) and every
    other node at ``base``: rows healing to different durations in one call (``dag_valued_step_ends``)."""
    flat_values = np.concatenate(values).astype(np.float64) if values else np.zeros(0)
    return valued_step_ends_flat(schedule, indptr, indices, floor, base, *_flat(masks), flat_values)


def valued_step_ends_flat(
    schedule: Schedule, indptr: Ints, indices: Ints, floor: Floats, base: Floats, ptr: Ints, nodes: Ints,
    values: Floats,
) -> Floats:  # fmt: skip
    """:func:`valued_step_ends` of masks and values given flat: mask ``k``'s nodes ``nodes[ptr[k]:ptr[k + 1]]``
    at ``values`` of the same positions (CSR, int64 and float64: no copy of a large job's many rows)."""
    assert native.core is not None
    out = np.empty(len(ptr) - 1)
    f64 = (np.ascontiguousarray(a, np.float64) for a in (floor, base))
    native.core.dag_valued_step_ends(layout(schedule, indptr, indices), *f64, ptr, nodes, values, out)
    return out


keyed_available = hasattr(native.core, "dag_keyed_step_ends")


def keyed_step_ends(
    schedule: Schedule, indptr: Ints, indices: Ints, floor: Floats, base: Floats, alts: list[Floats],
    keys: list[Ints], alt_of: list[int], key_of: list[int], value_of: list[int],
) -> Floats:  # fmt: skip
    """Per row ``k``: the step end with the nodes whose ``keys[key_of[k]]`` is ``value_of[k]`` (every node for
    ``key_of[k]`` -1) at ``alts[alt_of[k]]`` and every other node at ``base``: :func:`valued_step_ends` of
    those masks and values, with the masks found in the native core (``dag_keyed_step_ends``)."""
    assert native.core is not None
    out = np.empty(len(alt_of))
    f64 = [np.ascontiguousarray(a, np.float64) for a in (floor, base, *alts)]
    columns = [k if k.dtype in (np.int32, np.int64) and k.flags.c_contiguous else k.astype(np.int64) for k in keys]
    rows = (np.array(a, np.int64) for a in (alt_of, key_of, value_of))
    native.core.dag_keyed_step_ends(layout(schedule, indptr, indices), *f64[:2], f64[2:], columns, *rows, out)
    return out


def critical_path(indptr: Ints, indices: Ints, floor: Floats, ends: Floats) -> Ints:
    """:meth:`StepGraph.critical_path` (the same nodes, first to last) for one row of end times."""
    assert native.core is not None
    i64 = (np.ascontiguousarray(a, np.int64) for a in (indptr, indices))
    f64 = (np.ascontiguousarray(a, np.float64) for a in (floor, ends))
    return np.array(native.core.dag_critical_path(*i64, *f64)[::-1], np.int64)
