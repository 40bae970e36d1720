//! driftlog's native core, over Arrow column buffers and without the GIL: the audit hash chain
//! (`chain`) and a fast path for the record classification (`classify`).

use pyo3::prelude::*;

mod chain;
mod classify;
mod columns;

#[pymodule]
fn driftlog_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(chain::chain_links, m)?)?;
    m.add_function(wrap_pyfunction!(classify::classify_values, m)?)?;
    Ok(())
}
