//! The objects of a numpy object array, read in place (through the buffer protocol): no list of them is
//! made (`sort`, `codes`).

use std::ffi::CStr;

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyList;

/// The `n` object pointers of a one-dimensional, contiguous numpy array of Python objects, borrowed: the
/// array holds them, and the caller holds the array (and the GIL) while it reads them. Read through the
/// buffer protocol (a tenth of the time of `__array_interface__`, whose dict is made on each call).
pub fn pointers<'a>(array: &'a Bound<'_, PyAny>, n: usize) -> PyResult<&'a [*mut ffi::PyObject]> {
    let wrong = || PyValueError::new_err(format!("not a contiguous object array of {n} rows"));
    let raw = Raw::of(array, 0).ok_or_else(wrong)?;
    if raw.format != b'O' || raw.len != n {
        return Err(wrong());
    }
    if n == 0 {
        return Ok(&[]);
    }
    // SAFETY: the array's data is `n` contiguous object pointers (checked above), held by the array, which
    // the caller keeps alive while it reads them; the GIL is held, so nothing changes them meanwhile.
    Ok(unsafe { std::slice::from_raw_parts(raw.address as *const *mut ffi::PyObject, n) })
}

/// Where a one-dimensional, C-contiguous array's items are, read through the buffer protocol (the view is
/// released at once: the data stays where it is while the caller holds the array and the GIL, as with the
/// address `__array_interface__` gives).
pub struct Raw {
    pub address: *mut std::ffi::c_void,
    pub len: usize,
    /// the item's type, as the buffer's one-character format in native mode and size: `d` float64, `l`
    /// or `q` int64, `?` bool, `O` an object pointer (0 for any other format or size)
    pub format: u8,
}

impl Raw {
    /// `array`'s items (`flags`: more buffer flags, e.g. PyBUF_WRITABLE); None when it gives no such view
    /// (not contiguous, not one-dimensional, read-only when writable is asked).
    pub fn of(array: &Bound<'_, PyAny>, flags: i32) -> Option<Raw> {
        let mut view = std::mem::MaybeUninit::<ffi::Py_buffer>::uninit();
        // SAFETY: the GIL is held; a C-contiguous view (PyBUF_ND without strides) with its format is asked
        // for, and released below once its fields are read.
        if unsafe {
            ffi::PyObject_GetBuffer(
                array.as_ptr(),
                view.as_mut_ptr(),
                ffi::PyBUF_FORMAT | ffi::PyBUF_ND | flags,
            )
        } != 0
        {
            PyErr::take(array.py()); // (numpy's reason: not contiguous, or no buffer; told as None)
            return None;
        }
        // SAFETY: filled by the successful call above
        let mut view = unsafe { view.assume_init() };
        // SAFETY: a filled view's format is a C string (asked for), and its shape has `ndim` items (PyBUF_ND)
        let (format, len) = unsafe {
            let format = if view.format.is_null() {
                &b""[..]
            } else {
                CStr::from_ptr(view.format).to_bytes()
            };
            let len = if view.ndim == 1 {
                Some(*view.shape as usize)
            } else {
                None
            };
            (format, len)
        };
        let size = match format {
            b"d" | b"l" | b"q" => 8,
            b"?" => 1,
            b"O" => std::mem::size_of::<*mut ffi::PyObject>(),
            _ => 0,
        };
        // (aligned to its item's size, as a slice of it must be: numpy's unaligned arrays say `=d`, not
        // `d`, but another exporter's need not)
        let aligned = size > 0 && (view.buf as usize) % size == 0;
        let format = if aligned && view.itemsize == size as ffi::Py_ssize_t {
            format[0]
        } else {
            0
        };
        let raw = len.map(|len| Raw {
            address: view.buf,
            len,
            format,
        });
        // SAFETY: the view is released once
        unsafe { ffi::PyBuffer_Release(&mut view) };
        raw
    }
}

/// Whether `value` (a pointer read from an object array) is exactly a `str`.
pub fn is_str(value: *mut ffi::PyObject) -> bool {
    // SAFETY: a non-null pointer of an object array is a live object
    !value.is_null() && unsafe { ffi::PyUnicode_CheckExact(value) } != 0
}

/// strings_at(strings, codes, out): `out` (a fresh one-dimensional object array, as long as `codes`) holding
/// `strings[code]` for each of `codes` (a contiguous uint32 array, codes into the list `strings`): what
/// `numpy.array(strings, dtype=object).take(codes)` gives, without the cast of the codes and numpy's call
/// per item (the decoder's string columns, `streams/contract/native_decode.py`).
#[pyfunction]
pub fn strings_at(
    strings: &Bound<'_, PyList>,
    codes: PyBuffer<u32>,
    out: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let n = codes.item_count();
    let raw = Raw::of(out, ffi::PyBUF_WRITABLE)
        .filter(|r| r.format == b'O' && r.len == n)
        .ok_or_else(|| {
            PyValueError::new_err("out: not a writable contiguous object array as long as codes")
        })?;
    let codes = crate::dag::items(&codes, "codes")?;
    let objects: Vec<*mut ffi::PyObject> = strings.iter().map(|s| s.as_ptr()).collect();
    if codes.iter().any(|&c| c as usize >= objects.len()) {
        return Err(PyValueError::new_err("codes: a code beyond the strings"));
    }
    if n == 0 {
        return Ok(());
    }
    // SAFETY: `out`'s data is `n` contiguous, writable object pointers (checked above), held by `out`,
    // which the caller holds (and the GIL) during the call
    let to = unsafe { std::slice::from_raw_parts_mut(raw.address as *mut *mut ffi::PyObject, n) };
    // every slot written before any object it held is let go of (as in `sort`'s gather): no code runs
    // that could change `strings` while its items are read
    let mut held = Vec::with_capacity(n);
    for (slot, &code) in to.iter_mut().zip(codes) {
        let new = objects[code as usize];
        // SAFETY: `new` is a live object held by `strings` (a list the caller holds, and the GIL): the
        // output keeps it (one more reference); the one the slot held (None, in a fresh array) is kept aside
        unsafe { ffi::Py_IncRef(new) };
        held.push(std::mem::replace(slot, new));
    }
    for old in held {
        // SAFETY: each reference the output held, let go of once, after the last read of `strings`
        unsafe { ffi::Py_XDECREF(old) };
    }
    Ok(())
}
