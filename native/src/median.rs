//! Medians per group over a grouping prepared once (streams/engine/medians.py `grouped`; used by
//! `whatif.Grouping.medians` and `ideal.LowMedian.typical`): one selection per group instead of a sort of
//! every value, with the numpy definitions' values bit for bit.
//!
//! The definitions order a group's values as a stable sort does, NaN last. Equal values are then the same
//! bits, except for 0.0 and -0.0 and for NaNs with different payloads, whose places a selection does not
//! keep: an input holding either is refused (`false`), and the caller computes the definition instead.

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::dag::items;

/// The lower median (the middle value, or the lower of the two middle values), NaN last.
pub(crate) const LOWER: u8 = 0;
/// The mean of the two middle values (`(a + b) / 2`, the middle value twice for an odd count), NaN last.
pub(crate) const MIDDLE: u8 = 1;
/// `np.median`: NaN when the group holds a NaN; else the middle value, or the mean of the two middle ones.
const NUMPY: u8 = 2;

/// Whether a selection gives the stable sort's values: no -0.0, and every NaN the same bits.
fn selectable(values: &[f64]) -> bool {
    let mut nan: Option<u64> = None;
    for v in values {
        if v.is_nan() {
            if *nan.get_or_insert(v.to_bits()) != v.to_bits() {
                return false;
            }
        } else if *v == 0.0 && v.is_sign_negative() {
            return false;
        }
    }
    true
}

/// The `k`-th smallest of `scratch[..finite]` (the values that are not NaN), rearranging them.
fn nth(scratch: &mut [f64], k: usize) -> f64 {
    let (_, v, _) = scratch.select_nth_unstable_by(k, |a, b| a.partial_cmp(b).expect("no NaN"));
    *v
}

/// One group's statistic; `scratch` holds its values, NaN moved after the `finite` others.
fn statistic(scratch: &mut [f64], finite: usize, nan: f64, how: u8) -> f64 {
    let n = scratch.len();
    let (lo, hi) = ((n - 1) / 2, n / 2);
    let at = |scratch: &mut [f64], k: usize| {
        if k < finite {
            nth(&mut scratch[..finite], k)
        } else {
            nan
        }
    };
    match how {
        LOWER => at(scratch, lo),
        NUMPY if finite < n => nan,
        NUMPY if lo == hi => at(scratch, lo),
        _ => {
            debug_assert!(how == MIDDLE || how == NUMPY);
            let b = at(scratch, hi);
            // after selecting `hi`, the values before it are the `hi` smallest: `lo` is their largest
            let a = if lo == hi {
                b
            } else if lo < finite {
                scratch[..hi.min(finite)]
                    .iter()
                    .copied()
                    .fold(f64::NEG_INFINITY, f64::max)
            } else {
                nan
            };
            (a + b) / 2.0
        }
    }
}

/// Fill `out` (one per group) with a statistic of each group's values (`how`: 0 lower median, 1 mean of
/// the middle two, 2 `np.median`). Group `g` is the values at `order[starts[g]..starts[g] + counts[g]]`,
/// each index first mapped through `through` when that is not empty. False (and `out` untouched) when the
/// values hold -0.0 or NaNs of different bits (see the module's note).
/// `order` and `through` are both int64 or both int32 (the engine keeps its per-node groupings at half the
/// memory): the same groups, the same values.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn grouped_medians(
    py: Python<'_>,
    values: PyBuffer<f64>,
    order: &Bound<'_, PyAny>,
    through: &Bound<'_, PyAny>,
    starts: PyBuffer<i64>,
    counts: PyBuffer<i64>,
    how: u8,
    out: PyBuffer<f64>,
) -> PyResult<bool> {
    if let (Ok(o), Ok(t)) = (PyBuffer::<i32>::get(order), PyBuffer::<i32>::get(through)) {
        let (o, t) = (items(&o, "order")?, items(&t, "through")?);
        return grouped(py, &values, o, t, &starts, &counts, how, &out);
    }
    let (o, t) = (PyBuffer::<i64>::get(order)?, PyBuffer::<i64>::get(through)?);
    let (o, t) = (items(&o, "order")?, items(&t, "through")?);
    grouped(py, &values, o, t, &starts, &counts, how, &out)
}

#[allow(clippy::too_many_arguments)]
fn grouped<I: Copy + Into<i64> + Sync>(
    py: Python<'_>,
    values: &PyBuffer<f64>,
    order: &[I],
    through: &[I],
    starts: &PyBuffer<i64>,
    counts: &PyBuffer<i64>,
    how: u8,
    out: &PyBuffer<f64>,
) -> PyResult<bool> {
    let v = items(values, "values")?;
    let (starts, counts) = (items(starts, "starts")?, items(counts, "counts")?);
    if out.item_count() != starts.len() || out.readonly() || !out.is_c_contiguous() {
        return Err(PyValueError::new_err("grouped_medians: bad arguments"));
    }
    let Some(picked) = medians_of(py, v, order, through, starts, counts, how)? else {
        return Ok(false);
    };
    // SAFETY: a writable C-contiguous buffer of `item_count` f64 (checked above) held by `out` for this call.
    let dest =
        unsafe { std::slice::from_raw_parts_mut(out.buf_ptr() as *mut f64, out.item_count()) };
    dest.copy_from_slice(&picked);
    Ok(true)
}

/// One group's statistic (`how`, one of the three above), its values in `scratch` (rearranged); None where
/// they hold -0.0 or NaNs of different bits (see the module's note).
pub(crate) fn one_statistic(scratch: &mut [f64], how: u8) -> Option<f64> {
    if !selectable(scratch) {
        return None;
    }
    let nan = scratch
        .iter()
        .copied()
        .find(|x| x.is_nan())
        .unwrap_or(f64::NAN);
    let mut finite = 0;
    for k in 0..scratch.len() {
        if !scratch[k].is_nan() {
            scratch.swap(finite, k);
            finite += 1;
        }
    }
    Some(statistic(scratch, finite, nan, how))
}

/// `grouped_medians`' statistics, one per group (None where the values hold -0.0 or NaNs of different
/// bits: see the module's note).
pub(crate) fn medians_of<I: Copy + Into<i64> + Sync>(
    py: Python<'_>,
    v: &[f64],
    order: &[I],
    through: &[I],
    starts: &[i64],
    counts: &[i64],
    how: u8,
) -> PyResult<Option<Vec<f64>>> {
    if how > NUMPY || starts.len() != counts.len() {
        return Err(PyValueError::new_err("grouped_medians: bad arguments"));
    }
    let index = |i: I| -> Option<usize> {
        let i = usize::try_from(i.into()).ok()?;
        let i = if through.is_empty() {
            i
        } else {
            usize::try_from((*through.get(i)?).into()).ok()?
        };
        (i < v.len()).then_some(i)
    };
    let mut groups = Vec::with_capacity(starts.len());
    for (&s, &c) in starts.iter().zip(counts) {
        let (s, c) = (usize::try_from(s), usize::try_from(c));
        match (s, c) {
            (Ok(s), Ok(c)) if c > 0 && s + c <= order.len() => groups.push(s..s + c),
            _ => {
                return Err(PyValueError::new_err(
                    "grouped_medians: a group out of range",
                ))
            }
        }
    }
    let mut picked = Vec::with_capacity(groups.len());
    let ok = py.detach(|| -> Result<bool, String> {
        let mut scratch = Vec::new();
        for range in groups {
            scratch.clear();
            for &i in &order[range] {
                scratch.push(v[index(i).ok_or("grouped_medians: an index out of range")?]);
            }
            let Some(m) = one_statistic(&mut scratch, how) else {
                return Ok(false);
            };
            picked.push(m);
        }
        Ok(true)
    });
    Ok(ok.map_err(PyValueError::new_err)?.then_some(picked))
}

/// Fill `out` (rows x columns, C order, as `values`) with, per row g and column k, the median of column k
/// over the rows other than g, ignoring NaN (NaN where no other row has a value): `medians.py`'s
/// `nanmedian_excluding_each_row`, bit for bit. Each column is sorted once (stably, as numpy's stable
/// argsort: 0.0 and -0.0 in row order); leaving out the value at sorted position p shifts the later ones.
#[pyfunction]
pub fn medians_excluding_each_row(
    py: Python<'_>,
    values: PyBuffer<f64>,
    rows: usize,
    out: PyBuffer<f64>,
) -> PyResult<()> {
    let v = items(&values, "values")?;
    if rows == 0
        || v.len() % rows != 0
        || out.item_count() != v.len()
        || out.readonly()
        || !out.is_c_contiguous()
    {
        return Err(PyValueError::new_err(
            "medians_excluding_each_row: bad arguments",
        ));
    }
    let result = py.detach(|| excluding_each_row(v, rows));
    // SAFETY: a writable C-contiguous buffer of `item_count` f64 (checked above) held by `out` for this call.
    let dest =
        unsafe { std::slice::from_raw_parts_mut(out.buf_ptr() as *mut f64, out.item_count()) };
    dest.copy_from_slice(&result);
    Ok(())
}

/// `medians_excluding_each_row` of `v` (`rows` x columns, C order, `rows` > 0), as a new table.
pub(crate) fn excluding_each_row(v: &[f64], rows: usize) -> Vec<f64> {
    let cols = v.len() / rows;
    let mut result = vec![f64::NAN; v.len()];
    {
        let mut sorted: Vec<(f64, usize)> = Vec::with_capacity(rows);
        let mut position = vec![usize::MAX; rows];
        for k in 0..cols {
            sorted.clear();
            sorted.extend(
                (0..rows)
                    .map(|g| (v[g * cols + k], g))
                    .filter(|(x, _)| !x.is_nan()),
            );
            sorted.sort_by(|a, b| a.0.partial_cmp(&b.0).expect("no NaN"));
            position.fill(usize::MAX);
            for (p, &(_, g)) in sorted.iter().enumerate() {
                position[g] = p;
            }
            for g in 0..rows {
                let own = position[g] != usize::MAX;
                let rest = sorted.len() - usize::from(own);
                if rest == 0 {
                    continue;
                }
                let at = |j: usize| sorted[j + usize::from(own && j >= position[g])].0;
                result[g * cols + k] = (at((rest - 1) / 2) + at(rest / 2)) / 2.0;
            }
        }
    }
    result
}
