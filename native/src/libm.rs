//! `streams.fpmath` over arrays: the C library's `log`, `exp`, `sin`, `asin` and `pow`, an element at a
//! time. Rust's f64 methods call the platform's libm, the functions Python's `math` calls, so each value
//! equals the Python definition's bit for bit (`math` element by element), and neither depends on the CPU's
//! vector extensions, as numpy's own loops do (AVX-512 gives other last bits).

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::dag::{items, items_mut, overlap, span};

/// `out[i] = name(x[i])`, or `pow(x[i], y[i])` for `power` (`y` is read by `power` alone; the other
/// functions take `x` again). The three arrays have one length; `out` shares no memory with the others.
#[pyfunction]
pub fn c_math(
    name: &str,
    x: PyBuffer<f64>,
    y: PyBuffer<f64>,
    mut out: PyBuffer<f64>,
) -> PyResult<()> {
    if overlap(&[span(&out), span(&x), span(&y)], 1) {
        return Err(PyValueError::new_err(
            "c_math: out shares memory with an input",
        ));
    }
    let (x, y) = (items(&x, "x")?, items(&y, "y")?);
    let out = items_mut(&mut out, "out")?;
    if x.len() != out.len() || y.len() != out.len() {
        return Err(PyValueError::new_err(
            "c_math: x, y and out differ in length",
        ));
    }
    let f: fn(f64, f64) -> f64 = match name {
        "log" => |a, _| a.ln(),
        "exp" => |a, _| a.exp(),
        "sin" => |a, _| a.sin(),
        "arcsin" => |a, _| a.asin(),
        "power" => f64::powf,
        _ => {
            return Err(PyValueError::new_err(format!(
                "c_math: no function {name:?}"
            )))
        }
    };
    for ((o, &a), &b) in out.iter_mut().zip(x).zip(y) {
        *o = f(a, b);
    }
    Ok(())
}
