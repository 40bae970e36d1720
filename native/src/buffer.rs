//! A vector of plain numbers handed to Python without a copy: numpy reads it through the buffer protocol
//! (`numpy.frombuffer`), writable, as it would read a bytearray made of it (one copy of every column less).

use std::ffi::{c_int, c_void};

use pyo3::ffi;
use pyo3::prelude::*;

/// The vectors a buffer may own: plain numbers (no padding), so their bytes are the values, little-endian.
pub enum Owned {
    F64(Vec<f64>),
    I64(Vec<i64>),
    U8(Vec<u8>),
    U32(Vec<u32>),
}

/// Bytes owned by Rust, read and written by Python only.
#[pyclass(frozen, module = "driftlog_native")]
pub struct Buffer {
    // where the bytes are, taken from the vector while it was ours to write: Rust never touches them after
    at: usize,
    len: usize,
    _owned: Owned, // keeps them alive (a vector's values do not move when it does)
}

impl Buffer {
    pub fn new(mut owned: Owned) -> Self {
        fn place<T>(v: &mut [T]) -> (usize, usize) {
            (v.as_mut_ptr() as usize, std::mem::size_of_val(v))
        }
        let (at, len) = match &mut owned {
            Owned::F64(v) => place(v),
            Owned::I64(v) => place(v),
            Owned::U8(v) => place(v),
            Owned::U32(v) => place(v),
        };
        Self {
            at,
            len,
            _owned: owned,
        }
    }
}

#[pymethods]
impl Buffer {
    /// # Safety
    /// Called by Python with a view to fill; the view holds a reference to the buffer, so the bytes live
    /// while it does.
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        let (at, len) = (slf.get().at, slf.get().len);
        // SAFETY: `at` and `len` describe bytes this object owns; PyBuffer_FillInfo takes a reference to it
        let filled = unsafe {
            ffi::PyBuffer_FillInfo(
                view,
                slf.as_ptr(),
                at as *mut c_void,
                len as ffi::Py_ssize_t,
                0,
                flags,
            )
        };
        if filled == -1 {
            return Err(PyErr::fetch(slf.py()));
        }
        Ok(())
    }
}
