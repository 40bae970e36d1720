//! The longest-path evaluation of a step's dependency graph (streams/engine/stepgraph.py,
//! `StepGraph.evaluate`): per row of intrinsic durations, every node's end, with numpy's semantics (a NaN
//! anywhere in a maximum makes it NaN), so that the results equal the vectorised definition's bit for bit.
//! A graph's layout (`dag_layout`, checked once) serves every call over it.

use pyo3::buffer::{Element, PyBuffer};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

mod sparse;

pub(crate) fn items<'a, T: Element>(buf: &'a PyBuffer<T>, name: &str) -> PyResult<&'a [T]> {
    if !buf.is_c_contiguous() {
        return Err(PyValueError::new_err(format!("{name}: not contiguous")));
    }
    if !machine_order(buf) {
        return Err(PyValueError::new_err(format!(
            "{name}: not in the machine's byte order"
        )));
    }
    // SAFETY: a C-contiguous buffer of `item_count` items of T (its format checked by PyBuffer::get),
    // held by `buf` for the slice's lifetime.
    Ok(unsafe { std::slice::from_raw_parts(buf.buf_ptr() as *const T, buf.item_count()) })
}

/// A writable C-contiguous buffer's items (the caller has checked that no other buffer of the call shares its
/// memory: `overlap`).
pub(crate) fn items_mut<'a, T: pyo3::buffer::Element>(
    buf: &'a mut PyBuffer<T>,
    name: &str,
) -> PyResult<&'a mut [T]> {
    if buf.readonly() || !buf.is_c_contiguous() || !machine_order(buf) {
        return Err(PyValueError::new_err(format!(
            "{name}: not writable, contiguous and in the machine's byte order"
        )));
    }
    // SAFETY: a writable C-contiguous buffer of `item_count` items of T (its format checked by PyBuffer::get),
    // held by `buf` for the slice's lifetime; no other buffer of the call overlaps it (`overlap`).
    Ok(unsafe { std::slice::from_raw_parts_mut(buf.buf_ptr() as *mut T, buf.item_count()) })
}

/// Whether a buffer's items are in the machine's byte order: PyBuffer::get takes a format of standard sizes
/// ('<', '>', '!') for T whatever its byte order, so a byte-swapped array (one out of another machine's
/// pickle) would be read as native values.
pub(crate) fn machine_order<T: Element>(buf: &PyBuffer<T>) -> bool {
    let swapped: &[u8] = if cfg!(target_endian = "little") {
        b">!"
    } else {
        b"<"
    };
    !matches!(buf.format().to_bytes().first(), Some(c) if swapped.contains(c))
}

/// A buffer's bytes, as [start, end) addresses.
pub(crate) fn span<T: pyo3::buffer::Element>(buf: &PyBuffer<T>) -> (usize, usize) {
    let start = buf.buf_ptr() as usize;
    (start, start + buf.len_bytes())
}

/// Whether any of the first `writable` spans shares a byte with another span (empty spans share none).
pub(crate) fn overlap(spans: &[(usize, usize)], writable: usize) -> bool {
    (0..writable).any(|i| {
        let (a, b) = spans[i];
        spans
            .iter()
            .enumerate()
            .any(|(j, &(c, d))| j != i && a < b && c < d && a < d && c < b)
    })
}

/// numpy's `maximum`: the first if it is above the second or NaN, else the second (of 0.0 and -0.0: the
/// second, as numpy's `maximum` and `maximum.reduceat` over a few values give it).
pub(crate) fn maximum(a: f64, b: f64) -> f64 {
    if a > b || a.is_nan() {
        a
    } else {
        b
    }
}

/// Checks of a graph given as nodes in a topological order and predecessors in CSR form, over `n` nodes:
/// indices in range, and every predecessor placed before its node.
fn check(order: &[i64], indptr: &[i64], indices: &[i64], n: usize) -> Result<(), String> {
    if n >= u32::MAX as usize || indices.len() >= u32::MAX as usize {
        return Err(format!("{n} nodes: too large a graph (places are u32)"));
    }
    if indptr.len() != n + 1 || order.len() != n {
        return Err(format!(
            "{n} nodes, but indptr has {} entries and order {}",
            indptr.len(),
            order.len()
        ));
    }
    let mut placed = vec![false; n];
    for &node in order {
        let i = usize::try_from(node)
            .ok()
            .filter(|&i| i < n && !placed[i])
            .ok_or("order is not a permutation")?;
        let (a, b) = (indptr[i], indptr[i + 1]);
        if a < 0 || b < a || b as usize > indices.len() {
            return Err(format!("bad indptr at node {i}"));
        }
        for &p in &indices[a as usize..b as usize] {
            if !usize::try_from(p).is_ok_and(|p| p < n && placed[p]) {
                return Err(format!("node {i}: predecessor {p} is not placed before it"));
            }
        }
        placed[i] = true;
    }
    Ok(())
}

/// How many places ahead a walk fetches its nodes' values (`prefetch`): far enough for a read from memory
/// to arrive before the walk gets there, near enough to stay in the cache until it does.
const AHEAD: usize = 16;

/// A hint that `values[i]` (when in range) is read soon: its cache line fetched while the walk goes on.
/// Results are the same without it (a hint reads nothing).
#[inline(always)]
fn prefetch<T>(values: &[T], i: usize) {
    #[cfg(target_arch = "x86_64")]
    if let Some(v) = values.get(i) {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: a hint (SSE, part of every x86_64) with the address of an item in range; it reads nothing
        unsafe { _mm_prefetch::<_MM_HINT_T0>((v as *const T).cast()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (values, i);
}

/// A graph laid out in its order of evaluation: the ends of the node evaluated `k`-th are kept at place
/// `k` (or at its slot, `Layout::slots`), so that a walk writes them one after another and reads its
/// predecessors from the places just before (the previous levels), not from all over the nodes' array.
/// Places and positions are u32 (`check` refuses a larger graph): half the memory of usize.
pub struct Layout {
    order: Vec<u32>, // per place: its node
    place: Vec<u32>, // per node: its place
    ptr: Vec<u32>,   // per place: where its predecessors (their places) begin in `preds`
    preds: Vec<u32>,
    slot: Vec<u32>,  // per place: where a walk keeps its ends (`Layout::slots`)
    live: usize,     // slots
    sinks: Vec<u32>, // the places without successors, ascending
    successors: std::sync::OnceLock<sparse::Successors>, // made when first needed (`Walk::sparse`)
}

impl Layout {
    /// The layout of a graph (`check`ed over `n` nodes).
    fn checked(order: &[i64], indptr: &[i64], indices: &[i64], n: usize) -> PyResult<Self> {
        check(order, indptr, indices, n).map_err(PyValueError::new_err)?;
        let mut place = vec![0u32; n];
        for (k, &i) in order.iter().enumerate() {
            place[i as usize] = k as u32;
        }
        let mut ptr = Vec::with_capacity(n + 1);
        let mut preds = Vec::with_capacity(indices.len());
        ptr.push(0);
        for &i in order {
            let (a, b) = (indptr[i as usize] as usize, indptr[i as usize + 1] as usize);
            preds.extend(indices[a..b].iter().map(|&p| place[p as usize]));
            ptr.push(preds.len() as u32);
        }
        let mut layout = Layout {
            order: order.iter().map(|&i| i as u32).collect(),
            place,
            ptr,
            preds,
            slot: Vec::new(),
            live: 0,
            sinks: Vec::new(),
            successors: std::sync::OnceLock::new(),
        };
        (layout.slot, layout.live) = layout.slots();
        let mut read = vec![false; n];
        layout.preds.iter().for_each(|&p| read[p as usize] = true);
        layout.sinks = (0..n as u32).filter(|&k| !read[k as usize]).collect();
        Ok(layout)
    }

    /// The places of place `k`'s predecessors.
    fn preds_of(&self, k: usize) -> &[u32] {
        &self.preds[self.ptr[k] as usize..self.ptr[k + 1] as usize]
    }

    /// Per place, a slot for its ends, and the number of slots: a place's slot is free again once its last
    /// successor is evaluated (a node without successors: once it is), so a walk keeps the ends of the
    /// places still to be read (about a level or two of the graph), not of every node. A place's slot is
    /// none of its predecessors'.
    fn slots(&self) -> (Vec<u32>, usize) {
        let n = self.order.len();
        let mut last: Vec<u32> = (0..n as u32).collect(); // per place: the last place that reads it
        for k in 0..n {
            for &p in self.preds_of(k) {
                last[p as usize] = k as u32;
            }
        }
        let (mut slot, mut free, mut count) = (vec![0u32; n], Vec::new(), 0);
        for k in 0..n {
            slot[k] = free.pop().unwrap_or_else(|| {
                count += 1;
                count - 1
            });
            for &p in self.preds_of(k) {
                let p = p as usize;
                if last[p] == k as u32 {
                    last[p] = u32::MAX; // (a predecessor listed twice is freed once)
                    free.push(slot[p]);
                }
            }
            if last[k] == k as u32 {
                free.push(slot[k]);
            }
        }
        (slot, count as usize)
    }
}

/// A graph's layout, made once (`dag_layout`) for the calls over it.
#[pyclass(frozen, module = "driftlog_native")]
pub struct DagLayout(Layout);

/// The layout of the graph of nodes `order` (a topological order) with predecessors `indptr`/`indices`
/// (CSR), checked: every predecessor placed before its node.
#[pyfunction]
pub fn dag_layout(
    order: PyBuffer<i64>,
    indptr: PyBuffer<i64>,
    indices: PyBuffer<i64>,
) -> PyResult<DagLayout> {
    let order = items(&order, "order")?;
    let layout = Layout::checked(
        order,
        items(&indptr, "indptr")?,
        items(&indices, "indices")?,
        order.len(),
    )?;
    Ok(DagLayout(layout))
}

/// A layout with each node's floor (start without a predecessor): what a walk reads.
struct Walk<'a> {
    floor: &'a [f64],
    l: &'a Layout,
}

impl<'a> std::ops::Deref for Walk<'a> {
    type Target = Layout;
    fn deref(&self) -> &Layout {
        self.l
    }
}

impl<'a> Walk<'a> {
    /// The walk of `layout` with `floor`, one per node.
    fn of(l: &'a Layout, floor: &'a PyBuffer<f64>) -> PyResult<Self> {
        let floor = items(floor, "floor")?;
        if floor.len() != l.order.len() {
            return Err(PyValueError::new_err("floor: one value per node"));
        }
        Ok(Walk { floor, l })
    }

    /// Per place in order, the row-wise maximum of its predecessors' ends (None for a node without
    /// predecessors), from which `finish(place, node, floor, ready, ends at the place)` sets its ends; `ends`:
    /// `rows` values per slot, the place `k`'s at its slot (which no predecessor of `k` still being read
    /// shares: `Layout::slots`).
    /// `ahead`: values per node that `finish` reads (empty: none), fetched into the cache a few places ahead
    /// with the floors (a node's values are all over their arrays: the order of evaluation is not the
    /// nodes', and a large graph's arrays are beyond the cache).
    fn evaluate_with(
        &self,
        rows: usize,
        ends: &mut [f64],
        ahead: &[f64],
        mut finish: impl FnMut(usize, usize, f64, Option<&[f64]>, &mut [f64]),
    ) {
        let mut ready = vec![0.0; rows];
        let slot = |k: usize| self.slot[k] as usize;
        for (k, &i) in self.order.iter().enumerate() {
            if let Some(&next) = self.order.get(k + AHEAD) {
                prefetch(self.floor, next as usize);
                prefetch(ahead, next as usize);
            }
            let i = i as usize;
            let floor = self.floor[i];
            let s = slot(k);
            let (below, from) = ends.split_at_mut(s * rows);
            let (out, above) = from.split_at_mut(rows);
            let at = |p: u32| match slot(p as usize) {
                t if t < s => &below[t * rows..(t + 1) * rows],
                t => &above[(t - s - 1) * rows..(t - s) * rows],
            };
            match *self.preds_of(k) {
                [] => finish(k, i, floor, None, out),
                [p] => finish(k, i, floor, Some(at(p)), out), // most nodes: read in place
                [p, q, ref rest @ ..] => {
                    for ((r, x), y) in ready.iter_mut().zip(at(p)).zip(at(q)) {
                        *r = maximum(*x, *y);
                    }
                    for &p in rest {
                        for (r, e) in ready.iter_mut().zip(at(p)) {
                            *r = maximum(*r, *e);
                        }
                    }
                    finish(k, i, floor, Some(&ready), out);
                }
            }
        }
    }

    /// Ends of every node: `durations` holds each row's value of every node (row-major), `ends` the same
    /// shape. The walk keeps the ends of the nodes still to be read (`Layout::slots`), all rows side by
    /// side, so that a node's maximum over its predecessors runs over contiguous memory for every row at
    /// once and the graph is read once, whatever the number of rows; each node's ends are copied out to
    /// its column as it is evaluated (the rows contiguous for their readers).
    fn evaluate(&self, rows: usize, durations: &[f64], ends: &mut [f64]) {
        if rows == 1 {
            return self.evaluate_row(durations, ends);
        }
        let n = self.floor.len();
        let mut live_ends = vec![0.0; self.live * rows];
        self.evaluate_with(rows, &mut live_ends, &[], |_, i, floor, ready, out| {
            let own = durations[i..].iter().step_by(n); // row j's at j * n + i
            match ready {
                None => out.iter_mut().zip(own).for_each(|(e, d)| *e = floor + d),
                Some(ready) => {
                    for ((e, r), d) in out.iter_mut().zip(ready).zip(own) {
                        *e = maximum(*r, floor) + d;
                    }
                }
            }
            let column = ends[i..].iter_mut().step_by(n);
            column.zip(out.iter()).for_each(|(e, v)| *e = *v);
        });
    }
}

impl Walk<'_> {
    /// `evaluate` of one row (the what-if's observed, ideal and healed rows), each node's end written to its
    /// place in `ends` as it is evaluated and its predecessors' read from there: no scratch of live ends,
    /// the same arithmetic in the same order.
    fn evaluate_row(&self, durations: &[f64], ends: &mut [f64]) {
        for (k, &i) in self.order.iter().enumerate() {
            if let Some(&next) = self.order.get(k + AHEAD) {
                prefetch(self.floor, next as usize);
                prefetch(durations, next as usize);
                prefetch(ends, next as usize);
            }
            let i = i as usize;
            let (floor, d) = (self.floor[i], durations[i]);
            let end = |p: &u32| ends[self.order[*p as usize] as usize];
            ends[i] = match self.preds_of(k) {
                [] => floor + d,
                [p, rest @ ..] => {
                    let ready = rest.iter().fold(end(p), |r, q| maximum(r, end(q)));
                    maximum(ready, floor) + d
                }
            };
        }
    }
}

/// Fill `ends` (rows x nodes, C order, float64) with the end of every node of the graph `layout`
/// (`dag_layout`) for each row of `durations` (the same shape): `end = max(predecessor ends, floor) +
/// duration`, a node without predecessors at its floor.
#[pyfunction]
pub fn dag_ends(
    py: Python<'_>,
    layout: &Bound<'_, DagLayout>,
    floor: PyBuffer<f64>,
    durations: PyBuffer<f64>,
    ends: PyBuffer<f64>,
) -> PyResult<()> {
    let walk = Walk::of(&layout.get().0, &floor)?;
    let d = items(&durations, "durations")?;
    let n = walk.floor.len();
    if ends.readonly()
        || !ends.is_c_contiguous()
        || ends.item_count() != d.len()
        || (n == 0 && !d.is_empty())
        || (n > 0 && d.len() % n != 0)
    {
        return Err(PyValueError::new_err(
            "ends: must be a writable contiguous array of one value per duration",
        ));
    }
    // SAFETY: a writable C-contiguous buffer of `item_count` f64 held by `ends` for this call; no other
    // slice of it exists (durations is a different buffer: the caller passes a fresh output array).
    let out =
        unsafe { std::slice::from_raw_parts_mut(ends.buf_ptr() as *mut f64, ends.item_count()) };
    if n > 0 {
        py.detach(|| walk.evaluate(d.len() / n, d, out));
    }
    Ok(())
}

/// Per rank, the latest end of its spans (streams/engine/carry.py, `last_end_per_rank`): `out[rank[i]]`
/// raised to `ends[i]` for every node with `span[i] >= 0`, in node order with numpy's `maximum`, as
/// `np.maximum.at` does (a tie of zeros keeps the later one, a NaN the first NaN). A negative rank counts
/// from the end, as a numpy index does; one out of range is an error (numpy's IndexError).
#[pyfunction]
pub fn rank_last_ends(
    rank: PyBuffer<i32>,
    span_ids: PyBuffer<i32>,
    ends: PyBuffer<f64>,
    out: PyBuffer<f64>,
) -> PyResult<()> {
    let (r, s, e) = (
        items(&rank, "rank")?,
        items(&span_ids, "span")?,
        items(&ends, "ends")?,
    );
    if r.len() != s.len() || r.len() != e.len() {
        return Err(PyValueError::new_err(
            "rank, span, ends: one value per node",
        ));
    }
    let spans = [span(&out), span(&rank), span(&span_ids), span(&ends)];
    if out.readonly() || !out.is_c_contiguous() || overlap(&spans, 1) {
        return Err(PyValueError::new_err(
            "out: must be a writable contiguous array of its own",
        ));
    }
    // SAFETY: a writable C-contiguous buffer of `item_count` f64 held by `out` for this call, sharing no
    // byte with the inputs (checked above).
    let best =
        unsafe { std::slice::from_raw_parts_mut(out.buf_ptr() as *mut f64, out.item_count()) };
    let n = best.len() as i64;
    for i in (0..s.len()).filter(|&i| s[i] >= 0) {
        let at = if r[i] < 0 {
            n + i64::from(r[i])
        } else {
            i64::from(r[i])
        };
        if !(0..n).contains(&at) {
            return Err(PyValueError::new_err(format!("rank {} out of range", r[i])));
        }
        let slot = &mut best[at as usize];
        *slot = maximum(*slot, e[i]);
    }
    Ok(())
}

/// The step end (the latest node end) of each row of a decomposition, without holding any row: row `k` has
/// every node at `base`, except the nodes `masks[mask_ptr[k]..mask_ptr[k + 1]]`, at `alt`. Rows are
/// evaluated a block at a time over a scratch of the graph's live ends (`Walk::step_ends`: memory bounded
/// by the graph's width, whatever the number of rows), with `dag_ends`' arithmetic, so each row's end equals
/// the maximum of its `dag_ends` row bit for bit (numpy's, a NaN anywhere: NaN).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn dag_masked_step_ends(
    py: Python<'_>,
    layout: &Bound<'_, DagLayout>,
    floor: PyBuffer<f64>,
    base: PyBuffer<f64>,
    alt: PyBuffer<f64>,
    mask_ptr: PyBuffer<i64>,
    masks: PyBuffer<i64>,
    out: PyBuffer<f64>,
) -> PyResult<()> {
    let walk = Walk::of(&layout.get().0, &floor)?;
    let (base, alt) = (items(&base, "base")?, items(&alt, "alt")?);
    if base.len() != walk.floor.len() || alt.len() != walk.floor.len() {
        return Err(PyValueError::new_err("base, alt: one value per node"));
    }
    let (mask_ptr, masks) = (items(&mask_ptr, "mask_ptr")?, items(&masks, "masks")?);
    let rows = Listed::checked(
        mask_ptr,
        masks,
        walk.floor.len(),
        &out,
        |_: usize, node: usize| alt[node],
    )?;
    step_ends_into(py, &walk, base, &rows, &out)
}

/// The rows of a step ends call (`Walk::step_ends`): row `k` has every node at `base`, except the nodes it
/// heals, each at its own value.
pub(crate) trait Healed {
    /// Rows.
    fn rows(&self) -> usize;

    /// The healed values of rows `first..first + width` by place (`order`: per place its node; `place`: per
    /// node its place), in order of evaluation: appended to `changed` (row in the block, value; a node
    /// healed twice in a row: its later value last), `end[k]` set to where place `k`'s end.
    fn by_place(
        &self,
        order: &[u32],
        place: &[u32],
        first: usize,
        width: usize,
        changed: &mut Vec<(usize, f64)>,
        end: &mut [usize],
    );

    /// The rows `rows` listed: where each begins, its nodes, and their values (`Walk::step_ends` evaluates
    /// a few rows again from them).
    fn listed(&self, rows: &[usize]) -> (Vec<i64>, Vec<i64>, Vec<f64>);

    /// Row `r`'s healed (node, value) into `out` (cleared; in order: a node healed twice, its later value
    /// last), when they are at hand without a walk over every node; else false (`Walk::sparse` then leaves
    /// every row to the blocks).
    fn row(&self, _r: usize, _out: &mut Vec<(usize, f64)>) -> bool {
        false
    }
}

/// `Healed::by_place`'s counting sort by place: `end` (each place's count of values on entry) set to where
/// each place's values begin, to be moved to their end as they are placed, and `changed` sized for them all.
pub(crate) fn to_starts(end: &mut [usize], changed: &mut Vec<(usize, f64)>) {
    let mut total = 0;
    for e in end.iter_mut() {
        total += *e;
        *e = total - *e;
    }
    changed.clear();
    changed.resize(total, (0, 0.0));
}

/// Rows given as masks (checked: `rows_of`): row `k` heals the nodes `masks[mask_ptr[k]..mask_ptr[k + 1]]`, each
/// to `value(at, node)` (`at`: its position in `masks`).
struct Listed<'a, V> {
    mask_ptr: &'a [i64],
    masks: &'a [i64],
    value: V,
}

impl<'a, V: Fn(usize, usize) -> f64> Listed<'a, V> {
    /// The rows of `mask_ptr`/`masks` over `n` nodes, each node at `value(at, node)`, when `rows_of` holds.
    fn checked(
        mask_ptr: &'a [i64],
        masks: &'a [i64],
        n: usize,
        out: &PyBuffer<f64>,
        value: V,
    ) -> PyResult<Self> {
        rows_of(mask_ptr, masks, n, out)?;
        Ok(Listed {
            mask_ptr,
            masks,
            value,
        })
    }

    fn span(&self, row: usize) -> std::ops::Range<usize> {
        self.mask_ptr[row] as usize..self.mask_ptr[row + 1] as usize
    }
}

impl<V: Fn(usize, usize) -> f64> Healed for Listed<'_, V> {
    fn rows(&self) -> usize {
        self.mask_ptr.len().saturating_sub(1)
    }

    /// A counting sort of the block's values by place (stable).
    fn by_place(
        &self,
        _: &[u32],
        place: &[u32],
        first: usize,
        width: usize,
        changed: &mut Vec<(usize, f64)>,
        end: &mut [usize],
    ) {
        end.fill(0);
        for j in 0..width {
            for &node in &self.masks[self.span(first + j)] {
                end[place[node as usize] as usize] += 1;
            }
        }
        to_starts(end, changed);
        for j in 0..width {
            for at in self.span(first + j) {
                let i = self.masks[at] as usize;
                let k = place[i] as usize;
                changed[end[k]] = (j, (self.value)(at, i));
                end[k] += 1;
            }
        }
    }

    fn row(&self, r: usize, out: &mut Vec<(usize, f64)>) -> bool {
        out.clear();
        out.extend(self.span(r).map(|at| {
            let i = self.masks[at] as usize;
            (i, (self.value)(at, i))
        }));
        true
    }

    fn listed(&self, rows: &[usize]) -> (Vec<i64>, Vec<i64>, Vec<f64>) {
        let (mut ptr, mut nodes, mut values) = (vec![0i64], Vec::new(), Vec::new());
        for &r in rows {
            for at in self.span(r) {
                nodes.push(self.masks[at]);
                values.push((self.value)(at, self.masks[at] as usize));
            }
            ptr.push(nodes.len() as i64);
        }
        (ptr, nodes, values)
    }
}

/// The step ends of `rows` (`Walk::step_ends`) into `out` (`out_of`): computed without the GIL into a
/// buffer of their own, then copied, so `out` may be any writable buffer (even one of the inputs').
fn step_ends_into(
    py: Python<'_>,
    walk: &Walk<'_>,
    base: &[f64],
    rows: &(impl Healed + Sync),
    out: &PyBuffer<f64>,
) -> PyResult<()> {
    let count = out_of(out, rows.rows())?;
    let mut ends = vec![0.0; count];
    py.detach(|| walk.step_ends(base, &mut ends, rows));
    // SAFETY: a writable C-contiguous buffer of `rows` f64 held by `out` for this call; no other slice of it.
    let result = unsafe { std::slice::from_raw_parts_mut(out.buf_ptr() as *mut f64, count) };
    result.copy_from_slice(&ends);
    Ok(())
}

/// Rows evaluated at once by `Walk::step_ends`: at most `BLOCK`, and as many as fit a scratch of
/// `SCRATCH` bytes (at least one). A block reads the graph once, whatever its rows: a 1,024-rank step's
/// decomposition (83 rows heal-only, 83 leave-only) in one block each, not two.
const BLOCK: usize = 128;
const SCRATCH: usize = 4 << 20;

/// Whether the node `i` whose end is `v` ends the step rather than `best` (the one so far, `None` before
/// the first), as numpy's `max` over the nodes in index order picks it: the first NaN, else the first
/// of the largest (of equal ones, 0.0 and -0.0, the first), in whatever order the nodes come.
fn ends_later(v: f64, i: usize, best: Option<(f64, usize)>) -> bool {
    match best {
        None => true,
        Some((t, b)) if t.is_nan() => v.is_nan() && i < b,
        Some((t, b)) => v.is_nan() || v > t || (v == t && i < b),
    }
}
impl Walk<'_> {
    /// Each row's step end (see `dag_masked_step_ends`): row `k` has every node at `base`, except the nodes
    /// `rows` heals.
    /// Each row's latest end is kept as a plain maximum (`Walk::blocks`), which is numpy's `max` unless the
    /// row holds a NaN or ends at a zero (whose sign depends on which node comes first in index order):
    /// those rows only are evaluated again, keeping the node each end is from (after `check`, with masks and
    /// pointers checked by the caller).
    fn step_ends(&self, base: &[f64], result: &mut [f64], rows: &impl Healed) {
        if let [one] = result {
            *one = self.row_step_end(base, rows);
            return;
        }
        let again = match self.sparse(base, result, rows) {
            None => self.blocks(base, result, rows, false),
            Some(left) => self.listed_blocks(base, result, rows, &left, false),
        };
        if again.is_empty() {
            return;
        }
        self.listed_blocks(base, result, rows, &again, true);
    }

    /// The rows of a block (`BLOCK`, `SCRATCH`), of `rows` in all (a graph of a node at least).
    fn block_rows(&self, rows: usize) -> usize {
        (SCRATCH / (self.live * 8)).clamp(1, BLOCK).min(rows.max(1))
    }

    /// `blocks` of the rows `left` of `rows` (ascending) into their places in `result`; the rows of
    /// `rows` to evaluate again.
    fn listed_blocks(
        &self,
        base: &[f64],
        result: &mut [f64],
        rows: &impl Healed,
        left: &[usize],
        exact: bool,
    ) -> Vec<usize> {
        if left.is_empty() {
            return Vec::new();
        }
        let (mask_ptr, masks, values) = rows.listed(left);
        let listed = Listed {
            mask_ptr: &mask_ptr,
            masks: &masks,
            value: |at: usize, _: usize| values[at],
        };
        let mut ends = vec![0.0; left.len()];
        let again = self.blocks(base, &mut ends, &listed, exact);
        for (&r, e) in left.iter().zip(ends) {
            result[r] = e;
        }
        again.into_iter().map(|j| left[j]).collect()
    }

    /// `step_ends` of one row (a step's group cause, a group of parts healed together): its durations made
    /// and evaluated in full (`evaluate_row`: the same arithmetic), its latest end the one numpy's `max`
    /// picks (`ends_later`), without a block's sorting of the healed values by place and scratch of live
    /// ends (which cost more than they save for a single row).
    fn row_step_end(&self, base: &[f64], rows: &impl Healed) -> f64 {
        let (_, nodes, values) = rows.listed(&[0]);
        let mut kept = KEPT.with(|k| k.take());
        let Kept { ends, row, .. } = &mut kept;
        row.clear();
        row.extend_from_slice(base);
        for (&i, &v) in nodes.iter().zip(&values) {
            row[i as usize] = v; // (a node listed twice: its later value)
        }
        ends.clear();
        ends.resize(row.len(), 0.0);
        self.evaluate_row(row, ends);
        let mut best = None;
        for (i, &e) in ends.iter().enumerate() {
            if ends_later(e, i, best) {
                best = Some((e, i));
            }
        }
        kept.keep();
        best.map_or(f64::NAN, |(e, _)| e)
    }

    /// `step_ends` over rows a block at a time over a scratch of the graph's live ends (`Layout::slots`) x
    /// the block, each row's latest end kept as its nodes are evaluated: memory bounded by the graph's
    /// width, not its nodes. `exact`: the latest end as numpy's `max` picks it (`ends_later`); else the
    /// plain maximum, and the rows it may not equal numpy's for (a NaN in the block, a zero) are returned.
    fn blocks(
        &self,
        base: &[f64],
        result: &mut [f64],
        healed: &impl Healed,
        exact: bool,
    ) -> Vec<usize> {
        let n = self.floor.len();
        let rows = result.len();
        let mut again = Vec::new();
        if n == 0 {
            result.fill(f64::NAN);
            return again;
        }
        let walk = self;
        let live = self.live;
        // With no duration below 0 (nor NaN) a node ends no earlier than each of its predecessors, and a NaN
        // end makes its successors' NaN: each row's latest end (or NaN) is then one of the sinks', so the
        // plain maximum is kept over them only (a zero is evaluated again all the same)
        let mut monotone = !exact && base.iter().all(|&d| d >= 0.0);
        let block_rows = self.block_rows(rows);
        let mut kept = KEPT.with(|k| k.take());
        let Kept {
            ends, changed, end, ..
        } = &mut kept;
        ends.clear();
        ends.resize(live * block_rows, 0.0);
        end.clear();
        end.resize(n, 0);
        let mut top: Vec<Option<(f64, usize)>> = vec![None; block_rows];
        let mut peak = vec![f64::NEG_INFINITY; block_rows];
        for first in (0..rows).step_by(block_rows) {
            let width = block_rows.min(rows - first);
            healed.by_place(&walk.order, &walk.place, first, width, changed, end);
            monotone &= changed.iter().all(|&(_, v)| v >= 0.0);
            let (mut next, mut sink) = (0, 0);
            let top = &mut top[..width];
            top.fill(None);
            let peak = &mut peak[..width];
            peak.fill(f64::NEG_INFINITY);
            let mut nan = false;
            let ends = &mut ends[..live * width];
            walk.evaluate_with(width, ends, base, |k, i, floor, ready, out| {
                let d = base[i];
                match ready {
                    None => out.fill(floor + d),
                    // (most nodes with a predecessor have no floor: `maximum(r, -inf)` is `r`, NaN included)
                    Some(ready) if floor == f64::NEG_INFINITY => {
                        out.iter_mut().zip(ready).for_each(|(e, r)| *e = *r + d);
                    }
                    Some(ready) => {
                        for (e, r) in out.iter_mut().zip(ready) {
                            *e = maximum(*r, floor) + d;
                        }
                    }
                }
                for &(j, v) in &changed[next..end[k]] {
                    out[j] = match ready {
                        None => floor + v,
                        Some(ready) => maximum(ready[j], floor) + v,
                    };
                }
                next = end[k];
                if exact {
                    for (t, &e) in top.iter_mut().zip(out.iter()) {
                        if ends_later(e, i, *t) {
                            *t = Some((e, i));
                        }
                    }
                } else if !monotone || walk.sinks.get(sink) == Some(&(k as u32)) {
                    sink += usize::from(monotone);
                    for (p, &e) in peak.iter_mut().zip(out.iter()) {
                        nan |= e.is_nan();
                        *p = if e > *p { e } else { *p };
                    }
                }
            });
            for (j, r) in result[first..first + width].iter_mut().enumerate() {
                if exact {
                    *r = top[j].map_or(f64::NAN, |(e, _)| e);
                } else if nan || peak[j] == 0.0 {
                    again.push(first + j); // (a positive, negative or infinite maximum: any node's, the same bits)
                } else {
                    *r = peak[j];
                }
            }
        }
        kept.keep();
        again
    }
}

/// `Walk::blocks`' scratch (a large job's is megabytes: fresh memory each call would fault every page of
/// it in again), kept per thread between calls: the live ends of a block (`Layout::slots` x rows), the
/// block's healed values (row in the block, duration) by place of their node, in order of evaluation
/// (`Healed::by_place`), and per place where its values end; for a single row (`Walk::row_step_end`), its
/// durations (and its ends in `ends`).
#[derive(Default)]
struct Kept {
    ends: Vec<f64>,
    changed: Vec<(usize, f64)>,
    end: Vec<usize>,
    row: Vec<f64>,
}

thread_local! {
    static KEPT: std::cell::RefCell<Kept> = std::cell::RefCell::default();
}

/// The most scratch a thread keeps between calls (bytes): a 1,024-rank decomposition's ~17 MB is kept, a
/// rare call's larger peak (rows x healed nodes) is given back, not held for good.
const KEEP: usize = 32 << 20;

impl Kept {
    /// Back into the thread's keeping, or dropped when larger than `KEEP`.
    fn keep(self) {
        let bytes = self.ends.capacity() * 8
            + self.changed.capacity() * std::mem::size_of::<(usize, f64)>()
            + self.end.capacity() * std::mem::size_of::<usize>()
            + self.row.capacity() * 8;
        if bytes <= KEEP {
            KEPT.with(|k| k.replace(self));
        }
    }
}

/// Checks of a row set given as masks (`mask_ptr` into `masks`, node indices): the pointers increase within
/// `masks`, every node is in range, and `out` holds one writable value per row; the number of rows.
fn rows_of(mask_ptr: &[i64], masks: &[i64], n: usize, out: &PyBuffer<f64>) -> PyResult<usize> {
    let rows = out_of(out, mask_ptr.len().saturating_sub(1))?;
    let mut last = 0i64;
    for &p in mask_ptr {
        if p < last || p as usize > masks.len() {
            return Err(PyValueError::new_err(
                "mask_ptr: not increasing within masks",
            ));
        }
        last = p;
    }
    if masks
        .iter()
        .any(|&i| !usize::try_from(i).is_ok_and(|i| i < n))
    {
        return Err(PyValueError::new_err("masks: a node out of range"));
    }
    Ok(rows)
}

/// `rows`, when `out` holds one writable value per row (C-contiguous).
pub(crate) fn out_of(out: &PyBuffer<f64>, rows: usize) -> PyResult<usize> {
    if out.readonly() || !out.is_c_contiguous() || out.item_count() != rows {
        return Err(PyValueError::new_err(
            "out: a writable contiguous array of one value per row",
        ));
    }
    Ok(rows)
}

/// `dag_masked_step_ends` with a value per masked node instead of one `alt` for all rows: row `k` has every
/// node at `base`, except the nodes `masks[mask_ptr[k]..mask_ptr[k + 1]]`, each at its `values` entry (the
/// same positions). Rows healing to different durations (the what-if's candidates) in one call; each row's
/// end equals the maximum of its `dag_ends` row bit for bit.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn dag_valued_step_ends(
    py: Python<'_>,
    layout: &Bound<'_, DagLayout>,
    floor: PyBuffer<f64>,
    base: PyBuffer<f64>,
    mask_ptr: PyBuffer<i64>,
    masks: PyBuffer<i64>,
    values: PyBuffer<f64>,
    out: PyBuffer<f64>,
) -> PyResult<()> {
    let (base, values) = (items(&base, "base")?, items(&values, "values")?);
    let (mask_ptr, masks) = (items(&mask_ptr, "mask_ptr")?, items(&masks, "masks")?);
    valued_step_ends(py, layout, &floor, base, mask_ptr, masks, values, &out)
}

/// The step ends of `rows` over the graph `layout` with `floor` (`dag_keyed_step_ends`' candidates,
/// whatif.rs) into `out`.
pub(crate) fn healed_step_ends(
    py: Python<'_>,
    layout: &Bound<'_, DagLayout>,
    floor: &PyBuffer<f64>,
    base: &[f64],
    rows: &(impl Healed + Sync),
    out: &PyBuffer<f64>,
) -> PyResult<()> {
    let walk = Walk::of(&layout.get().0, floor)?;
    if base.len() != walk.floor.len() {
        return Err(PyValueError::new_err("base: one value per node"));
    }
    step_ends_into(py, &walk, base, rows, out)
}

/// `dag_valued_step_ends` over slices.
#[allow(clippy::too_many_arguments)]
fn valued_step_ends(
    py: Python<'_>,
    layout: &Bound<'_, DagLayout>,
    floor: &PyBuffer<f64>,
    base: &[f64],
    mask_ptr: &[i64],
    masks: &[i64],
    values: &[f64],
    out: &PyBuffer<f64>,
) -> PyResult<()> {
    let walk = Walk::of(&layout.get().0, floor)?;
    if base.len() != walk.floor.len() || values.len() != masks.len() {
        return Err(PyValueError::new_err(
            "base: one value per node; values: one per masked node",
        ));
    }
    let rows = Listed::checked(
        mask_ptr,
        masks,
        walk.floor.len(),
        out,
        |at: usize, _: usize| values[at],
    )?;
    step_ends_into(py, &walk, base, &rows, out)
}

/// numpy's `argmax` over `values` at `at`: the first largest, or the first NaN.
fn argmax(values: &[f64], at: impl Iterator<Item = usize>) -> Option<usize> {
    let mut best: Option<usize> = None;
    for i in at {
        let better = match best {
            None => true,
            Some(b) => !values[b].is_nan() && (values[i].is_nan() || values[i] > values[b]),
        };
        if better {
            best = Some(i);
        }
    }
    best
}

/// The chain of nodes that determined the step's end, last first (`StepGraph.critical_path`'s definition):
/// from the node that ends last, each time the predecessor that ends last, until a node started at its
/// own floor (later than every predecessor's end) or has no predecessor. `ends`: one row of end times.
#[pyfunction]
pub fn dag_critical_path(
    indptr: PyBuffer<i64>,
    indices: PyBuffer<i64>,
    floor: PyBuffer<f64>,
    ends: PyBuffer<f64>,
) -> PyResult<Vec<i64>> {
    let (ptr, idx) = (items(&indptr, "indptr")?, items(&indices, "indices")?);
    let (floor, ends) = (items(&floor, "floor")?, items(&ends, "ends")?);
    let n = ends.len();
    let bad = || PyValueError::new_err("dag_critical_path: a bad graph");
    if floor.len() != n || ptr.len() != n + 1 {
        return Err(bad());
    }
    let Some(mut node) = argmax(ends, 0..n) else {
        return Err(bad());
    };
    let mut path = vec![node as i64];
    while ptr[node + 1] > ptr[node] {
        let (a, b) = (usize::try_from(ptr[node]), usize::try_from(ptr[node + 1]));
        let preds = match (a, b) {
            (Ok(a), Ok(b)) if b <= idx.len() && path.len() <= n => &idx[a..b],
            _ => return Err(bad()),
        };
        if preds
            .iter()
            .any(|&p| !usize::try_from(p).is_ok_and(|p| p < n))
        {
            return Err(bad());
        }
        let best = argmax(ends, preds.iter().map(|&p| p as usize)).ok_or_else(bad)?;
        if floor[node] > ends[best] {
            break; // it started at its own observed start, not because of a predecessor
        }
        path.push(best as i64);
        node = best;
    }
    Ok(path)
}
