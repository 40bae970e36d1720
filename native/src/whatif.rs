//! The what-if's healed step ends (streams/engine/whatif.py, `_healed_step_ends`): each candidate heals
//! the nodes whose key column (rank, replica, stage, link or op) holds its value, or every node, to one
//! of a few rows of durations. The candidates' nodes (in node order, as the definition's masks give them)
//! and values are written here from the columns, not one numpy mask per candidate, and evaluated as
//! `dag_valued_step_ends` evaluates them: the same step ends, bit for bit.

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::dag::{healed_step_ends, items, to_starts, DagLayout, Healed};
use crate::median::{excluding_each_row, medians_of};

/// A key column as the engine keeps it: int32 (compact) or int64.
pub(crate) enum Key {
    Narrow(PyBuffer<i32>),
    Wide(PyBuffer<i64>),
}

impl Key {
    pub(crate) fn of(column: &Bound<'_, PyAny>) -> PyResult<Self> {
        match PyBuffer::<i32>::get(column) {
            Ok(b) => Ok(Key::Narrow(b)),
            Err(_) => Ok(Key::Wide(PyBuffer::<i64>::get(column)?)),
        }
    }

    pub(crate) fn slice(&self) -> PyResult<Slice<'_>> {
        Ok(match self {
            Key::Narrow(b) => Slice::Narrow(items(b, "indices")?),
            Key::Wide(b) => Slice::Wide(items(b, "indices")?),
        })
    }

    fn len(&self) -> usize {
        match self {
            Key::Narrow(b) => b.item_count(),
            Key::Wide(b) => b.item_count(),
        }
    }
}

/// A key column's values.
#[derive(Clone, Copy)]
pub(crate) enum Slice<'a> {
    Narrow(&'a [i32]),
    Wide(&'a [i64]),
}

impl Slice<'_> {
    pub(crate) fn len(&self) -> usize {
        match self {
            Slice::Narrow(s) => s.len(),
            Slice::Wide(s) => s.len(),
        }
    }

    /// The `i`-th value.
    pub(crate) fn get(&self, i: usize) -> i64 {
        match self {
            Slice::Narrow(s) => i64::from(s[i]),
            Slice::Wide(s) => s[i],
        }
    }

    /// The `i`-th value as an index below `bound` (None: out of range).
    pub(crate) fn index(&self, i: usize, bound: usize) -> Option<usize> {
        usize::try_from(self.get(i)).ok().filter(|&v| v < bound)
    }
}

/// Per candidate `c`: the step end with every node at `base` except those whose `keys[key_of[c]]` is
/// `value_of[c]` (every node when `key_of[c]` is -1), each at its `alts[alt_of[c]]` value (the definition:
/// `dag_valued_step_ends` of the masks `keys[key_of[c]] == value_of[c]`, values `alts[alt_of[c]][mask]`).
/// Keys: int32 or int64 columns, one value per node.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn dag_keyed_step_ends(
    py: Python<'_>,
    layout: &Bound<'_, DagLayout>,
    floor: PyBuffer<f64>,
    base: PyBuffer<f64>,
    alts: Vec<PyBuffer<f64>>,
    keys: Vec<Bound<'_, PyAny>>,
    alt_of: PyBuffer<i64>,
    key_of: PyBuffer<i64>,
    value_of: PyBuffer<i64>,
    out: PyBuffer<f64>,
) -> PyResult<()> {
    let base = items(&base, "base")?;
    let n = base.len();
    let alts = alts
        .iter()
        .map(|a| items(a, "alts"))
        .collect::<PyResult<Vec<_>>>()?;
    let keys = keys.iter().map(Key::of).collect::<PyResult<Vec<_>>>()?;
    let (alt_of, key_of) = (items(&alt_of, "alt_of")?, items(&key_of, "key_of")?);
    let value_of = items(&value_of, "value_of")?;
    let rows = alt_of.len();
    if alts.iter().any(|a| a.len() != n) || keys.iter().any(|k| k.len() != n) {
        return Err(PyValueError::new_err("alts, keys: one value per node"));
    }
    if key_of.len() != rows
        || value_of.len() != rows
        || alt_of
            .iter()
            .any(|&a| !usize::try_from(a).is_ok_and(|a| a < alts.len()))
        || key_of.iter().any(|&k| k < -1 || k >= keys.len() as i64)
    {
        return Err(PyValueError::new_err(
            "alt_of, key_of, value_of: one per candidate, in range",
        ));
    }
    let columns = keys.iter().map(Key::slice).collect::<PyResult<Vec<_>>>()?;
    let mut wanted: Vec<Vec<(i64, usize)>> = vec![Vec::new(); keys.len()];
    let mut everywhere = Vec::new();
    for c in 0..rows {
        match usize::try_from(key_of[c]) {
            Ok(k) => wanted[k].push((value_of[c], c)),
            Err(_) => everywhere.push(c),
        }
    }
    let keyed = Keyed {
        n,
        columns,
        wanted,
        everywhere,
        alts,
        alt_of,
        key_of,
        value_of,
    };
    healed_step_ends(py, layout, &floor, base, &keyed, &out)
}

/// A key column and the candidates that want each of its values (`(value, candidate)`, sorted), found
/// through a table of the wanted values' range when it is no wider than the column (bounded memory), else
/// by a binary search.
struct Wanted<'a> {
    column: Slice<'a>,
    wanted: Vec<(i64, usize)>,
    table: Option<(i64, Vec<usize>)>, // the lowest value wanted; per value from it, where its candidates begin
}

impl<'a> Wanted<'a> {
    fn of(column: Slice<'a>, mut wanted: Vec<(i64, usize)>) -> Self {
        wanted.sort_unstable();
        let mut table = None;
        if let (Some(&(lo, _)), Some(&(hi, _))) = (wanted.first(), wanted.last()) {
            if hi.abs_diff(lo) < column.len() as u64 {
                let mut first = vec![0usize; hi.abs_diff(lo) as usize + 2];
                for &(v, _) in &wanted {
                    first[(v - lo) as usize + 1] += 1;
                }
                for k in 1..first.len() {
                    first[k] += first[k - 1];
                }
                table = Some((lo, first));
            }
        }
        Wanted {
            column,
            wanted,
            table,
        }
    }

    /// The candidates that want the value `k`.
    fn of_value(&self, k: i64) -> &[(i64, usize)] {
        match &self.table {
            Some((lo, first)) => match usize::try_from(k.wrapping_sub(*lo)) {
                Ok(at) if k >= *lo && at + 1 < first.len() => {
                    &self.wanted[first[at]..first[at + 1]]
                }
                _ => &[],
            },
            None => {
                let from = self.wanted.partition_point(|w| w.0 < k);
                let to = self.wanted.partition_point(|w| w.0 <= k);
                &self.wanted[from..to]
            }
        }
    }

    /// Each wanting candidate's nodes appended to its list (`nodes[c - first]`), in node order.
    fn nodes(&self, first: usize, nodes: &mut [Vec<u32>]) {
        match self.column {
            Slice::Narrow(s) => self.scan(s, first, nodes),
            Slice::Wide(s) => self.scan(s, first, nodes),
        }
    }

    fn scan<T: Copy + Into<i64>>(&self, column: &[T], first: usize, nodes: &mut [Vec<u32>]) {
        for (i, &k) in column.iter().enumerate() {
            for &(_, c) in self.of_value(k.into()) {
                nodes[c - first].push(i as u32);
            }
        }
    }
}

/// The candidates' rows (`Healed`): each node's candidates found from its keys as the walk reaches it,
/// without a list of nodes per candidate (`listed` writes one for the few rows evaluated again).
struct Keyed<'a> {
    n: usize,
    columns: Vec<Slice<'a>>,
    wanted: Vec<Vec<(i64, usize)>>, // per key column, the candidates that want a value of it: (value, candidate)
    everywhere: Vec<usize>,         // the candidates that heal every node
    alts: Vec<&'a [f64]>,
    alt_of: &'a [i64],
    key_of: &'a [i64],
    value_of: &'a [i64],
}

impl Keyed<'_> {
    fn value(&self, c: usize, i: usize) -> f64 {
        self.alts[self.alt_of[c] as usize][i]
    }
}

impl Healed for Keyed<'_> {
    fn rows(&self) -> usize {
        self.alt_of.len()
    }

    /// A counting sort by place of the block's healed values (as `Listed`'s): each candidate's nodes found
    /// first, a key column at a time in node order (read one after another, not in the walk's order all
    /// over them); a row heals a node once, so the order of a place's values among rows is free.
    fn by_place(
        &self,
        _: &[u32],
        place: &[u32],
        first: usize,
        width: usize,
        changed: &mut Vec<(usize, f64)>,
        end: &mut [usize],
    ) {
        let block = first..first + width;
        let everywhere: Vec<usize> = self
            .everywhere
            .iter()
            .copied()
            .filter(|c| block.contains(c))
            .collect();
        // the block's candidates by column: a column none of them reads is not read (many blocks, when the
        // graph is wide, each with a few)
        let mut nodes = vec![Vec::new(); width];
        for (&column, w) in self.columns.iter().zip(&self.wanted) {
            let w: Vec<_> = w
                .iter()
                .copied()
                .filter(|(_, c)| block.contains(c))
                .collect();
            if !w.is_empty() {
                Wanted::of(column, w).nodes(first, &mut nodes);
            }
        }
        end.fill(everywhere.len()); // (a place per node)
        for &i in nodes.iter().flatten() {
            end[place[i as usize] as usize] += 1;
        }
        to_starts(end, changed);
        for (j, list) in nodes.iter().enumerate() {
            let alt = self.alts[self.alt_of[first + j] as usize];
            for &i in list {
                let at = &mut end[place[i as usize] as usize];
                changed[*at] = (j, alt[i as usize]);
                *at += 1;
            }
        }
        for &c in &everywhere {
            let alt = self.alts[self.alt_of[c] as usize];
            for (&k, &v) in place.iter().zip(alt) {
                let at = &mut end[k as usize];
                changed[*at] = (c - first, v);
                *at += 1;
            }
        }
    }

    fn listed(&self, rows: &[usize]) -> (Vec<i64>, Vec<i64>, Vec<f64>) {
        let (mut ptr, mut nodes, mut values) = (vec![0i64], Vec::new(), Vec::new());
        for &c in rows {
            let key = usize::try_from(self.key_of[c])
                .ok()
                .map(|k| self.columns[k]);
            for i in (0..self.n).filter(|&i| key.is_none_or(|k| k.get(i) == self.value_of[c])) {
                nodes.push(i as i64);
                values.push(self.value(c, i));
            }
            ptr.push(nodes.len() as i64);
        }
        (ptr, nodes, values)
    }
}

/// `systematic.Unsystematic.deviations`' sums, bit for bit: per unit (`total` and `squares`, one value
/// each, zeroed), over its positions in order, the position's weight added as numpy's `bincount` adds it.
/// A position is judged when `paired` (a byte each: numpy's bools) and both its value and its group's
/// `middle` are finite; its sign is numpy's of `value - middle` (+0.0 for either zero), its size
/// `|middle|` where that sign is not zero (else 0.0); it adds `size * sign` to `total` and `size * size` to `squares` (+0.0 when not judged).
/// Units: int16, int32 or int64, each below the sums' length.
#[pyfunction]
pub fn unit_deviations(
    py: Python<'_>,
    values: PyBuffer<f64>,
    middle: PyBuffer<f64>,
    paired: PyBuffer<u8>,
    unit: &Bound<'_, PyAny>,
    total: PyBuffer<f64>,
    squares: PyBuffer<f64>,
) -> PyResult<()> {
    let (v, m, p) = (
        items(&values, "values")?,
        items(&middle, "middle")?,
        items(&paired, "paired")?,
    );
    unit_sums(py, v, m, p, unit, &total, &squares)
}

/// `unit_deviations` of values and middles already read.
fn unit_sums(
    py: Python<'_>,
    v: &[f64],
    m: &[f64],
    p: &[u8],
    unit: &Bound<'_, PyAny>,
    total: &PyBuffer<f64>,
    squares: &PyBuffer<f64>,
) -> PyResult<()> {
    if let Ok(u) = PyBuffer::<i16>::get(unit) {
        return deviations(py, v, m, p, items(&u, "unit")?, total, squares);
    }
    if let Ok(u) = PyBuffer::<i32>::get(unit) {
        return deviations(py, v, m, p, items(&u, "unit")?, total, squares);
    }
    let u = PyBuffer::<i64>::get(unit)?;
    deviations(py, v, m, p, items(&u, "unit")?, total, squares)
}

fn deviations<I: Copy + Into<i64> + Sync>(
    py: Python<'_>,
    v: &[f64],
    m: &[f64],
    p: &[u8],
    unit: &[I],
    total: &PyBuffer<f64>,
    squares: &PyBuffer<f64>,
) -> PyResult<()> {
    let units = total.item_count();
    let writable =
        |b: &PyBuffer<f64>| !b.readonly() && b.is_c_contiguous() && b.item_count() == units;
    if m.len() != v.len() || p.len() != v.len() || unit.len() != v.len() {
        return Err(PyValueError::new_err(
            "values, middle, paired, unit: one per position",
        ));
    }
    if !writable(total) || !writable(squares) {
        return Err(PyValueError::new_err(
            "total, squares: writable, one value per unit",
        ));
    }
    if unit
        .iter()
        .any(|&u| !usize::try_from(u.into()).is_ok_and(|u| u < units))
    {
        return Err(PyValueError::new_err("unit: out of range"));
    }
    let (t, q) = py.detach(|| sums(v, m, p, unit, units));
    for (buf, sums) in [(total, &t), (squares, &q)] {
        // SAFETY: a writable C-contiguous buffer of `units` f64 (checked above) held by `buf` for this call.
        let dest = unsafe { std::slice::from_raw_parts_mut(buf.buf_ptr() as *mut f64, units) };
        dest.copy_from_slice(sums);
    }
    Ok(())
}

/// `deviations`' sums per unit (`unit` checked: each below `units`).
pub(crate) fn sums<I: Copy + Into<i64>>(
    v: &[f64],
    m: &[f64],
    p: &[u8],
    unit: &[I],
    units: usize,
) -> (Vec<f64>, Vec<f64>) {
    let (mut t, mut q) = (vec![0.0; units], vec![0.0; units]);
    for i in 0..v.len() {
        let judged = p[i] != 0 && v[i].is_finite() && m[i].is_finite();
        let d = v[i] - m[i];
        let sign = if !judged || d == 0.0 {
            0.0
        } else if d > 0.0 {
            1.0
        } else {
            -1.0
        };
        let size = if sign != 0.0 { m[i].abs() } else { 0.0 };
        let u = unit[i].into() as usize;
        t[u] += size * sign;
        q[u] += size * size;
    }
    (t, q)
}

/// `whatif._peer_medians_excluding`'s values at the nodes `sel` (written into `out`, one per node, the
/// others untouched), bit for bit: each (group, key) cell's statistic (`grouped_medians`' `how`) of the
/// values at `sel[order[starts[c]..starts[c] + counts[c]]]`, at `cells[c]` of a `shape` table (NaN
/// elsewhere); per node `sel[j]`, the median over the other groups of its key's column
/// (`medians_excluding_each_row`), at its group `groups[sel[j]]` and key `keys[j]`. False (and `out`
/// untouched) where `grouped_medians` is (-0.0, NaNs of different bits), or for `sel` and `order` not both
/// int32 or both int64: the caller computes the definition.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn peer_medians_excluding(
    py: Python<'_>,
    values: PyBuffer<f64>,
    sel: &Bound<'_, PyAny>,
    order: &Bound<'_, PyAny>,
    starts: PyBuffer<i64>,
    counts: PyBuffer<i64>,
    cells: PyBuffer<i64>,
    shape: (usize, usize),
    how: u8,
    groups: &Bound<'_, PyAny>,
    keys: &Bound<'_, PyAny>,
    out: PyBuffer<f64>,
) -> PyResult<bool> {
    let v = items(&values, "values")?;
    let (sel, order) = (Key::of(sel)?, Key::of(order)?);
    let (groups, keys) = (Key::of(groups)?, Key::of(keys)?);
    let (sel, groups, keys) = (sel.slice()?, groups.slice()?, keys.slice()?);
    let (starts, counts) = (items(&starts, "starts")?, items(&counts, "counts")?);
    let cells = items(&cells, "cells")?;
    let (rows, cols) = shape;
    if out.readonly() || !out.is_c_contiguous() || out.item_count() != v.len() {
        return Err(PyValueError::new_err("out: writable, one value per node"));
    }
    if groups.len() != v.len() || keys.len() != sel.len() || cells.len() != starts.len() {
        return Err(PyValueError::new_err(
            "groups: one per node; keys: one per node in sel; cells: one per cell",
        ));
    }
    let medians = match (&sel, order.slice()?) {
        (Slice::Narrow(s), Slice::Narrow(o)) => medians_of(py, v, o, s, starts, counts, how)?,
        (Slice::Wide(s), Slice::Wide(o)) => medians_of(py, v, o, s, starts, counts, how)?,
        _ => return Ok(false),
    };
    let Some(medians) = medians else {
        return Ok(false);
    };
    let mut per = vec![f64::NAN; rows * cols];
    for (&c, m) in cells.iter().zip(medians) {
        let c = usize::try_from(c).ok().filter(|&c| c < per.len());
        per[c.ok_or_else(|| PyValueError::new_err("cells: out of the table"))?] = m;
    }
    if per.is_empty() {
        return Err(PyValueError::new_err("shape: an empty table"));
    }
    let table = py.detach(|| excluding_each_row(&per, rows));
    let mut at = Vec::with_capacity(sel.len());
    for j in 0..sel.len() {
        let node = sel.index(j, v.len());
        let group = node.and_then(|i| groups.index(i, rows));
        match (node, group, keys.index(j, cols)) {
            (Some(i), Some(g), Some(k)) => at.push((i, table[g * cols + k])),
            _ => return Err(PyValueError::new_err("sel, groups, keys: out of range")),
        }
    }
    // SAFETY: a writable C-contiguous buffer of one f64 per node (checked above) held by `out` for this call.
    let dest = unsafe { std::slice::from_raw_parts_mut(out.buf_ptr() as *mut f64, v.len()) };
    for (i, m) in at {
        dest[i] = m;
    }
    Ok(true)
}

/// A grouping as `systematic.Grouped` keeps it: group `g` is the positions `members[order[i]]` for `i` in
/// `starts[g]..starts[g] + counts[g]` (`order` and `members` int32 or int64).
pub(crate) type Grouping<'py> = (
    Bound<'py, PyAny>,
    Bound<'py, PyAny>,
    PyBuffer<i64>,
    PyBuffer<i64>,
);

/// Per group of a grouping, its positions (in the grouping's order); an error where an index is out of
/// range (`positions` values: below it).
pub(crate) fn group_positions(
    grouping: &Grouping<'_>,
    positions: usize,
) -> PyResult<Vec<Vec<usize>>> {
    let (order, members) = (Key::of(&grouping.0)?, Key::of(&grouping.1)?);
    let (order, members) = (order.slice()?, members.slice()?);
    let (starts, counts) = (items(&grouping.2, "starts")?, items(&grouping.3, "counts")?);
    let bad = || PyValueError::new_err("a grouping out of range");
    let mut out = Vec::with_capacity(starts.len());
    for (&s, &c) in starts.iter().zip(counts) {
        let s = usize::try_from(s).map_err(|_| bad())?;
        let c = usize::try_from(c).map_err(|_| bad())?;
        let mut group = Vec::with_capacity(c);
        for i in s..s + c {
            let o = (i < order.len())
                .then(|| order.index(i, members.len()))
                .flatten();
            group.push(
                o.and_then(|o| members.index(o, positions))
                    .ok_or_else(bad)?,
            );
        }
        out.push(group);
    }
    Ok(out)
}

/// Each step's values, as `window_z` reads them (None: a step not float64 in one block of `units` values).
fn step_values(steps: &[PyBuffer<f64>], units: usize) -> Option<Vec<&[f64]>> {
    steps
        .iter()
        .map(|b| items(b, "steps").ok().filter(|a| a.len() == units))
        .collect()
}

/// `systematic.Persistence.update`'s statistic, bit for bit: per unit its sums `S` and `Q` over a window's
/// steps (`steps`: per step its `S` and `Q`, oldest first), added in order from the first step's value
/// (numpy's `add.accumulate`), and `z` (written, one per unit) `S / √Q` where `Q > 0`, else 0.0. Returns how
/// many units have `Q > 0`; None (`z` untouched) for a step of another length or dtype, or not in one block:
/// the caller computes the definition.
#[pyfunction]
pub fn window_z(
    py: Python<'_>,
    steps: Vec<(Bound<'_, PyAny>, Bound<'_, PyAny>)>,
    z: PyBuffer<f64>,
) -> PyResult<Option<usize>> {
    let units = z.item_count();
    if steps.is_empty() {
        return Err(PyValueError::new_err("steps: none"));
    }
    if z.readonly() || !z.is_c_contiguous() {
        return Err(PyValueError::new_err("z: writable"));
    }
    let (mut s, mut q) = (
        Vec::with_capacity(steps.len()),
        Vec::with_capacity(steps.len()),
    );
    for (a, b) in &steps {
        match (PyBuffer::<f64>::get(a), PyBuffer::<f64>::get(b)) {
            (Ok(a), Ok(b)) => {
                s.push(a);
                q.push(b);
            }
            _ => return Ok(None),
        }
    }
    let (Some(s), Some(q)) = (step_values(&s, units), step_values(&q, units)) else {
        return Ok(None);
    };
    let sum = |steps: &[&[f64]], u: usize| steps[1..].iter().fold(steps[0][u], |t, a| t + a[u]);
    let (z_of, tested) = py.detach(|| {
        let mut tested = 0;
        let z_of: Vec<f64> = (0..units)
            .map(|u| {
                let (total_s, total_q) = (sum(&s, u), sum(&q, u));
                if total_q > 0.0 {
                    tested += 1;
                    total_s / total_q.sqrt()
                } else {
                    0.0
                }
            })
            .collect();
        (z_of, tested)
    });
    // SAFETY: a writable C-contiguous buffer of `units` f64 (checked above) held by `z` for this call.
    let dest = unsafe { std::slice::from_raw_parts_mut(z.buf_ptr() as *mut f64, units) };
    dest.copy_from_slice(&z_of);
    Ok(Some(tested))
}
