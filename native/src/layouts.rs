//! The comparison of a step's identity columns with a kept layout's (streams/engine/layouts.py, `find`):
//! each column read in node order and compared value by value, without gathering it first.

use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;

use crate::dag::items;

/// One kept identity column: int32 (a layout's, when its values fit) or int64.
enum Kept {
    I32(PyBuffer<i32>),
    I64(PyBuffer<i64>),
}

/// Whether every column of a step (int64, per row) in node order (`order`: the rows) equals the layout's
/// kept column beside it (streams/engine/layouts.py, `find`), reading each column until one value differs;
/// None when a column is not a contiguous int64 (or int32, kept) array of the right length (the caller then
/// runs the definition).
#[pyfunction]
pub fn same_in_order(
    columns: Vec<Bound<'_, PyAny>>,
    order: Bound<'_, PyAny>,
    kept: Vec<Bound<'_, PyAny>>,
) -> PyResult<Option<bool>> {
    let Ok(order) = PyBuffer::<i64>::get(&order) else {
        return Ok(None);
    };
    if !order.is_c_contiguous() || columns.len() != kept.len() {
        return Ok(None);
    }
    let order = items(&order, "order")?;
    let mut held = Vec::with_capacity(columns.len());
    for (column, mine) in columns.iter().zip(&kept) {
        let Ok(column) = PyBuffer::<i64>::get(column) else {
            return Ok(None);
        };
        let mine = match PyBuffer::<i32>::get(mine) {
            Ok(b) => Kept::I32(b),
            Err(_) => match PyBuffer::<i64>::get(mine) {
                Ok(b) => Kept::I64(b),
                Err(_) => return Ok(None),
            },
        };
        let fits = match &mine {
            Kept::I32(b) => b.is_c_contiguous() && b.item_count() == order.len(),
            Kept::I64(b) => b.is_c_contiguous() && b.item_count() == order.len(),
        };
        if !column.is_c_contiguous() || !fits {
            return Ok(None);
        }
        held.push((column, mine));
    }
    for (column, mine) in &held {
        let column = items(column, "column")?;
        let row = |i: i64| usize::try_from(i).ok().and_then(|i| column.get(i).copied());
        let same = match mine {
            Kept::I32(b) => order
                .iter()
                .zip(items(b, "kept")?)
                .all(|(&i, &v)| row(i) == Some(i64::from(v))),
            Kept::I64(b) => order
                .iter()
                .zip(items(b, "kept")?)
                .all(|(&i, &v)| row(i) == Some(v)),
        };
        if !same {
            return Ok(Some(false));
        }
    }
    Ok(Some(true))
}
