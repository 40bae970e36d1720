//! A fast path for the record type and id (`audit/classify.py`, whose SQL is the definition).
//!
//! A value is answered here only when it is certainly a well-formed record under that definition: valid
//! UTF-8, one strict JSON object whose `v` is the integer 1, whose `type` is a string naming one of the
//! record types, whose `id` is a string and whose `body` is an object, each field once. Every other value
//! (malformed, lenient forms that DuckDB's `json_transform` would still cast, duplicate fields, escaped
//! surrogates) is deferred to the SQL, so the two cannot disagree on the rows answered here; the tests check
//! this on generated documents (`tests/unit/test_classify.py`).

use std::borrow::Cow;

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::columns::{Binaries, Binary};

/// The type code of a value left to the SQL definition.
const DEFER: u8 = u8::MAX;

#[derive(Deserialize)]
struct Head<'a> {
    v: u64,
    #[serde(borrow, rename = "type")]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    id: Cow<'a, str>,
    #[serde(borrow)]
    body: &'a RawValue,
}

/// Whether `text` has a `\u` escape of a UTF-16 surrogate (JSON parsers differ on unpaired ones).
fn escapes_a_surrogate(text: &str) -> bool {
    text.match_indices("\\u").any(|(at, _)| {
        let hex = &text.as_bytes()[at + 2..];
        hex.len() >= 2
            && matches!(hex[0], b'd' | b'D')
            && matches!(hex[1], b'8'..=b'9' | b'a'..=b'f' | b'A'..=b'F')
    })
}

/// (index of the record type in `types`, id) of a certainly well-formed record; None: ask the SQL.
fn classify<'a>(value: &'a [u8], types: &[String]) -> Option<(u8, Cow<'a, str>)> {
    let text = std::str::from_utf8(value).ok()?;
    // (serde would also fill the struct from an array [v, type, id, body]; the SQL wants an object)
    if !text
        .trim_start_matches([' ', '\t', '\n', '\r'])
        .starts_with('{')
        || escapes_a_surrogate(text)
    {
        return None;
    }
    let head: Head = serde_json::from_str(text).ok()?;
    if head.v != 1 || !head.body.get().starts_with('{') {
        return None;
    }
    let code = types.iter().position(|t| *t == head.kind)?;
    Some((u8::try_from(code).ok().filter(|c| *c != DEFER)?, head.id))
}

/// classify_values(values, n, types) -> (codes, id_offsets, id_data)
///
/// For the `n` values of an Arrow binary column ((offsets, data, validity or None, array offset)): one
/// byte per value, the index of its record type in `types`, or 255 where the SQL definition must decide;
/// and the ids as an Arrow string column's int32 offsets and data (empty where deferred). Runs without
/// the GIL.
#[pyfunction]
pub fn classify_values<'py>(
    py: Python<'py>,
    values: Binary,
    n: usize,
    types: Vec<String>,
) -> PyResult<(
    Bound<'py, PyBytes>,
    Bound<'py, PyBytes>,
    Bound<'py, PyBytes>,
)> {
    let values = Binaries::from_py(&values, n, "values")?;
    let (codes, offsets, data) = py
        .detach(|| {
            let (mut codes, mut offsets, mut data) = (
                Vec::with_capacity(n),
                Vec::with_capacity(4 * (n + 1)),
                Vec::new(),
            );
            offsets.extend_from_slice(&0i32.to_le_bytes());
            for i in 0..n {
                match values.get(i)?.and_then(|value| classify(value, &types)) {
                    Some((code, id)) => {
                        codes.push(code);
                        data.extend_from_slice(id.as_bytes());
                    }
                    None => codes.push(DEFER),
                }
                let end = i32::try_from(data.len())
                    .map_err(|_| "ids longer than 2 GiB in one batch".to_string())?;
                offsets.extend_from_slice(&end.to_le_bytes());
            }
            Ok::<_, String>((codes, offsets, data))
        })
        .map_err(pyo3::exceptions::PyValueError::new_err)?;
    Ok((
        PyBytes::new(py, &codes),
        PyBytes::new(py, &offsets),
        PyBytes::new(py, &data),
    ))
}
