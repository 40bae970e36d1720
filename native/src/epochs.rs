//! A batch's rows per epoch (`streams/engine/timeline.py`'s `_by_epoch`, the definition): the epoch of each
//! event time, and the runs of rows of one epoch in increasing epoch order, in one call instead of numpy's
//! division, floor, cast, comparison, search and list per batch that spans epochs.

use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;

use crate::buffer::{Buffer, Owned};
use crate::dag::machine_order;

/// The epoch of event time `t`, as `np.floor(t / epoch_s).astype(np.int64)` gives it; None where that cast
/// is not a plain one (NaN, an infinity, beyond int64): the definition decides.
fn epoch_of(t: f64, epoch_s: f64) -> Option<i64> {
    let k = (t / epoch_s).floor();
    // -2^63 is an int64, 2^63 is not (both are floats exactly)
    (-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0)
        .contains(&k)
        .then_some(k as i64)
}

/// Each epoch's rows: (epoch, start, end), epochs increasing.
type Runs = Vec<(i64, usize, usize)>;

/// epoch_runs(times, epoch_s) -> None, or (order or None, [(epoch, start, end)]): the rows of each epoch,
/// epochs increasing, are rows start..end of the batch, or, when `order` (int64 row numbers, a buffer) is
/// given, of the batch taken in that order (a stable sort by epoch). None: a time whose epoch is not a plain
/// int64 or times that are not a contiguous, aligned float64 array in the machine's byte order (the
/// definition decides).
#[pyfunction]
pub fn epoch_runs(
    times: &Bound<'_, PyAny>,
    epoch_s: f64,
) -> PyResult<Option<(Option<Buffer>, Runs)>> {
    let Ok(times) = PyBuffer::<f64>::get(times) else {
        return Ok(None); // (not float64, or not aligned to one: pyo3 refuses to read it as f64)
    };
    if !times.is_c_contiguous() || !machine_order(&times) {
        return Ok(None);
    }
    // SAFETY: a C-contiguous buffer of `item_count` f64 (its format checked by PyBuffer::get), held by
    // `times` for the slice's lifetime
    let times =
        unsafe { std::slice::from_raw_parts(times.buf_ptr() as *const f64, times.item_count()) };
    let Some(mut epochs) = times
        .iter()
        .map(|&t| epoch_of(t, epoch_s))
        .collect::<Option<Vec<i64>>>()
    else {
        return Ok(None);
    };
    let mut order = None;
    if epochs.windows(2).any(|w| w[1] < w[0]) {
        let mut rows: Vec<i64> = (0..epochs.len() as i64).collect();
        rows.sort_by_key(|&i| epochs[i as usize]); // stable, as numpy's argsort(kind="stable")
        epochs = rows.iter().map(|&i| epochs[i as usize]).collect();
        order = Some(Buffer::new(Owned::I64(rows)));
    }
    let mut runs = Vec::new();
    let mut start = 0;
    for end in 1..=epochs.len() {
        if end == epochs.len() || epochs[end] != epochs[start] {
            runs.push((epochs[start], start, end));
            start = end;
        }
    }
    Ok(Some((order, runs)))
}
