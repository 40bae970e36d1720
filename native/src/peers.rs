//! A step structure's peer groups, read and checked once (streams/engine/ideal.py `CrossStage`): the ideal
//! from peers and its evidence (`Peers.at_ideal`), and the ideal without the systematically slow units
//! (`CrossStage.typical(values, slow)`), each in one call that reads only the step's values. The same
//! values as the definitions, bit for bit.

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::dag::items;
use crate::median::{one_statistic, LOWER, MIDDLE};
use crate::whatif::{group_positions, sums, Grouping, Key};

/// Groups of positions, each not empty: group `g` is `pos[bounds[g]..bounds[g + 1]]`, in the grouping's order.
pub(crate) struct Groups {
    pos: Vec<usize>,
    bounds: Vec<usize>,
}

impl Groups {
    /// Groups of `counts[g]` positions each, one after another in `pos` (each below `n`).
    pub(crate) fn flat(pos: &[i64], counts: &[i64], n: usize) -> PyResult<Self> {
        let bad = || PyValueError::new_err("a grouping out of range");
        let pos = pos
            .iter()
            .map(|&i| usize::try_from(i).ok().filter(|&i| i < n))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(bad)?;
        let mut bounds = vec![0];
        for &c in counts {
            let c = usize::try_from(c).ok().filter(|&c| c > 0).ok_or_else(bad)?;
            bounds.push(bounds[bounds.len() - 1] + c);
        }
        if bounds[bounds.len() - 1] != pos.len() {
            return Err(bad());
        }
        Ok(Groups { pos, bounds })
    }

    fn of(grouping: &Grouping<'_>, n: usize) -> PyResult<Self> {
        let (mut pos, mut bounds) = (Vec::new(), vec![0]);
        for group in group_positions(grouping, n)? {
            if group.is_empty() {
                return Err(PyValueError::new_err("an empty group"));
            }
            pos.extend(group);
            bounds.push(pos.len());
        }
        Ok(Groups { pos, bounds })
    }

    pub(crate) fn each(&self) -> impl Iterator<Item = &[usize]> {
        self.bounds.windows(2).map(|b| &self.pos[b[0]..b[1]])
    }

    /// `v` with each position of a group at its group's statistic (None: refused, as `medians_of` refuses).
    fn spread(&self, v: &[f64], how: u8, scratch: &mut Vec<f64>) -> Option<Vec<f64>> {
        let mut out = v.to_vec();
        for group in self.each() {
            let m = statistic(v, group.iter().copied(), how, scratch)?;
            for &i in group {
                out[i] = m;
            }
        }
        Some(out)
    }
}

/// The statistic of `v` at `positions` (None: refused).
pub(crate) fn statistic(
    v: &[f64],
    positions: impl Iterator<Item = usize>,
    how: u8,
    scratch: &mut Vec<f64>,
) -> Option<f64> {
    scratch.clear();
    scratch.extend(positions.map(|i| v[i]));
    one_statistic(scratch, how)
}

/// An `Unsystematic`'s groups (`middle`), which positions are paired (a byte each) and their units.
struct Unit {
    groups: Groups,
    paired: Vec<u8>,
    unit: Vec<i64>, // (not negative)
    units: usize,
}

impl Unit {
    fn of(
        (grouping, paired, unit): &(Grouping<'_>, PyBuffer<u8>, Bound<'_, PyAny>),
        n: usize,
    ) -> PyResult<Self> {
        let paired = items(paired, "paired")?.to_vec();
        let unit = Key::of(unit)?;
        let unit = unit.slice()?;
        if paired.len() != n || unit.len() != n {
            return Err(PyValueError::new_err("paired, unit: one per position"));
        }
        let unit: Vec<i64> = (0..n).map(|i| unit.get(i)).collect();
        if unit.iter().any(|&u| u < 0) {
            return Err(PyValueError::new_err("unit: negative"));
        }
        let units = unit.iter().max().map_or(0, |&u| u as usize + 1);
        let groups = Groups::of(grouping, n)?;
        Ok(Unit {
            groups,
            paired,
            unit,
            units,
        })
    }

    /// `Unsystematic.typical(values, slow)` (None: refused): without a paired position on a unit `slow`, each
    /// group's middle; else each group's middle over its members not left out, or, where that is NaN (none
    /// kept, or a NaN among the middle values), its lower median.
    fn without(&self, v: &[f64], slow: &[i64], scratch: &mut Vec<f64>) -> Option<Vec<f64>> {
        let out_of = |i: usize| self.paired[i] != 0 && slow.contains(&self.unit[i]);
        if !(0..v.len()).any(out_of) {
            return self.groups.spread(v, MIDDLE, scratch);
        }
        let mut out = v.to_vec();
        for group in self.each_group() {
            let kept = group.iter().copied().filter(|&i| !out_of(i));
            let mut m = f64::NAN;
            if group.iter().any(|&i| !out_of(i)) {
                m = statistic(v, kept, MIDDLE, scratch)?;
            }
            if m.is_nan() {
                m = statistic(v, group.iter().copied(), LOWER, scratch)?;
            }
            for &i in group {
                out[i] = m;
            }
        }
        Some(out)
    }

    fn each_group(&self) -> impl Iterator<Item = &[usize]> {
        self.groups.each()
    }
}

/// numpy's `minimum` of two values: `a` when it is NaN, else `b` when it is NaN, else `a` when below `b`,
/// else `b` (of 0.0 and -0.0: the second).
fn minimum(a: f64, b: f64) -> f64 {
    if a.is_nan() || (!b.is_nan() && a < b) {
        a
    } else {
        b
    }
}

/// What `peer_layout` reads of a `CrossStage`: per position the first position of its stage peer group
/// (`rep`), the positions that have cross-stage peers (`crossed`), and those groups by cross-stage key.
type Cross<'py> = (Bound<'py, PyAny>, Bound<'py, PyAny>, Grouping<'py>);

/// An error unless `out` is writable, in one block, of `n` values.
pub(crate) fn writable(out: &PyBuffer<f64>, n: usize) -> PyResult<()> {
    if out.readonly() || !out.is_c_contiguous() || out.item_count() != n {
        return Err(PyValueError::new_err(
            "out: writable, one value per position",
        ));
    }
    Ok(())
}

/// A `CrossStage`'s groupings, checked once: its work and transfer units, per position the first position of
/// its stage peer group (`rep`), the positions with cross-stage peers (`crossed`), and the stage peer groups
/// by cross-stage key (`stages`).
#[pyclass(frozen, module = "driftlog_native")]
pub struct PeerLayout {
    n: usize,
    work: Unit,
    transfers: Unit,
    crossed: Vec<(usize, usize)>, // (position, its rep)
    stages: Groups,
}

/// What `peer_layout` reads of an `Unsystematic`: its groups (`middle`), its paired positions (a byte each)
/// and its units (int16, int32 or int64, not negative).
type UnitArgs<'py> = (Grouping<'py>, PyBuffer<u8>, Bound<'py, PyAny>);

/// The layout of `n` positions' peer groups, checked.
#[pyfunction]
pub fn peer_layout(
    n: usize,
    work: UnitArgs<'_>,
    transfers: UnitArgs<'_>,
    cross: Cross<'_>,
) -> PyResult<PeerLayout> {
    let (rep, crossed) = (Key::of(&cross.0)?, Key::of(&cross.1)?);
    let (rep, crossed) = (rep.slice()?, crossed.slice()?);
    if rep.len() != n {
        return Err(PyValueError::new_err("rep: one per position"));
    }
    let at = |j: usize| -> Option<(usize, usize)> {
        let i = crossed.index(j, n)?;
        Some((i, rep.index(i, n)?))
    };
    let crossed = (0..crossed.len())
        .map(at)
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| PyValueError::new_err("crossed, rep: out of range"))?;
    Ok(PeerLayout {
        n,
        work: Unit::of(&work, n)?,
        transfers: Unit::of(&transfers, n)?,
        crossed,
        stages: Groups::of(&cross.2, n)?,
    })
}

impl PeerLayout {
    /// The work's typical `w` with the transfers' `t` at their groups' positions, then at each crossed
    /// position the `minimum` of its value and the lower median, over the stages, of the value at its `rep`.
    fn overlaid(&self, mut w: Vec<f64>, t: &[f64], scratch: &mut Vec<f64>) -> Option<Vec<f64>> {
        for &i in &self.transfers.groups.pos {
            w[i] = t[i];
        }
        if !self.crossed.is_empty() {
            let stage = self.stages.spread(&w, LOWER, scratch)?;
            let lowered: Vec<f64> = self
                .crossed
                .iter()
                .map(|&(i, r)| minimum(w[i], stage[r]))
                .collect();
            for (&(i, _), m) in self.crossed.iter().zip(lowered) {
                w[i] = m;
            }
        }
        Some(w)
    }

    fn values<'a>(&self, values: &'a PyBuffer<f64>) -> PyResult<&'a [f64]> {
        let v = items(values, "values")?;
        if v.len() != self.n {
            return Err(PyValueError::new_err("values: one per position"));
        }
        Ok(v)
    }
}

/// Copy `values` into `out`: an error unless it is writable, in one block, of as many values.
pub(crate) fn write(out: &PyBuffer<f64>, values: &[f64]) -> PyResult<()> {
    writable(out, values.len())?;
    // SAFETY: a writable C-contiguous buffer of `values.len()` f64 (checked above) held by `out` for this
    // call.
    let dest = unsafe { std::slice::from_raw_parts_mut(out.buf_ptr() as *mut f64, values.len()) };
    dest.copy_from_slice(values);
    Ok(())
}

#[pymethods]
impl PeerLayout {
    /// The units' counts: (ranks, links), each its sums' length.
    fn units(&self) -> (usize, usize) {
        (self.work.units, self.transfers.units)
    }

    /// `Peers.at_ideal`: each position at its ideal from every peer (into `out`) and the evidence per rank and
    /// per link (into `sums`: the work's total and squares, then the transfers'). False (all untouched)
    /// where `grouped_medians` is: the caller computes the definition.
    fn at_ideal(
        &self,
        py: Python<'_>,
        values: PyBuffer<f64>,
        out: PyBuffer<f64>,
        sums_of: [PyBuffer<f64>; 4],
    ) -> PyResult<bool> {
        let v = self.values(&values)?;
        writable(&out, self.n)?;
        for (s, u) in sums_of
            .iter()
            .zip([&self.work, &self.work, &self.transfers, &self.transfers])
        {
            writable(s, u.units)?;
        }
        let found = py.detach(|| {
            let mut scratch = Vec::new();
            let w = self.work.groups.spread(v, MIDDLE, &mut scratch)?;
            let t = self.transfers.groups.spread(v, MIDDLE, &mut scratch)?;
            let ideal = self.overlaid(w.clone(), &t, &mut scratch)?;
            let evidence = [(&self.work, &w), (&self.transfers, &t)]
                .map(|(u, m)| sums(v, m, &u.paired, &u.unit, u.units));
            Some((ideal, evidence))
        });
        let Some((ideal, [(wt, wq), (tt, tq)])) = found else {
            return Ok(false);
        };
        write(&out, &ideal)?;
        for (s, total) in sums_of.iter().zip([wt, wq, tt, tq]) {
            write(s, &total)?;
        }
        Ok(true)
    }

    /// `CrossStage.typical(values, slow)`: each position at its ideal from peers other than the ranks
    /// `slow_ranks` (work) and the links `slow_links` (transfers), into `out`. False (`out` untouched) where
    /// `grouped_medians` is.
    fn without(
        &self,
        py: Python<'_>,
        values: PyBuffer<f64>,
        slow_ranks: PyBuffer<i64>,
        slow_links: PyBuffer<i64>,
        out: PyBuffer<f64>,
    ) -> PyResult<bool> {
        let v = self.values(&values)?;
        writable(&out, self.n)?;
        let (ranks, links) = (items(&slow_ranks, "slow")?, items(&slow_links, "slow")?);
        let found = py.detach(|| {
            let mut scratch = Vec::new();
            let w = self.work.without(v, ranks, &mut scratch)?;
            let t = self.transfers.without(v, links, &mut scratch)?;
            self.overlaid(w, &t, &mut scratch)
        });
        let Some(ideal) = found else {
            return Ok(false);
        };
        write(&out, &ideal)?;
        Ok(true)
    }
}
