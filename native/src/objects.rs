//! The objects of a numpy object array, read and written in place (through the buffer protocol): no list
//! of them is made (`sort`, `codes`).

use std::ffi::CStr;

use pyo3::exceptions::PyValueError;
use pyo3::ffi;
use pyo3::prelude::*;

/// The `n` object pointers of a one-dimensional, contiguous numpy array of Python objects, borrowed: the
/// array holds them, and the caller holds the array (and the GIL) while it reads them. Read through the
/// buffer protocol (a tenth of the time of `__array_interface__`, whose dict is made on each call).
pub fn pointers<'a>(array: &'a Bound<'_, PyAny>, n: usize) -> PyResult<&'a [*mut ffi::PyObject]> {
    let address = address(array, n, false)?;
    if n == 0 {
        return Ok(&[]);
    }
    // SAFETY: the array's data is `n` contiguous object pointers (checked), held by the array, which the
    // caller keeps alive while it reads them; the GIL is held, so nothing changes them meanwhile.
    Ok(unsafe { std::slice::from_raw_parts(address, n) })
}

/// Make the rows of `array` (a one-dimensional contiguous object array of `values.len()` rows) refer to
/// `values`, one reference each (given up with the array), letting go of the objects it held (a fresh
/// array's None).
///
/// # Safety
/// Every value is a live object, which something else holds until this returns; the GIL is held.
pub unsafe fn fill(
    array: &Bound<'_, PyAny>,
    values: impl ExactSizeIterator<Item = *mut ffi::PyObject>,
) -> PyResult<()> {
    let n = values.len();
    let address = address(array, n, true)?;
    for (i, value) in values.enumerate() {
        // SAFETY: row i < n of the array's `n` contiguous object pointers (checked), writable (asked for);
        // the array holds one reference to `value` in place of the one it held to the row's old object
        unsafe {
            let row = address.add(i);
            ffi::Py_INCREF(value);
            ffi::Py_XDECREF(std::mem::replace(&mut *row, value));
        }
    }
    Ok(())
}

/// Where the `n` object pointers of a one-dimensional, contiguous numpy array of objects are (`writable`:
/// refused for an array that is not).
fn address(
    array: &Bound<'_, PyAny>,
    n: usize,
    writable: bool,
) -> PyResult<*mut *mut ffi::PyObject> {
    let wrong = || PyValueError::new_err(format!("not a contiguous object array of {n} rows"));
    let mut view = std::mem::MaybeUninit::<ffi::Py_buffer>::uninit();
    // SAFETY: the GIL is held; a C-contiguous view (PyBUF_ND without strides) with its format is asked for,
    // and released below once its fields are read.
    if unsafe {
        ffi::PyObject_GetBuffer(
            array.as_ptr(),
            view.as_mut_ptr(),
            ffi::PyBUF_FORMAT | ffi::PyBUF_ND | if writable { ffi::PyBUF_WRITABLE } else { 0 },
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
    let address = view.buf as *mut *mut ffi::PyObject;
    // SAFETY: the view is released once; the array's data stays where it is while the caller holds the array
    // and the GIL (as with the address `__array_interface__` gave)
    unsafe { ffi::PyBuffer_Release(&mut view) };
    if !fits {
        return Err(wrong());
    }
    Ok(address)
}

/// Whether `value` (a pointer read from an object array) is exactly a `str`.
pub fn is_str(value: *mut ffi::PyObject) -> bool {
    // SAFETY: a non-null pointer of an object array is a live object
    !value.is_null() && unsafe { ffi::PyUnicode_CheckExact(value) } != 0
}
