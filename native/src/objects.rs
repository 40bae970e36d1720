//! The objects of a numpy object array, read in place (through the buffer protocol): no list of them is
//! made (`sort`, `codes`).

use std::ffi::CStr;

use pyo3::exceptions::PyValueError;
use pyo3::ffi;
use pyo3::prelude::*;

/// The `n` object pointers of a one-dimensional, contiguous numpy array of Python objects, borrowed: the
/// array holds them, and the caller holds the array (and the GIL) while it reads them. Read through the
/// buffer protocol (a tenth of the time of `__array_interface__`, whose dict is made on each call).
pub fn pointers<'a>(array: &'a Bound<'_, PyAny>, n: usize) -> PyResult<&'a [*mut ffi::PyObject]> {
    let wrong = || PyValueError::new_err(format!("not a contiguous object array of {n} rows"));
    let mut view = std::mem::MaybeUninit::<ffi::Py_buffer>::uninit();
    // SAFETY: the GIL is held; a C-contiguous view (PyBUF_ND without strides) with its format is asked for,
    // and released below once its fields are read.
    if unsafe {
        ffi::PyObject_GetBuffer(
            array.as_ptr(),
            view.as_mut_ptr(),
            ffi::PyBUF_FORMAT | ffi::PyBUF_ND,
        )
    } != 0
    {
        PyErr::take(array.py()); // (numpy's reason: not contiguous, or no buffer; the same answer as before)
        return Err(wrong());
    }
    // SAFETY: filled by the successful call above
    let mut view = unsafe { view.assume_init() };
    // SAFETY: a filled view's format is a C string (asked for), and its shape has `ndim` items (PyBUF_ND)
    let fits = unsafe {
        !view.format.is_null()
            && CStr::from_ptr(view.format).to_bytes() == b"O"
            && view.ndim == 1
            && *view.shape == n as ffi::Py_ssize_t
            && view.itemsize == std::mem::size_of::<*mut ffi::PyObject>() as ffi::Py_ssize_t
    };
    let address = view.buf as *const *mut ffi::PyObject;
    // SAFETY: the view is released once; the array's data stays where it is while the caller holds the array
    // and the GIL (as with the address `__array_interface__` gave)
    unsafe { ffi::PyBuffer_Release(&mut view) };
    if !fits {
        return Err(wrong());
    }
    if n == 0 {
        return Ok(&[]);
    }
    // SAFETY: the array's data is `n` contiguous object pointers (checked above), held by the array, which
    // the caller keeps alive while it reads them; the GIL is held, so nothing changes them meanwhile.
    Ok(unsafe { std::slice::from_raw_parts(address, n) })
}

/// Whether `value` (a pointer read from an object array) is exactly a `str`.
pub fn is_str(value: *mut ffi::PyObject) -> bool {
    // SAFETY: a non-null pointer of an object array is a live object
    !value.is_null() && unsafe { ffi::PyUnicode_CheckExact(value) } != 0
}
