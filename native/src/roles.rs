//! A step structure's what-if roles, read and checked once (streams/engine/whatif.py `Roles`): each node's
//! replica peers' median and its stage's and link's peers' medians in one call, and the ranks and
//! replicas by their time above their peers in another. The same values as the definitions, bit for bit.

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::dag::items;
use crate::median::excluding_each_row;
use crate::peers::{statistic, writable, write, Groups};

/// `whatif.PeerCells` with each node's group: the cells' groups of nodes (`groups`, cell `cell[c]` of a
/// `rows` x `cols` table), and per node in the cells (`at`) its row (its group) and column (its key).
struct Cells {
    groups: Groups,
    cell: Vec<usize>,
    rows: usize,
    cols: usize,
    at: Vec<(usize, usize, usize)>,
    how: u8,
}

/// What `role_layout` reads of a `PeerCells` (int64 arrays): the nodes by cell (`sel[cells.order]`) and each
/// cell's count, its place in the table (`cells.keys`), the table's shape, each node in `sel` with its group and
/// key, and the statistic.
type CellArgs = (
    PyBuffer<i64>,
    PyBuffer<i64>,
    PyBuffer<i64>,
    (usize, usize),
    [PyBuffer<i64>; 3],
    u8,
);

/// Each value as an index below `bound` (None: one is not).
fn indices(values: &[i64], bound: usize) -> Option<Vec<usize>> {
    values
        .iter()
        .map(|&i| usize::try_from(i).ok().filter(|&i| i < bound))
        .collect()
}

/// Three int64 columns of one length, as rows of indices below `bounds`.
fn rows3(columns: &[PyBuffer<i64>; 3], bounds: [usize; 3]) -> PyResult<Vec<(usize, usize, usize)>> {
    let bad = || PyValueError::new_err("columns: out of range, or of other lengths");
    let [a, b, c] = [0, 1, 2].map(|k| items(&columns[k], "columns"));
    let (a, b, c) = (a?, b?, c?);
    let (a, b, c) = (
        indices(a, bounds[0]),
        indices(b, bounds[1]),
        indices(c, bounds[2]),
    );
    let (Some(a), Some(b), Some(c)) = (a, b, c) else {
        return Err(bad());
    };
    if a.len() != b.len() || a.len() != c.len() {
        return Err(bad());
    }
    Ok((0..a.len()).map(|i| (a[i], b[i], c[i])).collect())
}

impl Cells {
    fn of((pos, counts, cell, (rows, cols), at, how): CellArgs, n: usize) -> PyResult<Self> {
        let bad = || PyValueError::new_err("cells: out of range");
        let (pos, counts) = (items(&pos, "pos")?, items(&counts, "counts")?);
        let cell = indices(items(&cell, "cell")?, rows * cols).ok_or_else(bad)?;
        let at = rows3(&at, [n, rows, cols])?;
        let groups = Groups::flat(pos, counts, n)?;
        if cell.len() != counts.len() {
            return Err(bad());
        }
        Ok(Cells {
            groups,
            cell,
            rows,
            cols,
            at,
            how,
        })
    }

    /// `whatif._peer_medians_excluding` into `out` (NaN: left as it is), None where a statistic is refused.
    fn excluding(&self, v: &[f64], out: &mut [f64], scratch: &mut Vec<f64>) -> Option<()> {
        if self.at.is_empty() {
            return Some(());
        }
        let mut per = vec![f64::NAN; self.rows * self.cols];
        for (group, &c) in self.groups.each().zip(&self.cell) {
            per[c] = statistic(v, group.iter().copied(), self.how, scratch)?;
        }
        let table = excluding_each_row(&per, self.rows);
        for &(i, r, k) in &self.at {
            out[i] = table[r * self.cols + k];
        }
        Some(())
    }
}

/// Per span, its position and its rank and replica; the replica peer groups (`position`, their statistic
/// `how`), and the stage and link cells.
#[pyclass(frozen, module = "driftlog_native")]
pub struct RoleLayout {
    n: usize,
    spans: Vec<(usize, usize, usize)>,
    span: Vec<bool>,
    position: Groups,
    how: u8,
    stages: Cells,
    links: Cells,
}

/// The layout of `n` nodes' roles: the spans (`(node, rank, replica)`; `ranks`: above every node's rank),
/// the replica peer groups (each `counts[g]` nodes of `pos`, their statistic `how`), and the stage and link
/// cells, checked.
#[pyfunction]
pub fn role_layout(
    n: usize,
    ranks: usize,
    spans: [PyBuffer<i64>; 3],
    position: (PyBuffer<i64>, PyBuffer<i64>, u8),
    stages: CellArgs,
    links: CellArgs,
) -> PyResult<RoleLayout> {
    let spans = rows3(&spans, [n, ranks, usize::MAX])?;
    let mut span = vec![false; n];
    for &(i, _, _) in &spans {
        span[i] = true;
    }
    let (pos, counts) = (items(&position.0, "pos")?, items(&position.1, "counts")?);
    Ok(RoleLayout {
        n,
        spans,
        span,
        position: Groups::flat(pos, counts, n)?,
        how: position.2,
        stages: Cells::of(stages, n)?,
        links: Cells::of(links, n)?,
    })
}

/// numpy's `maximum(0.0, x)`: `x` when it is NaN or not below 0.0 (of 0.0 and -0.0: the second), else 0.0.
fn above_zero(x: f64) -> f64 {
    if 0.0 > x {
        0.0
    } else {
        x
    }
}

/// The ids with a span, by decreasing `excess` (ties by id: numpy's stable `argsort` of `-excess`); None
/// where one is NaN (`sorted`'s order among NaN: the definition's).
fn by_excess(count: &[usize], excess: &[f64]) -> Option<Vec<usize>> {
    let mut ids: Vec<usize> = (0..count.len()).filter(|&i| count[i] > 0).collect();
    if ids.iter().any(|&i| excess[i].is_nan()) {
        return None;
    }
    ids.sort_by(|&a, &b| excess[b].partial_cmp(&excess[a]).expect("no NaN"));
    Some(ids)
}

#[pymethods]
impl RoleLayout {
    /// Per node (into `peer_med`): its replica peers' statistic at a span, else its value; into `by_stage`
    /// and `by_link` (each filled with NaN), at the cells' nodes, the median over the other stages or links
    /// of each one's median for the node's key. False where a statistic is refused (-0.0, NaNs of different
    /// bits): the caller computes the definitions.
    fn peers(
        &self,
        py: Python<'_>,
        values: PyBuffer<f64>,
        peer_med: PyBuffer<f64>,
        by_stage: PyBuffer<f64>,
        by_link: PyBuffer<f64>,
    ) -> PyResult<bool> {
        let v = items(&values, "values")?;
        if v.len() != self.n {
            return Err(PyValueError::new_err("values: one per node"));
        }
        for out in [&peer_med, &by_stage, &by_link] {
            writable(out, self.n)?;
        }
        let (stage, link) = (items(&by_stage, "by_stage")?, items(&by_link, "by_link")?);
        let found = py.detach(|| {
            let mut scratch = Vec::new();
            let mut med = v.to_vec();
            for group in self.position.each() {
                let m = statistic(v, group.iter().copied(), self.how, &mut scratch)?;
                for &i in group.iter().filter(|&&i| self.span[i]) {
                    med[i] = m;
                }
            }
            let (mut s, mut l) = (stage.to_vec(), link.to_vec());
            self.stages.excluding(v, &mut s, &mut scratch)?;
            self.links.excluding(v, &mut l, &mut scratch)?;
            Some((med, s, l))
        });
        let Some((med, s, l)) = found else {
            return Ok(false);
        };
        for (out, rows) in [(&peer_med, med), (&by_stage, s), (&by_link, l)] {
            write(out, &rows)?;
        }
        Ok(true)
    }

    /// The ranks and the replicas by their spans' time above their peers (`maximum(0, values - peer_med)`
    /// summed per rank or replica in span order, as numpy's `bincount` sums it), decreasing, ties by id;
    /// None where an excess is NaN.
    fn ranked(
        &self,
        py: Python<'_>,
        values: PyBuffer<f64>,
        peer_med: PyBuffer<f64>,
    ) -> PyResult<Option<(Vec<usize>, Vec<usize>)>> {
        let (v, m) = (items(&values, "values")?, items(&peer_med, "peer_med")?);
        if v.len() != self.n || m.len() != self.n {
            return Err(PyValueError::new_err("values, peer_med: one per node"));
        }
        Ok(py.detach(|| {
            let bins = |of: fn(&(usize, usize, usize)) -> usize| {
                let size = self.spans.iter().map(of).max().map_or(0, |b| b + 1);
                let (mut count, mut total) = (vec![0usize; size], vec![0.0; size]);
                for span in &self.spans {
                    let b = of(span);
                    count[b] += 1;
                    total[b] += above_zero(v[span.0] - m[span.0]);
                }
                by_excess(&count, &total)
            };
            Some((bins(|s| s.1)?, bins(|s| s.2)?))
        }))
    }
}
