//! The comparison of a step's identity columns with a kept layout's (streams/engine/layouts.py, `find`):
//! each column read in node order and compared value by value, without gathering it first; and the sort
//! that puts a step's rows in node order, with what decides that order (`step_rows`: each row's direction,
//! blocking, role and collective number, streams/engine/noderows.py).

use std::cmp::Ordering;

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::dag::{items, overlap, span};
use crate::draft::numpy_order;

/// One kept identity column: int32 (a layout's, when its values fit) or int64.
enum Kept {
    I32(PyBuffer<i32>),
    I64(PyBuffer<i64>),
}

/// Whether every column of a step (int64, per row) in node order (`order`: the rows) equals the layout's
/// kept column beside it (streams/engine/layouts.py, `find`), reading each column until one value differs;
/// None when a column is not a contiguous int64 (or int32, kept) array of the right length (the caller then
/// runs the definition).
#[pyfunction]
pub fn same_in_order(
    columns: Vec<Bound<'_, PyAny>>,
    order: Bound<'_, PyAny>,
    kept: Vec<Bound<'_, PyAny>>,
) -> PyResult<Option<bool>> {
    let Ok(order) = PyBuffer::<i64>::get(&order) else {
        return Ok(None);
    };
    if !order.is_c_contiguous() || columns.len() != kept.len() {
        return Ok(None);
    }
    let order = items(&order, "order")?;
    let mut held = Vec::with_capacity(columns.len());
    for (column, mine) in columns.iter().zip(&kept) {
        let Ok(column) = PyBuffer::<i64>::get(column) else {
            return Ok(None);
        };
        let mine = match PyBuffer::<i32>::get(mine) {
            Ok(b) => Kept::I32(b),
            Err(_) => match PyBuffer::<i64>::get(mine) {
                Ok(b) => Kept::I64(b),
                Err(_) => return Ok(None),
            },
        };
        let fits = match &mine {
            Kept::I32(b) => b.is_c_contiguous() && b.item_count() == order.len(),
            Kept::I64(b) => b.is_c_contiguous() && b.item_count() == order.len(),
        };
        if !column.is_c_contiguous() || !fits {
            return Ok(None);
        }
        held.push((column, mine));
    }
    for (column, mine) in &held {
        let column = items(column, "column")?;
        let row = |i: i64| usize::try_from(i).ok().and_then(|i| column.get(i).copied());
        let same = match mine {
            Kept::I32(b) => order
                .iter()
                .zip(items(b, "kept")?)
                .all(|(&i, &v)| row(i) == Some(i64::from(v))),
            Kept::I64(b) => order
                .iter()
                .zip(items(b, "kept")?)
                .all(|(&i, &v)| row(i) == Some(v)),
        };
        if !same {
            return Ok(Some(false));
        }
    }
    Ok(Some(true))
}

/// Fill `out` with `rows` (ascending) sorted as `np.lexsort` sorts them on the integer columns `keys` (per
/// row, the first most significant) and then on `time` (per row; numpy's order of floats: NaN last, -0.0
/// equal to 0.0), rows that tie in input order (stepgraph.py, `_lexsorted`).
#[pyfunction]
pub fn sorted_rows(
    rows: PyBuffer<i64>,
    keys: Vec<PyBuffer<i64>>,
    time: PyBuffer<f64>,
    out: PyBuffer<i64>,
) -> PyResult<()> {
    let time = items(&time, "time")?;
    let keys = keys
        .iter()
        .map(|k| items(k, "key"))
        .collect::<PyResult<Vec<&[i64]>>>()?;
    let n = time.len();
    if out.readonly() || !out.is_c_contiguous() || out.item_count() != rows.item_count() {
        return Err(PyValueError::new_err(
            "sorted_rows: out must be a writable array of one value per row",
        ));
    }
    // SAFETY: a writable C-contiguous buffer of `item_count` i64 held by `out` for this call; the caller passes
    // a fresh array, none of the inputs.
    let out =
        unsafe { std::slice::from_raw_parts_mut(out.buf_ptr() as *mut i64, out.item_count()) };
    // (rows as u32: half the memory of a step's rows at 16k ranks; a step of 2^32 rows is refused)
    let mut sorted: Vec<u32> = Vec::with_capacity(rows.item_count());
    for &r in items(&rows, "rows")? {
        match u32::try_from(r) {
            Ok(r) if (r as usize) < n && keys.iter().all(|k| (r as usize) < k.len()) => {
                sorted.push(r)
            }
            _ => return Err(PyValueError::new_err("sorted_rows: a row out of range")),
        }
    }
    sort_into(sorted, &keys, time, out);
    Ok(())
}

/// `sorted` (rows, ascending, each within every key and `time`) into `out` as `sorted_rows` sorts them.
fn sort_into(mut sorted: Vec<u32>, keys: &[&[i64]], time: &[f64], out: &mut [i64]) {
    let order = |a: usize, b: usize, keys: &[&[i64]]| {
        for k in keys {
            match k[a].cmp(&k[b]) {
                Ordering::Equal => {}
                other => return other,
            }
        }
        numpy_order(time[a], time[b])
    };
    // Rows by the first key into buckets (stable, straight into `out`), each then sorted on the rest: a
    // rank's rows arrive in about the order of their times, so each bucket is sorted almost as fast as it is
    // read.
    let first = keys.first().map(|k| {
        sorted
            .iter()
            .map(|&r| k[r as usize])
            .fold((i64::MAX, i64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)))
    });
    match first {
        Some((lo, hi))
            if !sorted.is_empty() && ((hi - lo) as u64) <= 4 * sorted.len() as u64 + 1024 =>
        {
            let k = keys[0];
            let mut starts = vec![0usize; (hi - lo) as usize + 2];
            for &r in &sorted {
                starts[(k[r as usize] - lo) as usize + 1] += 1;
            }
            for b in 1..starts.len() {
                starts[b] += starts[b - 1];
            }
            let mut next = starts.clone();
            for &r in &sorted {
                let b = (k[r as usize] - lo) as usize;
                out[next[b]] = i64::from(r);
                next[b] += 1;
            }
            drop((sorted, next));
            for b in 0..starts.len() - 1 {
                out[starts[b]..starts[b + 1]]
                    .sort_by(|&a, &b| order(a as usize, b as usize, &keys[1..]));
            }
        }
        _ => {
            sorted.sort_by(|&a, &b| order(a as usize, b as usize, keys));
            for (o, &r) in out.iter_mut().zip(&sorted) {
                *o = i64::from(r);
            }
        }
    }
}

const NONE: i64 = -1; // directions as streams/engine/transfers.py numbers them
const FROM: i64 = 1;
const BOTH: i64 = 2;
const INFER: i64 = -2; // a declared direction of '': inferred from op

/// `buf`'s items when it is C-contiguous with `n` of them, else None (the caller runs the definition).
fn exactly<T: pyo3::buffer::Element>(buf: &PyBuffer<T>, n: usize) -> PyResult<Option<&[T]>> {
    if !buf.is_c_contiguous() || buf.item_count() != n {
        return Ok(None);
    }
    items(buf, "column").map(Some)
}

/// A fresh output of `n` items, written in place.
fn written<T: pyo3::buffer::Element>(buf: &mut PyBuffer<T>, n: usize) -> PyResult<&mut [T]> {
    if buf.readonly() || !buf.is_c_contiguous() || buf.item_count() != n {
        return Err(PyValueError::new_err(
            "step_rows: every output must be a writable array of one value per row",
        ));
    }
    // SAFETY: a writable C-contiguous buffer of `n` items of T held by `buf` for this call, sharing no byte
    // with another argument (`overlap`, checked first).
    Ok(unsafe { std::slice::from_raw_parts_mut(buf.buf_ptr() as *mut T, n) })
}

/// `step_rows`' outputs: direction, blocks, role, per-group number and order.
type Outputs = (
    PyBuffer<i8>,
    PyBuffer<u8>,
    PyBuffer<i64>,
    PyBuffer<i64>,
    PyBuffer<i64>,
);

/// A step's rows in node order and what decides it (streams/engine/noderows.py, `definition`), in one pass:
/// per row its transfer direction, whether it blocks, its role and its collective sequence number counted
/// from its group's first; `order` the program rows by rank and midpoint, then the asynchronous transfers by
/// rank, direction, microbatch, peer and start. `ints`: rank, microbatch, peer, seq, op, group and op class
/// codes per row; `inferred`: the direction per op code; `declared`: per row the declared direction or
/// INFER; `flag`: the declared `blocking` (bytes 0 or 1). The number of program rows, or None when a column
/// is not as read here (strided, of another length, a code out of range): the caller runs the definition.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn step_rows(
    start: PyBuffer<f64>,
    end: PyBuffer<f64>,
    ints: Vec<PyBuffer<i64>>,
    inferred: PyBuffer<i64>,
    declared: Option<PyBuffer<i64>>,
    flag: Option<PyBuffer<u8>>,
    mut out: Outputs,
) -> PyResult<Option<usize>> {
    let n = start.item_count();
    let mut spans = vec![
        span(&out.0),
        span(&out.1),
        span(&out.2),
        span(&out.3),
        span(&out.4),
    ];
    spans.extend([span(&start), span(&end), span(&inferred)]);
    spans.extend(ints.iter().map(span));
    spans.extend(declared.iter().map(span).chain(flag.iter().map(span)));
    if overlap(&spans, 5) {
        return Err(PyValueError::new_err(
            "step_rows: an output shares memory with another argument",
        ));
    }
    let Some(start) = exactly(&start, n)? else {
        return Ok(None);
    };
    let Some(end) = exactly(&end, n)? else {
        return Ok(None);
    };
    if ints.len() != 7 {
        return Err(PyValueError::new_err("step_rows: seven integer columns"));
    }
    let mut columns: Vec<&[i64]> = Vec::with_capacity(7);
    for c in &ints {
        match exactly(c, n)? {
            Some(c) => columns.push(c),
            None => return Ok(None),
        }
    }
    let (rank, mb, peer, seq, op, grp, class) = (
        columns[0], columns[1], columns[2], columns[3], columns[4], columns[5], columns[6],
    );
    let inferred = items(&inferred, "inferred")?;
    let declared = match &declared {
        Some(d) => match exactly(d, n)? {
            Some(d) => Some(d),
            None => return Ok(None),
        },
        None => None,
    };
    let flag = match &flag {
        Some(f) => match exactly(f, n)? {
            Some(f) => Some(f),
            None => return Ok(None),
        },
        None => None,
    };
    // (numpy reads inferred[op] for every row and indexes by group: a code it would wrap or refuse is its)
    let known = |c: i64, len: usize| usize::try_from(c).is_ok_and(|c| c < len);
    // (and a group code far beyond the rows' count, or a step of 2^32 rows, is the definition's too)
    let groups = grp.iter().copied().max().unwrap_or(0);
    if !op.iter().all(|&o| known(o, inferred.len()))
        || grp.iter().any(|&g| g < 0)
        || groups > 4 * n as i64 + 1024
        || n >= 1 << 32
    {
        return Ok(None);
    }
    let (direction, blocks, role, per_group, order) = (
        written(&mut out.0, n)?,
        written(&mut out.1, n)?,
        written(&mut out.2, n)?,
        written(&mut out.3, n)?,
        written(&mut out.4, n)?,
    );
    let mut program = Vec::with_capacity(n);
    let mut transfers = Vec::new();
    for i in 0..n {
        let (comm, sync, compute) = (class[i] == 1, class[i] == 2, class[i] == 3);
        let member = grp[i] > 0 && seq[i] >= 0 && (comm || sync);
        let mut d = if comm { inferred[op[i] as usize] } else { NONE };
        if let Some(declared) = declared {
            if declared[i] != INFER {
                d = declared[i];
            }
        }
        if member || peer[i] < 0 {
            d = NONE;
        }
        let d = d as i8; // (as the definition's astype)
        let blocking = d >= 0 && (flag.is_some_and(|f| f[i] != 0) || i64::from(d) == BOTH);
        direction[i] = d;
        blocks[i] = u8::from(blocking);
        role[i] = i64::from(comm)
            + 2 * i64::from(sync)
            + 4 * i64::from(compute)
            + 8 * i64::from(blocking)
            + i64::from(16i8.wrapping_mul(d.wrapping_add(1)));
        if d >= 0 && !blocking {
            transfers.push(i as u32);
        } else {
            program.push(i as u32);
        }
    }
    counted_from_first(seq, grp, per_group);
    let n_chain = program.len();
    let midpoint: Vec<f64> = start.iter().zip(end).map(|(s, e)| s + e).collect();
    let (chain, rest) = order.split_at_mut(n_chain);
    sort_into(program, &[rank], &midpoint, chain);
    let from: Vec<i64> = direction
        .iter()
        .map(|&d| i64::from(i64::from(d) == FROM))
        .collect();
    sort_into(transfers, &[rank, &from, mb, peer], start, rest);
    Ok(Some(n_chain))
}

/// Collective sequence numbers counted from each group's first (noderows.py, `per_group`); negative ones
/// as they are.
fn counted_from_first(seq: &[i64], grp: &[i64], out: &mut [i64]) {
    out.copy_from_slice(seq);
    if !seq.iter().any(|&s| s >= 0) {
        return;
    }
    let top = seq.iter().copied().max().unwrap_or(0);
    let groups = grp.iter().copied().max().unwrap_or(0) as usize + 1;
    let mut first = vec![top; groups];
    for (&s, &g) in seq.iter().zip(grp) {
        if s >= 0 && s < first[g as usize] {
            first[g as usize] = s;
        }
    }
    for ((o, &s), &g) in out.iter_mut().zip(seq).zip(grp) {
        if s >= 0 {
            *o = s.wrapping_sub(first[g as usize]);
        }
    }
}
