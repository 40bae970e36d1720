//! Arrow columns as the Python side hands them over: buffers (any object with the buffer protocol) and
//! an array offset, checked before use so that malformed input is a ValueError, never a bad read.

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// The bytes behind a Python buffer (a `pyarrow.Buffer`, `bytes`...). The `PyBuffer` keeps its exporter
/// alive and its memory in place for as long as the slice is used.
fn contiguous(buf: &PyBuffer<u8>) -> PyResult<&[u8]> {
    if !buf.is_c_contiguous() {
        return Err(PyValueError::new_err("buffer is not contiguous"));
    }
    // SAFETY: a C-contiguous buffer of `len_bytes` bytes at `buf_ptr`, held by `buf` for the slice's lifetime.
    Ok(unsafe { std::slice::from_raw_parts(buf.buf_ptr() as *const u8, buf.len_bytes()) })
}

/// An Arrow int64 column without nulls: its data buffer and the array's offset into it.
pub struct Int64s<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Int64s<'a> {
    fn new(data: &'a [u8], at: usize, n: usize, name: &str) -> Result<Self, String> {
        if at
            .checked_add(n)
            .and_then(|end| end.checked_mul(8))
            .is_none_or(|need| data.len() < need)
        {
            return Err(format!(
                "{name}: data buffer holds fewer than {n} int64 values after offset {at}"
            ));
        }
        Ok(Self { data, at })
    }

    pub fn from_py(column: &'a Fixed, n: usize, name: &str) -> PyResult<Self> {
        Self::new(contiguous(&column.0)?, column.1, n, name).map_err(PyValueError::new_err)
    }

    pub fn get(&self, i: usize) -> i64 {
        let start = (self.at + i) * 8;
        i64::from_le_bytes(self.data[start..start + 8].try_into().expect("8 bytes"))
    }
}

/// An Arrow binary column (int32 offsets): offsets, data, validity bitmap (None: no nulls), array offset.
pub struct Binaries<'a> {
    offsets: &'a [u8],
    data: &'a [u8],
    validity: Option<&'a [u8]>,
    at: usize,
    name: &'static str,
}

impl<'a> Binaries<'a> {
    fn new(
        offsets: &'a [u8],
        data: &'a [u8],
        validity: Option<&'a [u8]>,
        at: usize,
        n: usize,
        name: &'static str,
    ) -> Result<Self, String> {
        let need = at
            .checked_add(n)
            .and_then(|end| end.checked_add(1))
            .and_then(|count| count.checked_mul(4));
        if need.is_none_or(|need| offsets.len() < need) {
            return Err(format!(
                "{name}: offsets buffer holds fewer than {} offsets",
                at + n + 1
            ));
        }
        if validity.is_some_and(|v| v.len().saturating_mul(8) < at + n) {
            return Err(format!(
                "{name}: validity bitmap shorter than {} bits",
                at + n
            ));
        }
        Ok(Self {
            offsets,
            data,
            validity,
            at,
            name,
        })
    }

    pub fn from_py(column: &'a Binary, n: usize, name: &'static str) -> PyResult<Self> {
        let (offsets, data, validity, at) = column;
        let validity = validity.as_ref().map(contiguous).transpose()?;
        Self::new(
            contiguous(offsets)?,
            contiguous(data)?,
            validity,
            *at,
            n,
            name,
        )
        .map_err(PyValueError::new_err)
    }

    fn offset(&self, j: usize) -> i32 {
        i32::from_le_bytes(self.offsets[j * 4..j * 4 + 4].try_into().expect("4 bytes"))
    }

    pub fn get(&self, i: usize) -> Result<Option<&'a [u8]>, String> {
        let j = self.at + i;
        if let Some(bits) = self.validity {
            if bits[j / 8] >> (j % 8) & 1 == 0 {
                return Ok(None);
            }
        }
        let (start, end) = (self.offset(j), self.offset(j + 1));
        if start < 0 || end < start {
            return Err(format!(
                "{}: bad offsets {start}..{end} at row {i}",
                self.name
            ));
        }
        self.data
            .get(start as usize..end as usize)
            .map(Some)
            .ok_or_else(|| {
                format!(
                    "{}: offsets {start}..{end} at row {i} outside the data buffer",
                    self.name
                )
            })
    }
}

pub type Fixed = (PyBuffer<u8>, usize);
pub type Binary = (PyBuffer<u8>, PyBuffer<u8>, Option<PyBuffer<u8>>, usize);
