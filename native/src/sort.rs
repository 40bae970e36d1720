//! The canonical order of an epoch's samples (streams/engine/timeline.py, `canonical`): rows sorted by
//! event time (NaN last), then by every other column in the order given (floats with NaN first, integers,
//! booleans, strings by code point), rows equal in every column in their input order. One stable sort whose
//! comparisons read a column only when the columns before it tie. A string column is read as the ranks of
//! its strings (compared as integers): only its distinct objects, few, are compared as text.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::hash::BuildHasherDefault;

use pyo3::buffer::{Element, PyBuffer};
use pyo3::exceptions::{PyKeyError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::codes::Address;
use crate::objects;

/// One column as passed in: a buffer, or the ranks of an object array's strings.
enum Held {
    Float(PyBuffer<f64>),
    Int(PyBuffer<i64>),
    Bool(PyBuffer<u8>),
    Str(Vec<u32>),
}

/// One column's values, as the order reads them.
enum Column<'a> {
    Float(&'a [f64]),
    Int(&'a [i64]),
    Bool(&'a [u8]),
    Str(&'a [u32]),
}

/// Per row of a one-dimensional, contiguous numpy array of `n` Python objects (read in place), the rank of
/// its string among the array's distinct strings by code point (equal strings, equal ranks); None if one
/// is not exactly a `str`. The decoder makes one object per distinct string of a message, so each object
/// is looked up by address once and only the few distinct objects are compared as text.
fn string_ranks(array: &Bound<'_, PyAny>, n: usize) -> PyResult<Option<Vec<u32>>> {
    Ok(ranks_of(objects::pointers(array, n)?))
}

/// [`string_ranks`] of object pointers read from arrays (the caller holds them, and the GIL).
fn ranks_of(values: &[*mut ffi::PyObject]) -> Option<Vec<u32>> {
    let n = values.len();
    let mut seen: HashMap<usize, u32, BuildHasherDefault<Address>> = HashMap::default();
    let mut distinct = Vec::new();
    let mut ids = Vec::with_capacity(n);
    let mut last = None; // (object, id) of the row before: runs of one object are common
    for &value in values {
        let id = match last {
            Some((object, id)) if object == value => id,
            _ => {
                let id = match seen.get(&(value as usize)) {
                    Some(&id) => id,
                    None if objects::is_str(value) => {
                        let id = distinct.len() as u32;
                        distinct.push(value);
                        seen.insert(value as usize, id);
                        id
                    }
                    None => return None,
                };
                last = Some((value, id));
                id
            }
        };
        ids.push(id);
    }
    let mut by_text: Vec<usize> = (0..distinct.len()).collect();
    by_text.sort_unstable_by(|&a, &b| text_order(distinct[a], distinct[b]));
    let mut rank = vec![0u32; distinct.len()];
    for pair in by_text.windows(2) {
        let step = u32::from(text_order(distinct[pair[0]], distinct[pair[1]]).is_ne());
        rank[pair[1]] = rank[pair[0]] + step;
    }
    for id in &mut ids {
        *id = rank[*id as usize];
    }
    Some(ids)
}

/// Two `str` objects by code point.
fn text_order(x: *mut ffi::PyObject, y: *mut ffi::PyObject) -> Ordering {
    if x == y {
        return Ordering::Equal;
    }
    // SAFETY: both are live `str` objects (checked as they were read, held by their array) and the GIL is
    // held; comparing two str cannot fail.
    unsafe { ffi::PyUnicode_Compare(x, y) }.cmp(&0)
}

fn items<T: Element>(buf: &PyBuffer<T>, n: usize) -> PyResult<&[T]> {
    if !buf.is_c_contiguous() || buf.item_count() != n || !crate::dag::machine_order(buf) {
        return Err(PyValueError::new_err(format!(
            "a column is not contiguous, has not {n} rows or is not in the machine's byte order"
        )));
    }
    // SAFETY: a C-contiguous buffer of `item_count` items of T (its format checked by PyBuffer::get),
    // held by `buf` for the slice's lifetime.
    Ok(unsafe { std::slice::from_raw_parts(buf.buf_ptr() as *const T, buf.item_count()) })
}

/// Event times as integers in the same order: NaN after every number (NaNs equal), -0.0 equal to 0.0.
fn time_key(t: f64) -> u64 {
    if t.is_nan() {
        return u64::MAX;
    }
    let bits = (t + 0.0).to_bits(); // (-0.0 + 0.0 is 0.0)
    if bits >> 63 == 1 {
        !bits
    } else {
        bits | 1 << 63
    }
}

/// Other floats: NaN before every number (the definition's key: NaN as -inf, -inf as the lowest finite
/// float; it also ties +inf with the largest finite float when a NaN is among the rows, which no valid
/// sample has: the contract admits finite numbers only).
fn by_value(a: f64, b: f64) -> Ordering {
    a.partial_cmp(&b)
        .unwrap_or_else(|| b.is_nan().cmp(&a.is_nan()))
}

impl Column<'_> {
    fn compare(&self, a: usize, b: usize) -> Ordering {
        match self {
            Column::Float(v) => by_value(v[a], v[b]),
            Column::Int(v) => v[a].cmp(&v[b]),
            Column::Bool(v) => v[a].cmp(&v[b]),
            Column::Str(v) => v[a].cmp(&v[b]),
        }
    }

    /// Whether every row of `rows` compares equal to the first in this column (equal is an equivalence
    /// here: floats equal as numbers or both NaN, strings by rank), so it orders none of them.
    fn same_in(&self, rows: &[usize]) -> bool {
        let Some((&first, rest)) = rows.split_first() else {
            return true;
        };
        match self {
            Column::Float(v) => rest.iter().all(|&r| by_value(v[first], v[r]).is_eq()),
            Column::Int(v) => rest.iter().all(|&r| v[r] == v[first]),
            Column::Bool(v) => rest.iter().all(|&r| v[r] == v[first]),
            Column::Str(v) => rest.iter().all(|&r| v[r] == v[first]),
        }
    }
}

/// `keys` in ascending order, and the rows they came from (equal keys in input order): a radix sort by
/// digits of `DIGIT` bits, least significant first, each pass stable, skipping the digits every key shares
/// (an epoch's event times share their high bits, so a few passes sort them).
fn by_key(mut keys: Vec<u64>) -> (Vec<u64>, Vec<u32>) {
    const DIGIT: u32 = 11;
    const MASK: u64 = (1 << DIGIT) - 1;
    let n = keys.len();
    let first = keys.first().copied().unwrap_or(0);
    let varying = keys.iter().fold(0, |bits, &k| bits | (k ^ first));
    let mut rows: Vec<u32> = (0..n as u32).collect();
    let (mut keys_to, mut rows_to) = (vec![0u64; n], vec![0u32; n]);
    let mut at = vec![0usize; 1 << DIGIT];
    for shift in (0..64).step_by(DIGIT as usize) {
        if (varying >> shift) & MASK == 0 {
            continue;
        }
        at.iter_mut().for_each(|a| *a = 0);
        for &k in &keys {
            at[((k >> shift) & MASK) as usize] += 1;
        }
        let mut sum = 0;
        for a in at.iter_mut() {
            (*a, sum) = (sum, sum + *a);
        }
        for (&k, &row) in keys.iter().zip(&rows) {
            let slot = &mut at[((k >> shift) & MASK) as usize];
            (keys_to[*slot], rows_to[*slot]) = (k, row);
            *slot += 1;
        }
        std::mem::swap(&mut keys, &mut keys_to);
        std::mem::swap(&mut rows, &mut rows_to);
    }
    (keys, rows)
}

/// Fill `order` (int64, n rows) with the canonical order of the rows. `times`: float64 event times;
/// `columns`/`kinds`: the other columns in the order they break ties, each a contiguous array of its kind
/// (`f` float64, `i` int64, `b` booleans as uint8) or, for kind `s`, a contiguous object array. False (and `order` untouched)
/// when a string column holds something other than `str`: the caller then orders by its definition.
#[pyfunction]
pub fn canonical_order(
    times: PyBuffer<f64>,
    columns: &Bound<'_, PyList>,
    kinds: &str,
    order: PyBuffer<i64>,
) -> PyResult<bool> {
    let n = times.item_count();
    let times = items(&times, n)?;
    if kinds.len() != columns.len() {
        return Err(PyValueError::new_err("one kind per column"));
    }
    let mut held = Vec::with_capacity(kinds.len());
    for (column, kind) in columns.iter().zip(kinds.bytes()) {
        held.push(match kind {
            b'f' => Held::Float(PyBuffer::get(&column)?),
            b'i' => Held::Int(PyBuffer::get(&column)?),
            b'b' => Held::Bool(PyBuffer::get(&column)?),
            b's' => match string_ranks(&column, n)? {
                Some(ranks) => Held::Str(ranks),
                None => return Ok(false),
            },
            _ => {
                return Err(PyValueError::new_err(format!(
                    "unknown column kind {:?}",
                    kind as char
                )))
            }
        });
    }
    let cols = held
        .iter()
        .map(|h| {
            Ok(match h {
                Held::Float(b) => Column::Float(items(b, n)?),
                Held::Int(b) => Column::Int(items(b, n)?),
                Held::Bool(b) => Column::Bool(items(b, n)?),
                Held::Str(v) => Column::Str(v),
            })
        })
        .collect::<PyResult<Vec<_>>>()?;
    if order.readonly() || !order.is_c_contiguous() || order.item_count() != n {
        return Err(PyValueError::new_err(
            "order: must be a writable contiguous int64 array of n rows",
        ));
    }
    let rows = in_order(times, &cols)?;
    // SAFETY: a writable C-contiguous buffer of `n` int64 held by `order` for this call; no other slice
    // of it exists (the caller passes a fresh output array).
    let out = unsafe { std::slice::from_raw_parts_mut(order.buf_ptr() as *mut i64, n) };
    for (o, r) in out.iter_mut().zip(rows) {
        *o = r as i64;
    }
    Ok(true)
}

/// The rows in canonical order: by event time first, as integer keys (ties by position: the stable
/// order), then each run of equal times by the columns.
fn in_order(times: &[f64], cols: &[Column]) -> PyResult<Vec<usize>> {
    let n = times.len();
    if u32::try_from(n).is_err() {
        return Err(PyValueError::new_err("too many rows"));
    }
    let (keys, sorted) = by_key(times.iter().map(|&t| time_key(t)).collect());
    let mut rows: Vec<usize> = sorted.iter().map(|&i| i as usize).collect();
    // a column that compares equal in every row orders none of them: the runs of equal times compare the
    // others only (an epoch's job, device, flags...), told once, when a first run needs them
    let mut varying: Option<Vec<&Column>> = None;
    let mut start = 0;
    while start < n {
        let end = start
            + keys[start..]
                .iter()
                .take_while(|&&k| k == keys[start])
                .count();
        if end - start > 1 && !cols.is_empty() {
            let varying =
                varying.get_or_insert_with(|| cols.iter().filter(|c| !c.same_in(&rows)).collect());
            rows[start..end].sort_by(|&a, &b| {
                varying
                    .iter()
                    .map(|c| c.compare(a, b))
                    .find(|o| o.is_ne())
                    .unwrap_or(Ordering::Equal)
            });
        }
        start = end;
    }
    Ok(rows)
}

/// One column of an epoch's parts, joined (strings: their objects and ranks).
enum Joined {
    Float(Vec<f64>),
    Int(Vec<i64>),
    Bool(Vec<u8>),
    Str(Vec<*mut ffi::PyObject>, Vec<u32>),
}

impl Joined {
    fn column(&self) -> Column<'_> {
        match self {
            Joined::Float(v) => Column::Float(v),
            Joined::Int(v) => Column::Int(v),
            Joined::Bool(v) => Column::Bool(v),
            Joined::Str(_, ranks) => Column::Str(ranks),
        }
    }
}

/// Whether a buffer's one-character format is of a column kind (`f`, `i`, `b`, `s`).
fn of_kind(format: u8, kind: u8) -> bool {
    matches!(
        (kind, format),
        (b'f', b'd') | (b'i', b'l' | b'q') | (b'b', b'?') | (b's', b'O')
    )
}

/// The items of every part's array (`arrays`, read as `kind`), joined; None when one is not a contiguous
/// array of that kind; an error when one has not its part's row count (`rows`: per part).
fn joined<T: Copy>(
    arrays: &[Bound<'_, PyAny>],
    kind: u8,
    rows: &[usize],
) -> PyResult<Option<Vec<T>>> {
    let mut out = Vec::with_capacity(rows.iter().sum());
    for (array, &n) in arrays.iter().zip(rows) {
        let Some(raw) = objects::Raw::of(array, 0).filter(|r| of_kind(r.format, kind)) else {
            return Ok(None);
        };
        if raw.len != n {
            return Err(PyValueError::new_err(
                "the columns of a part have not one row count",
            ));
        }
        if n > 0 {
            // SAFETY: a contiguous array of `n` items of T's size and type (its format checked), held by the
            // caller (with the GIL) while they are copied.
            out.extend_from_slice(unsafe {
                std::slice::from_raw_parts(raw.address as *const T, n)
            });
        }
    }
    Ok(Some(out))
}

/// `out` (a fresh contiguous array of `kind`, as many rows as `rows`) filled with `values` in `rows` order.
fn gather_into<T: Copy>(
    out: &Bound<'_, PyAny>,
    kind: u8,
    values: &[T],
    rows: &[usize],
) -> PyResult<()> {
    let raw = objects::Raw::of(out, ffi::PyBUF_WRITABLE)
        .filter(|r| of_kind(r.format, kind) && r.len == rows.len())
        .ok_or_else(|| {
            PyValueError::new_err("an output: not a writable contiguous array of its kind and rows")
        })?;
    if rows.is_empty() {
        return Ok(());
    }
    // SAFETY: a writable contiguous array of `rows.len()` items of T's size and type, held by the caller for
    // this call; no other slice of it exists (a fresh output array).
    let to = unsafe { std::slice::from_raw_parts_mut(raw.address as *mut T, rows.len()) };
    for (o, &r) in to.iter_mut().zip(rows) {
        *o = values[r];
    }
    Ok(())
}

/// `out` (a fresh object array, as many rows as `rows`) holding `objects` in `rows` order.
fn gather_objects(
    out: &Bound<'_, PyAny>,
    objects: &[*mut ffi::PyObject],
    rows: &[usize],
) -> PyResult<()> {
    let raw = objects::Raw::of(out, ffi::PyBUF_WRITABLE)
        .filter(|r| r.format == b'O' && r.len == rows.len())
        .ok_or_else(|| {
            PyValueError::new_err("an output: not a writable contiguous object array of its rows")
        })?;
    if rows.is_empty() {
        return Ok(());
    }
    // SAFETY: as in `gather_into`, of object pointers
    let to = unsafe {
        std::slice::from_raw_parts_mut(raw.address as *mut *mut ffi::PyObject, rows.len())
    };
    // every slot written before any object it held is let go of: were `out` one of the inputs, a reference
    // dropped mid-loop could free an object still to be read from `objects`
    let mut held = Vec::with_capacity(rows.len());
    for (slot, &r) in to.iter_mut().zip(rows) {
        let new = objects[r];
        // SAFETY: `new` is a live object held by its part (the caller holds the parts, and the GIL): the
        // output keeps it (one more reference); the one the slot held (None, in a fresh array) is kept aside.
        unsafe { ffi::Py_IncRef(new) };
        held.push(std::mem::replace(slot, new));
    }
    for old in held {
        // SAFETY: each reference the output held, let go of once, after the last read of `objects`
        unsafe { ffi::Py_XDECREF(old) };
    }
    Ok(())
}

/// An epoch's parts as one batch in canonical order (streams/engine/timeline.py, `canonical`): joined,
/// ordered and gathered in one call, not numpy calls per column. `parts`: each part's columns (a dict);
/// `names`: the columns, the event times first; `kinds`: each one's kind, as [`canonical_order`] reads them
/// (the times `f`); `outs`: per column a fresh contiguous array of its type with every part's rows, filled
/// with them in the order [`canonical_order`] gives the parts joined (the columns after the times breaking
/// ties in the order given). False, nothing written, when a part's column is not a contiguous array of its
/// kind (in the machine's byte order) or a string column holds something other than `str`: the caller then
/// joins and orders them by the definition.
#[pyfunction]
pub fn canonical_gather(
    parts: &Bound<'_, PyList>,
    names: &Bound<'_, PyList>,
    kinds: &str,
    outs: &Bound<'_, PyList>,
) -> PyResult<bool> {
    if kinds.len() != names.len() || outs.len() != names.len() || !kinds.starts_with('f') {
        return Err(PyValueError::new_err(
            "one kind and one output per column, the first (event times) of kind f",
        ));
    }
    let parts = parts
        .iter()
        .map(|p| p.cast_into::<PyDict>().map_err(PyErr::from))
        .collect::<PyResult<Vec<_>>>()?;
    let mut rows = Vec::new();
    let mut held = Vec::with_capacity(kinds.len());
    for (name, kind) in names.iter().zip(kinds.bytes()) {
        let arrays = parts
            .iter()
            .map(|p| {
                p.get_item(&name)?
                    .ok_or_else(|| PyKeyError::new_err(name.clone().unbind()))
            })
            .collect::<PyResult<Vec<_>>>()?;
        if rows.is_empty() {
            for array in &arrays {
                match objects::Raw::of(array, 0) {
                    Some(raw) => rows.push(raw.len),
                    None => return Ok(false),
                }
            }
        }
        let one = match kind {
            b'f' => joined(&arrays, kind, &rows)?.map(Joined::Float),
            b'i' => joined(&arrays, kind, &rows)?.map(Joined::Int),
            b'b' => joined(&arrays, kind, &rows)?.map(Joined::Bool),
            b's' => joined(&arrays, kind, &rows)?.and_then(|objects: Vec<*mut ffi::PyObject>| {
                ranks_of(&objects).map(|r| Joined::Str(objects, r))
            }),
            _ => {
                return Err(PyValueError::new_err(format!(
                    "unknown column kind {:?}",
                    kind as char
                )))
            }
        };
        match one {
            Some(one) => held.push(one),
            None => return Ok(false),
        }
    }
    let Joined::Float(times) = &held[0] else {
        unreachable!("the first kind is f")
    };
    let cols: Vec<Column> = held[1..].iter().map(Joined::column).collect();
    let order = in_order(times, &cols)?;
    for ((one, out), kind) in held.iter().zip(outs.iter()).zip(kinds.bytes()) {
        match one {
            Joined::Float(v) => gather_into(&out, kind, v, &order)?,
            Joined::Int(v) => gather_into(&out, kind, v, &order)?,
            Joined::Bool(v) => gather_into(&out, kind, v, &order)?,
            Joined::Str(objects, _) => gather_objects(&out, objects, &order)?,
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_order_compares_every_column_as_a_sort_by_all_of_them() {
        let mut state = 11u64;
        let mut next = move |m: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % m
        };
        for n in [0, 1, 2, 40, 700] {
            let times: Vec<f64> = (0..n).map(|_| next(4) as f64).collect();
            let constant = vec![3i64; n];
            let zeros: Vec<f64> = (0..n).map(|_| [0.0, -0.0][next(2) as usize]).collect(); // (equal)
            let few: Vec<i64> = (0..n).map(|_| next(3) as i64).collect();
            let floats: Vec<f64> = (0..n)
                .map(|_| [0.0, -0.0, f64::NAN, 1.5][next(4) as usize])
                .collect();
            let flags: Vec<u8> = (0..n).map(|_| next(2) as u8).collect();
            let ranks: Vec<u32> = (0..n).map(|_| next(5) as u32).collect();
            let cols = [
                Column::Int(&constant),
                Column::Float(&zeros),
                Column::Float(&floats),
                Column::Bool(&flags),
                Column::Int(&few),
                Column::Str(&ranks),
            ];
            let mut want: Vec<usize> = (0..n).collect();
            want.sort_by(|&a, &b| {
                time_key(times[a]).cmp(&time_key(times[b])).then_with(|| {
                    cols.iter()
                        .map(|c| c.compare(a, b))
                        .find(|o| o.is_ne())
                        .unwrap_or(Ordering::Equal)
                })
            });
            assert_eq!(in_order(&times, &cols).unwrap(), want);
        }
    }

    #[test]
    fn by_key_is_the_stable_sort() {
        let mut state = 7u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for (n, bits) in [(0, 64), (1, 64), (500, 3), (3000, 20), (3000, 64)] {
            let keys: Vec<u64> = (0..n).map(|_| next() >> (64 - bits)).collect();
            let mut want: Vec<(u64, u32)> = keys.iter().zip(0..).map(|(&k, i)| (k, i)).collect();
            want.sort_unstable();
            let (sorted, rows) = by_key(keys.clone());
            assert_eq!(sorted, want.iter().map(|w| w.0).collect::<Vec<_>>());
            assert_eq!(rows, want.iter().map(|w| w.1).collect::<Vec<_>>());
        }
    }
}
