//! driftlog's native core: the audit hash chain (see `audit/chain.py`, the reference implementation and
//! the definition) computed over Arrow column buffers, without the GIL.
//!
//! `link(prev, record) = SHA-256(prev ‖ partition ‖ offset ‖ timestamp ‖ len(topic) ‖ topic ‖ len(key) ‖ key
//! ‖ len(value) ‖ value)`, integers big-endian and fixed-width (i32, i64, i64, i32 lengths), a missing key
//! has length -1. The chain is sequential, so this is one tight loop; it is native because in Python the
//! per-call overhead of hashlib costs several times the hashing itself.

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use sha2::{Digest, Sha256};

const LINK: usize = 32;

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
struct Int64s<'a> {
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

    fn from_py(column: &'a Fixed, n: usize, name: &str) -> PyResult<Self> {
        Self::new(contiguous(&column.0)?, column.1, n, name).map_err(PyValueError::new_err)
    }

    fn get(&self, i: usize) -> i64 {
        let start = (self.at + i) * 8;
        i64::from_le_bytes(self.data[start..start + 8].try_into().expect("8 bytes"))
    }
}

/// An Arrow binary column (int32 offsets): offsets, data, validity bitmap (None: no nulls), array offset.
struct Binaries<'a> {
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

    fn from_py(column: &'a Binary, n: usize, name: &'static str) -> PyResult<Self> {
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

    fn get(&self, i: usize) -> Result<Option<&'a [u8]>, String> {
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

fn length(bytes: &[u8]) -> Result<[u8; 4], String> {
    i32::try_from(bytes.len())
        .map(i32::to_be_bytes)
        .map_err(|_| format!("{} bytes is too long for a chain link", bytes.len()))
}

/// The columns of `n` consecutive records of one partition.
struct Records<'a> {
    n: usize,
    offsets: Int64s<'a>,
    timestamps: Int64s<'a>,
    keys: Binaries<'a>,
    values: Binaries<'a>,
}

/// The links after `prev` of `records`, 32 bytes each.
fn links(
    mut prev: [u8; LINK],
    topic: &[u8],
    partition: i32,
    records: &Records,
) -> Result<Vec<u8>, String> {
    let Records {
        n,
        offsets,
        timestamps,
        keys,
        values,
    } = records;
    let (n, topic_len) = (*n, length(topic)?);
    let mut out = Vec::with_capacity(n.checked_mul(LINK).ok_or("too many records")?);
    for i in 0..n {
        let mut h = Sha256::new();
        h.update(prev);
        h.update(partition.to_be_bytes());
        h.update(offsets.get(i).to_be_bytes());
        h.update(timestamps.get(i).to_be_bytes());
        h.update(topic_len);
        h.update(topic);
        match keys.get(i)? {
            None => h.update((-1i32).to_be_bytes()),
            Some(key) => {
                h.update(length(key)?);
                h.update(key);
            }
        }
        let value = values
            .get(i)?
            .ok_or_else(|| format!("values: null at row {i}"))?;
        h.update(length(value)?);
        h.update(value);
        prev = h.finalize().into();
        out.extend_from_slice(&prev);
    }
    Ok(out)
}

type Fixed = (PyBuffer<u8>, usize);
type Binary = (PyBuffer<u8>, PyBuffer<u8>, Option<PyBuffer<u8>>, usize);

/// chain_links(prev, topic, partition, n, offsets, timestamps, keys, values) -> bytes
///
/// The hash-chain links after `prev` (32 bytes) of `n` consecutive records of one partition, concatenated
/// (32 bytes each). `offsets` and `timestamps` are (data buffer, array offset) of Arrow int64 arrays without
/// nulls; `keys` and `values` are (offsets buffer, data buffer, validity buffer or None, array offset) of
/// Arrow binary arrays (values without nulls). Hashing runs without the GIL. Malformed input raises
/// ValueError.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn chain_links<'py>(
    py: Python<'py>,
    prev: &[u8],
    topic: &[u8],
    partition: i32,
    n: usize,
    offsets: Fixed,
    timestamps: Fixed,
    keys: Binary,
    values: Binary,
) -> PyResult<Bound<'py, PyBytes>> {
    let prev: [u8; LINK] = prev.try_into().map_err(|_| {
        PyValueError::new_err(format!("prev must be {LINK} bytes, not {}", prev.len()))
    })?;
    let offsets = Int64s::from_py(&offsets, n, "offsets")?;
    let timestamps = Int64s::from_py(&timestamps, n, "timestamps")?;
    let keys = Binaries::from_py(&keys, n, "keys")?;
    let values = Binaries::from_py(&values, n, "values")?;
    let records = Records {
        n,
        offsets,
        timestamps,
        keys,
        values,
    };
    let out = py
        .detach(|| links(prev, topic, partition, &records))
        .map_err(PyValueError::new_err)?;
    Ok(PyBytes::new(py, &out))
}

#[pymodule]
fn driftlog_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(chain_links, m)?)?;
    Ok(())
}
