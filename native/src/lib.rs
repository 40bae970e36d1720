//! driftlog's native core, over Arrow column buffers and without the GIL: the audit hash chain
//! (`chain`), a fast path for the record classification (`classify`), the longest-path evaluation and
//! critical path of a step's dependency graph (`dag`), the telemetry decoder (`decode`), grouped medians
//! (`median`), the canonical order of an epoch's samples (`sort`), the change detector's tests
//! (`change`) and the C library's transcendental functions over arrays (`libm`). Each has a Python
//! definition it equals bit for bit, which runs without the extension (or with DRIFTLOG_NATIVE=0).

use pyo3::prelude::*;

mod buffer;
mod chain;
mod change;
mod classify;
mod codes;
mod columns;
mod dag;
mod decode;
mod draft;
mod epochs;
mod layouts;
mod libm;
mod median;
mod numbers;
mod objects;
mod peers;
mod roles;
mod sort;
mod whatif;

#[pymodule]
fn driftlog_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(chain::chain_links, m)?)?;
    m.add_function(wrap_pyfunction!(classify::classify_values, m)?)?;
    m.add_function(wrap_pyfunction!(dag::dag_ends, m)?)?;
    m.add_class::<decode::TelemetryDecoder>()?;
    m.add_function(wrap_pyfunction!(dag::dag_masked_step_ends, m)?)?;
    m.add_function(wrap_pyfunction!(dag::dag_valued_step_ends, m)?)?;
    m.add_function(wrap_pyfunction!(median::grouped_medians, m)?)?;
    m.add_function(wrap_pyfunction!(median::medians_excluding_each_row, m)?)?;
    m.add_function(wrap_pyfunction!(dag::dag_critical_path, m)?)?;
    m.add_function(wrap_pyfunction!(dag::rank_last_ends, m)?)?;
    m.add_function(wrap_pyfunction!(sort::canonical_order, m)?)?;
    m.add_function(wrap_pyfunction!(sort::canonical_gather, m)?)?;
    m.add_function(wrap_pyfunction!(epochs::epoch_runs, m)?)?;
    m.add_function(wrap_pyfunction!(objects::strings_at, m)?)?;
    m.add_function(wrap_pyfunction!(codes::codes_of, m)?)?;
    m.add_function(wrap_pyfunction!(codes::same_str, m)?)?;
    m.add_class::<dag::DagLayout>()?;
    m.add_function(wrap_pyfunction!(dag::dag_layout, m)?)?;
    m.add_function(wrap_pyfunction!(change::change_alarms, m)?)?;
    m.add_function(wrap_pyfunction!(change::change_round, m)?)?;
    m.add_function(wrap_pyfunction!(libm::c_math, m)?)?;
    m.add_function(wrap_pyfunction!(draft::step_draft, m)?)?;
    m.add_function(wrap_pyfunction!(draft::step_tolerance, m)?)?;
    m.add_function(wrap_pyfunction!(draft::step_plan_check, m)?)?;
    m.add_function(wrap_pyfunction!(layouts::same_in_order, m)?)?;
    m.add_function(wrap_pyfunction!(layouts::sorted_rows, m)?)?;
    m.add_function(wrap_pyfunction!(layouts::step_rows, m)?)?;
    m.add_function(wrap_pyfunction!(whatif::dag_keyed_step_ends, m)?)?;
    m.add_function(wrap_pyfunction!(whatif::unit_deviations, m)?)?;
    m.add_function(wrap_pyfunction!(whatif::peer_medians_excluding, m)?)?;
    m.add_function(wrap_pyfunction!(whatif::window_z, m)?)?;
    m.add_class::<peers::PeerLayout>()?;
    m.add_function(wrap_pyfunction!(peers::peer_layout, m)?)?;
    m.add_class::<roles::RoleLayout>()?;
    m.add_function(wrap_pyfunction!(roles::role_layout, m)?)?;
    m.add("GROUPED_MEDIANS_READ_INT32", true)?; // (grouped_medians: int32 orders too)
    Ok(())
}
