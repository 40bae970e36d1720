//! The what-if's healed step ends (streams/engine/whatif.py, `_healed_step_ends`): each candidate heals
//! the nodes whose key column (rank, replica, stage, link or op) holds its value, or every node, to one
//! of a few rows of durations. The candidates' nodes (in node order, as the definition's masks give them)
//! and values are written here from the columns, not one numpy mask per candidate, and evaluated as
//! `dag_valued_step_ends` evaluates them: the same step ends, bit for bit.

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::dag::{items, valued_step_ends, DagLayout};

/// A key column as the engine keeps it: int32 (compact) or int64.
enum Key {
    Narrow(PyBuffer<i32>),
    Wide(PyBuffer<i64>),
}

impl Key {
    fn of(column: &Bound<'_, PyAny>) -> PyResult<Self> {
        match PyBuffer::<i32>::get(column) {
            Ok(b) => Ok(Key::Narrow(b)),
            Err(_) => Ok(Key::Wide(PyBuffer::<i64>::get(column)?)),
        }
    }

    fn len(&self) -> usize {
        match self {
            Key::Narrow(b) => b.item_count(),
            Key::Wide(b) => b.item_count(),
        }
    }

    /// `visit(candidate, node)` for each node, in order, whose key is one of `wanted`'s values (each
    /// `(value, candidate)`, sorted), once per candidate of that value.
    fn each(&self, wanted: &[(i64, usize)], visit: impl FnMut(usize, usize)) -> PyResult<()> {
        match self {
            Key::Narrow(b) => matching(items(b, "keys")?, wanted, visit),
            Key::Wide(b) => matching(items(b, "keys")?, wanted, visit),
        }
        Ok(())
    }
}

/// `Key::each` over a column: a table of the wanted values when their range is no wider than the column
/// (bounded memory), else a binary search per node.
fn matching<I: Copy + Into<i64>>(
    column: &[I],
    wanted: &[(i64, usize)],
    mut visit: impl FnMut(usize, usize),
) {
    let (Some(&(lo, _)), Some(&(hi, _))) = (wanted.first(), wanted.last()) else {
        return;
    };
    let width = hi.abs_diff(lo);
    if width < column.len() as u64 {
        let mut first = vec![0usize; width as usize + 2]; // per value from lo: where its candidates begin
        for &(v, _) in wanted {
            first[(v - lo) as usize + 1] += 1;
        }
        for k in 1..first.len() {
            first[k] += first[k - 1];
        }
        for (i, &k) in column.iter().enumerate() {
            let k: i64 = k.into();
            if (lo..=hi).contains(&k) {
                let at = (k - lo) as usize;
                wanted[first[at]..first[at + 1]]
                    .iter()
                    .for_each(|&(_, c)| visit(c, i));
            }
        }
        return;
    }
    for (i, &k) in column.iter().enumerate() {
        let k: i64 = k.into();
        let from = wanted.partition_point(|w| w.0 < k);
        wanted[from..]
            .iter()
            .take_while(|w| w.0 == k)
            .for_each(|&(_, c)| visit(c, i));
    }
}

/// Per candidate `c`: the step end with every node at `base` except those whose `keys[key_of[c]]` is
/// `value_of[c]` (every node when `key_of[c]` is -1), each at its `alts[alt_of[c]]` value (the definition:
/// `dag_valued_step_ends` of the masks `keys[key_of[c]] == value_of[c]`, values `alts[alt_of[c]][mask]`).
/// Keys: int32 or int64 columns, one value per node.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn dag_keyed_step_ends(
    py: Python<'_>,
    layout: &Bound<'_, DagLayout>,
    floor: PyBuffer<f64>,
    base: PyBuffer<f64>,
    alts: Vec<PyBuffer<f64>>,
    keys: Vec<Bound<'_, PyAny>>,
    alt_of: PyBuffer<i64>,
    key_of: PyBuffer<i64>,
    value_of: PyBuffer<i64>,
    out: PyBuffer<f64>,
) -> PyResult<()> {
    let base = items(&base, "base")?;
    let n = base.len();
    let alts = alts
        .iter()
        .map(|a| items(a, "alts"))
        .collect::<PyResult<Vec<_>>>()?;
    let keys = keys.iter().map(Key::of).collect::<PyResult<Vec<_>>>()?;
    let (alt_of, key_of) = (items(&alt_of, "alt_of")?, items(&key_of, "key_of")?);
    let value_of = items(&value_of, "value_of")?;
    let rows = alt_of.len();
    if alts.iter().any(|a| a.len() != n) || keys.iter().any(|k| k.len() != n) {
        return Err(PyValueError::new_err("alts, keys: one value per node"));
    }
    if key_of.len() != rows
        || value_of.len() != rows
        || alt_of
            .iter()
            .any(|&a| !usize::try_from(a).is_ok_and(|a| a < alts.len()))
        || key_of.iter().any(|&k| k < -1 || k >= keys.len() as i64)
    {
        return Err(PyValueError::new_err(
            "alt_of, key_of, value_of: one per candidate, in range",
        ));
    }
    // the candidates' nodes counted, then written at their place in the flat rows (no list per candidate)
    let mut wanted: Vec<Vec<(i64, usize)>> = vec![Vec::new(); keys.len()];
    let mut count = vec![0usize; rows];
    for c in 0..rows {
        match usize::try_from(key_of[c]) {
            Ok(k) => wanted[k].push((value_of[c], c)),
            Err(_) => count[c] = n,
        }
    }
    wanted.iter_mut().for_each(|w| w.sort_unstable());
    for (key, wanted) in keys.iter().zip(&wanted) {
        key.each(wanted, |c, _| count[c] += 1)?;
    }
    let mut ptr = vec![0i64; rows + 1];
    for c in 0..rows {
        ptr[c + 1] = ptr[c] + count[c] as i64;
    }
    let total = ptr[rows] as usize;
    let (mut masks, mut values) = (vec![0i64; total], vec![0.0; total]);
    let mut next: Vec<usize> = ptr[..rows].iter().map(|&p| p as usize).collect();
    let mut put = |c: usize, i: usize| {
        masks[next[c]] = i as i64;
        values[next[c]] = alts[alt_of[c] as usize][i];
        next[c] += 1;
    };
    for c in (0..rows).filter(|&c| key_of[c] < 0) {
        (0..n).for_each(|i| put(c, i));
    }
    for (key, wanted) in keys.iter().zip(&wanted) {
        key.each(wanted, &mut put)?;
    }
    valued_step_ends(py, layout, &floor, base, &ptr, &masks, &values, &out)
}

/// `systematic.Unsystematic.deviations`' sums, bit for bit: per unit (`total` and `squares`, one value
/// each, zeroed), over its positions in order, the position's weight added as numpy's `bincount` adds it.
/// A position is judged when `paired` (a byte each: numpy's bools) and both its value and its group's
/// `middle` are finite; its sign is numpy's of `value - middle` (+0.0 for either zero), its size
/// `|middle|` where that sign is not zero (else 0.0); it adds `size * sign` to `total` and `size * size` to `squares` (+0.0 when not judged).
/// Units: int16, int32 or int64, each below the sums' length.
#[pyfunction]
pub fn unit_deviations(
    py: Python<'_>,
    values: PyBuffer<f64>,
    middle: PyBuffer<f64>,
    paired: PyBuffer<u8>,
    unit: &Bound<'_, PyAny>,
    total: PyBuffer<f64>,
    squares: PyBuffer<f64>,
) -> PyResult<()> {
    let (v, m, p) = (
        items(&values, "values")?,
        items(&middle, "middle")?,
        items(&paired, "paired")?,
    );
    if let Ok(u) = PyBuffer::<i16>::get(unit) {
        return deviations(py, v, m, p, items(&u, "unit")?, &total, &squares);
    }
    if let Ok(u) = PyBuffer::<i32>::get(unit) {
        return deviations(py, v, m, p, items(&u, "unit")?, &total, &squares);
    }
    let u = PyBuffer::<i64>::get(unit)?;
    deviations(py, v, m, p, items(&u, "unit")?, &total, &squares)
}

fn deviations<I: Copy + Into<i64> + Sync>(
    py: Python<'_>,
    v: &[f64],
    m: &[f64],
    p: &[u8],
    unit: &[I],
    total: &PyBuffer<f64>,
    squares: &PyBuffer<f64>,
) -> PyResult<()> {
    let units = total.item_count();
    let writable =
        |b: &PyBuffer<f64>| !b.readonly() && b.is_c_contiguous() && b.item_count() == units;
    if m.len() != v.len() || p.len() != v.len() || unit.len() != v.len() {
        return Err(PyValueError::new_err(
            "values, middle, paired, unit: one per position",
        ));
    }
    if !writable(total) || !writable(squares) {
        return Err(PyValueError::new_err(
            "total, squares: writable, one value per unit",
        ));
    }
    if unit
        .iter()
        .any(|&u| !usize::try_from(u.into()).is_ok_and(|u| u < units))
    {
        return Err(PyValueError::new_err("unit: out of range"));
    }
    let (mut t, mut q) = (vec![0.0; units], vec![0.0; units]);
    py.detach(|| {
        for i in 0..v.len() {
            let judged = p[i] != 0 && v[i].is_finite() && m[i].is_finite();
            let d = v[i] - m[i];
            let sign = if !judged || d == 0.0 {
                0.0
            } else if d > 0.0 {
                1.0
            } else {
                -1.0
            };
            let size = if sign != 0.0 { m[i].abs() } else { 0.0 };
            let u = unit[i].into() as usize;
            t[u] += size * sign;
            q[u] += size * size;
        }
    });
    for (buf, sums) in [(total, &t), (squares, &q)] {
        // SAFETY: a writable C-contiguous buffer of `units` f64 (checked above) held by `buf` for this call.
        let dest = unsafe { std::slice::from_raw_parts_mut(buf.buf_ptr() as *mut f64, units) };
        dest.copy_from_slice(sums);
    }
    Ok(())
}
