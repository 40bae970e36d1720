//! The comparison of a step's identity columns with a kept layout's (streams/engine/layouts.py, `find`):
//! each column read in node order and compared value by value, without gathering it first; and the sort
//! that puts a step's rows in node order.

use std::cmp::Ordering;

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::dag::items;
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
            sorted.sort_by(|&a, &b| order(a as usize, b as usize, &keys));
            for (o, &r) in out.iter_mut().zip(&sorted) {
                *o = i64::from(r);
            }
        }
    }
    Ok(())
}
