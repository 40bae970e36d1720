//! The audit hash chain (see `audit/chain.py`, the reference implementation and the definition).
//!
//! `link(prev, record) = SHA-256(prev ‖ partition ‖ offset ‖ timestamp ‖ len(topic) ‖ topic ‖ len(key) ‖ key
//! ‖ len(value) ‖ value)`, integers big-endian and fixed-width (i32, i64, i64, i32 lengths), a missing key
//! has length -1. The chain is sequential, so this is one tight loop; it is native because in Python the
//! per-call overhead of hashlib costs several times the hashing itself.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use sha2::{Digest, Sha256};

use crate::columns::{Binaries, Binary, Fixed, Int64s};

const LINK: usize = 32;

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

/// chain_links(prev, topic, partition, n, offsets, timestamps, keys, values) -> bytes
///
/// The hash-chain links after `prev` (32 bytes) of `n` consecutive records of one partition, concatenated
/// (32 bytes each). `offsets` and `timestamps` are (data buffer, array offset) of Arrow int64 arrays without
/// nulls; `keys` and `values` are (offsets buffer, data buffer, validity buffer or None, array offset) of
/// Arrow binary arrays (values without nulls). Hashing runs without the GIL. Malformed input raises
/// ValueError.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn chain_links<'py>(
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
