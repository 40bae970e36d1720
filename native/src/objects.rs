//! The objects of a numpy object array, read in place (through its `__array_interface__`): no list of them
//! is made (`sort`, `codes`).

use pyo3::exceptions::PyValueError;
use pyo3::ffi;
use pyo3::prelude::*;

/// The `n` object pointers of a one-dimensional, contiguous numpy array of Python objects, borrowed: the
/// array holds them, and the caller holds the array (and the GIL) while it reads them.
pub fn pointers<'a>(array: &'a Bound<'_, PyAny>, n: usize) -> PyResult<&'a [*mut ffi::PyObject]> {
    let interface = array.getattr("__array_interface__")?;
    let typestr: String = interface.get_item("typestr")?.extract()?;
    let shape: Vec<usize> = interface.get_item("shape")?.extract()?;
    if typestr != "|O" || shape != [n] || !interface.get_item("strides")?.is_none() {
        return Err(PyValueError::new_err(format!(
            "not a contiguous object array of {n} rows"
        )));
    }
    let (address, _): (usize, bool) = interface.get_item("data")?.extract()?;
    if n == 0 {
        return Ok(&[]);
    }
    // SAFETY: the array's data is `n` contiguous object pointers (checked above), held by the array, which
    // the caller keeps alive while it reads them; the GIL is held, so nothing changes them meanwhile.
    Ok(unsafe { std::slice::from_raw_parts(address as *const *mut ffi::PyObject, n) })
}

/// Whether `value` (a pointer read from an object array) is exactly a `str`.
pub fn is_str(value: *mut ffi::PyObject) -> bool {
    // SAFETY: a non-null pointer of an object array is a live object
    !value.is_null() && unsafe { ffi::PyUnicode_CheckExact(value) } != 0
}
