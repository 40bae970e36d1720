//! driftlog's native core, over Arrow column buffers and without the GIL: the audit hash chain
//! (`chain`), a fast path for the record classification (`classify`) and the longest-path evaluation of a
//! step's dependency graph (`dag`).

use pyo3::prelude::*;

mod chain;
mod classify;
mod columns;
mod dag;
mod sort;

#[pymodule]
fn driftlog_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(chain::chain_links, m)?)?;
    m.add_function(wrap_pyfunction!(classify::classify_values, m)?)?;
    m.add_function(wrap_pyfunction!(dag::dag_ends, m)?)?;
    m.add_function(wrap_pyfunction!(sort::canonical_order, m)?)?;
    Ok(())
}
