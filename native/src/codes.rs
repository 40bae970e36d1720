//! The codes of a column of Python objects (streams/engine/codes.py, `Codebook.encode` and `classes`): per
//! value, the integer a dict maps it to, with the dict's own lookup. A column's values are mostly the same
//! few objects (the decoder makes one string per distinct name of a message), so a value that is the very
//! object seen before takes that object's code without a lookup: the same code, since a dict maps one
//! object to one value.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::objects;

/// A hash of an object's address (objects are at least 16-byte aligned, so the low bits say little).
#[derive(Default)]
pub(crate) struct Address(u64);

impl Hasher for Address {
    fn write(&mut self, _: &[u8]) {
        unreachable!("only addresses are hashed")
    }

    fn write_usize(&mut self, address: usize) {
        self.0 = ((address as u64) >> 4).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// codes_of(values, codes, missing, out) -> bool or None: `out[i] = codes[values[i]]`; a value that is not a
/// key takes `missing` when it is not negative, else the call stops and answers false (the caller then runs
/// the definition, which adds new names). A lookup's error (an unhashable value) is raised. `values`: a list,
/// or a one-dimensional contiguous numpy object array, read in place; for an array holding anything but
/// `str` the answer is None (the caller passes its list instead).
#[pyfunction]
pub fn codes_of(
    values: &Bound<'_, PyAny>,
    codes: &Bound<'_, PyDict>,
    missing: i64,
    out: PyBuffer<i64>,
) -> PyResult<Option<bool>> {
    let n = values.len()?;
    if out.readonly() || !out.is_c_contiguous() || out.item_count() != n {
        return Err(PyValueError::new_err(
            "out: a writable contiguous int64 buffer of one item per value",
        ));
    }
    // SAFETY: a writable C-contiguous buffer of `n` i64 held by `out` for this call; no other slice of it.
    let result = unsafe { std::slice::from_raw_parts_mut(out.buf_ptr() as *mut i64, n) };
    if let Ok(list) = values.cast::<PyList>() {
        return Ok(Some(of_list(list, codes, missing, result)?));
    }
    let py = values.py();
    let pointers = objects::pointers(values, n)?;
    if !pointers.iter().all(|&value| objects::is_str(value)) {
        return Ok(None);
    }
    // per object looked up: its code, by address; the array holds each object for the call, and a str's
    // lookup runs no Python code that could change the array, so an address names one object all along
    let mut seen: HashMap<usize, i64, BuildHasherDefault<Address>> = HashMap::default();
    let mut last = (std::ptr::null_mut(), 0i64); // the previous value: runs of one object are common
    for (slot, &address) in result.iter_mut().zip(pointers) {
        if address == last.0 {
            *slot = last.1;
            continue;
        }
        let code = match seen.get(&(address as usize)) {
            Some(code) => *code,
            None => {
                // SAFETY: a live object (a str, checked above), held by the array
                let value = unsafe { Bound::from_borrowed_ptr(py, address) };
                let code = match codes.get_item(&value)? {
                    Some(code) => code.extract::<i64>()?,
                    None if missing >= 0 => missing,
                    None => return Ok(Some(false)),
                };
                seen.insert(address as usize, code);
                code
            }
        };
        last = (address, code);
        *slot = code;
    }
    Ok(Some(true))
}

fn of_list(
    values: &Bound<'_, PyList>,
    codes: &Bound<'_, PyDict>,
    missing: i64,
    result: &mut [i64],
) -> PyResult<bool> {
    // per object looked up: its code, by address; each object is held, so its address names it all along
    let mut seen: HashMap<usize, i64, BuildHasherDefault<Address>> = HashMap::default();
    let mut held = Vec::new();
    let mut last = (std::ptr::null_mut(), 0i64); // the previous value: runs of one object are common
    for (slot, value) in result.iter_mut().zip(values.iter()) {
        let address = value.as_ptr();
        if address == last.0 {
            *slot = last.1;
            continue;
        }
        let code = match seen.get(&(address as usize)) {
            Some(code) => *code,
            None => {
                let code = match codes.get_item(&value)? {
                    Some(code) => code.extract::<i64>()?,
                    None if missing >= 0 => missing,
                    None => return Ok(false),
                };
                seen.insert(address as usize, code);
                held.push(value);
                code
            }
        };
        last = (address, code);
        *slot = code;
    }
    Ok(true)
}

/// same_str(parts, value) -> bool or None: whether every row of every part (one-dimensional contiguous numpy
/// object arrays) is a `str` equal to `value` (a `str`), as `codes_of` with `{value: 1}` tells it. None when
/// it cannot tell at once: a part is not such an array, or a row before the first other string is not
/// exactly a `str` (the caller then runs the definition). A column of one name is mostly one object, told
/// by its address.
#[pyfunction]
pub fn same_str(parts: &Bound<'_, PyList>, value: &Bound<'_, PyAny>) -> PyResult<Option<bool>> {
    if !objects::is_str(value.as_ptr()) {
        return Ok(None);
    }
    let mut alike = value.as_ptr(); // the last object found equal to `value`
    for part in parts.iter() {
        let Ok(n) = part.len() else {
            return Ok(None); // (no length: not such an array)
        };
        let Ok(pointers) = objects::pointers(&part, n) else {
            return Ok(None);
        };
        for &row in pointers {
            if row == alike || row == value.as_ptr() {
                continue;
            }
            if !objects::is_str(row) {
                return Ok(None);
            }
            // SAFETY: two live `str` objects (the row held by its array, `value` by the caller), the GIL held;
            // comparing two str cannot fail
            if unsafe { ffi::PyUnicode_Compare(row, value.as_ptr()) } != 0 {
                return Ok(Some(false));
            }
            alike = row;
        }
    }
    Ok(Some(true))
}
