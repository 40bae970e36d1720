//! A step graph's draft on its layout's plan (streams/engine/draft.py, `drafted`): the floors, intrinsic
//! durations and edges a step's times decide, in one pass over the plan's positions instead of some fifty
//! numpy calls. Every value is computed as the definition computes it (numpy's `maximum`/`minimum`, its
//! `searchsorted` walk, a stable sort of the same keys, each sum in the same order), so that the results
//! equal the definition's bit for bit. A step with a blocking transfer whose peer is not traced (its
//! typical transfer time is a median over the step) keeps the definition.

use std::cmp::Ordering;

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::dag::items;

/// numpy's `maximum`: the first if it is at least the second or NaN, else the second.
fn maximum(a: f64, b: f64) -> f64 {
    if a >= b || a.is_nan() {
        a
    } else {
        b
    }
}

/// numpy's `minimum`: the first if it is at most the second or NaN, else the second.
fn minimum(a: f64, b: f64) -> f64 {
    if a <= b || a.is_nan() {
        a
    } else {
        b
    }
}

/// numpy's order of floats in sorts and searches: NaN after every number.
fn less(a: f64, b: f64) -> bool {
    a < b || (b.is_nan() && !a.is_nan())
}

/// numpy's order of floats (`less`) as an ordering: NaNs equal, -0.0 equal to 0.0.
pub(crate) fn numpy_order(a: f64, b: f64) -> Ordering {
    if less(a, b) {
        Ordering::Less
    } else if less(b, a) {
        Ordering::Greater
    } else {
        Ordering::Equal
    }
}

/// numpy's `searchsorted` (its binary search, which starts from the previous key's bounds), `right`: the
/// side; the same places as numpy's even where `sorted` is not sorted.
fn searchsorted(sorted: &[f64], keys: &[f64], right: bool) -> Vec<u32> {
    let cmp = |a: f64, b: f64| if right { !less(b, a) } else { less(a, b) };
    let n = sorted.len();
    let mut out = Vec::with_capacity(keys.len());
    let (mut lo, mut hi) = (0usize, n);
    let mut last = match keys.first() {
        Some(&k) => k,
        None => return out,
    };
    for &key in keys {
        if cmp(last, key) {
            hi = n;
        } else {
            lo = 0;
            hi = if hi < n { hi + 1 } else { n };
        }
        last = key;
        while lo < hi {
            let mid = lo + ((hi - lo) >> 1);
            if cmp(sorted[mid], key) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        out.push(lo as u32); // (`sorted` is of a plan's positions: they fit int32)
    }
    out
}

/// The plan's arrays (draft.py, `Packed`: int32), in this order.
const PLANNED: usize = 28;

struct Plan<'a> {
    n: usize,
    n_chain: usize,
    n_barrier: usize,
    a: [&'a [i32]; PLANNED],
}

#[derive(Clone, Copy)]
enum P {
    Sync,
    Prev,
    Member,
    Rank,
    Mb,
    Mi,
    BarrierOf,
    BarrierNode,
    HasPrev,
    Gate,
    Ungated,
    AsyncPeer,
    AsyncPeerNode,
    Plain,
    Source,
    After,
    Onto,
    Sends,
    LaunchSends,
    SendRank,
    Recvs,
    Matched,
    MatchedFrom,
    Comp,
    CompGroup,
    RecvGroup,
    RecvRank,
    RecvMb,
}

impl<'a> Plan<'a> {
    fn of(head: &[i64], packed: &'a [i32]) -> PyResult<Self> {
        let bad = || PyValueError::new_err("step_draft: a malformed plan");
        if head.len() != 3 + PLANNED + 1 {
            return Err(bad());
        }
        let count = |v: i64| usize::try_from(v).map_err(|_| bad());
        let bounds = &head[3..];
        let mut a: [&[i32]; PLANNED] = [&[]; PLANNED];
        for (k, slot) in a.iter_mut().enumerate() {
            let (lo, hi) = (count(bounds[k])?, count(bounds[k + 1])?);
            *slot = packed.get(lo..hi).ok_or_else(bad)?;
        }
        Ok(Plan {
            n: count(head[0])?,
            n_chain: count(head[1])?,
            n_barrier: count(head[2])?,
            a,
        })
    }

    /// The span nodes (chain, then p2p positions): those a step's `order` puts rows at.
    fn n_spans(&self) -> usize {
        (self.n.saturating_sub(self.n_barrier)).saturating_sub(self.get(P::Sends).len())
    }

    /// Whether every index of the plan is within what it indexes (`drafted` then reads it unchecked: a
    /// plan is checked once, when it is made, not on every step drafted on it).
    fn check(&self) -> Result<(), &'static str> {
        // (a plan's indices are i32: larger counts are refused before any sum of them is formed)
        if [self.n, self.n_chain, self.n_barrier]
            .iter()
            .any(|&c| c > i32::MAX as usize)
        {
            return Err("more nodes than a plan indexes");
        }
        let (n, n_chain, n_barrier) = (self.n as i64, self.n_chain as i64, self.n_barrier as i64);
        let n_members = self.get(P::Mi).len();
        let (n_sends, n_recvs) = (self.get(P::Sends).len(), self.get(P::Recvs).len());
        if n_chain + n_barrier + n_sends as i64 > n {
            return Err("more chain positions, barriers and launches than nodes");
        }
        let n_spans = self.n_spans() as i64;
        let p2p = n_spans - n_chain;
        let prev = self.get(P::Prev);
        let sized = [
            (P::Sync, n_chain as usize),
            (P::Prev, n_chain as usize),
            (P::Member, n_chain as usize),
            (P::Rank, n_chain as usize),
            (P::Mb, n_chain as usize),
            (P::BarrierOf, n_members),
            (P::BarrierNode, n_members),
            (P::HasPrev, n_members),
            (P::Gate, n_members),
            (P::AsyncPeerNode, self.get(P::AsyncPeer).len()),
            (P::LaunchSends, n_sends),
            (P::SendRank, n_sends),
            (P::MatchedFrom, self.get(P::Matched).len()),
            (P::CompGroup, self.get(P::Comp).len()),
            (P::RecvGroup, n_recvs),
            (P::RecvRank, n_recvs),
            (P::RecvMb, n_recvs),
        ];
        if sized.iter().any(|&(p, len)| self.get(p).len() != len) {
            return Err("an array of the wrong length");
        }
        let within = |p: P, lo: i64, hi: i64| {
            self.get(p)
                .iter()
                .all(|&v| lo <= v as i64 && (v as i64) < hi)
        };
        let ranges = [
            (P::Prev, -1, n_chain),
            (P::Mi, 0, n_chain),
            (P::BarrierOf, 0, n_barrier),
            (P::BarrierNode, 0, n),
            (P::Gate, -1, n),
            (P::Ungated, 0, n_members as i64),
            (P::AsyncPeer, 0, n_members as i64),
            (P::AsyncPeerNode, 0, n_spans),
            (P::Plain, 0, n_chain),
            (P::Source, 0, n_chain),
            (P::After, 0, n_chain),
            (P::Onto, 0, n_chain),
            (P::Sends, 0, p2p),
            (P::LaunchSends, 0, n),
            (P::Recvs, 0, p2p),
            (P::Matched, 0, n_recvs as i64),
            (P::MatchedFrom, 0, n),
            (P::Comp, 0, n_chain),
        ];
        if ranges.iter().any(|&(p, lo, hi)| !within(p, lo, hi)) {
            return Err("an index out of range");
        }
        // (these read their previous span's)
        let follows = |p: P| self.get(p).iter().all(|&k| prev[k as usize] >= 0);
        if !(follows(P::Plain) && follows(P::After) && follows(P::Onto)) {
            return Err("a position without a previous span read as following one");
        }
        let (mi, has_prev) = (self.get(P::Mi), self.get(P::HasPrev));
        if mi
            .iter()
            .zip(has_prev)
            .any(|(&m, &h)| h != 0 && prev[m as usize] < 0)
        {
            return Err("a barrier member without a previous span read as following one");
        }
        Ok(())
    }

    fn get(&self, p: P) -> &'a [i32] {
        self.a[p as usize]
    }
}

fn at(i: impl Into<i64>) -> usize {
    usize::try_from(i.into()).expect("a plan index is not negative")
}

struct Draft<'a> {
    start: &'a [f64],
    end: &'a [f64],
    order: &'a [i64],
    floor: &'a mut [f64],
    intrinsic: &'a mut [f64],
    gap: Vec<f64>,
    host: Vec<f64>,
    pushed: Vec<f64>,
    src: &'a mut [i64],
    dst: &'a mut [i64],
    edges: usize, // (may exceed `src`'s length: the caller's bound was short, an error)
}

impl Draft<'_> {
    fn start_at(&self, k: usize) -> f64 {
        self.start[at(self.order[k])]
    }

    fn end_at(&self, k: usize) -> f64 {
        self.end[at(self.order[k])]
    }

    /// The row of the plan's `i`th receive.
    fn recv_row(&self, p: &Plan, i: usize) -> usize {
        at(self.order[p.n_chain + at(p.get(P::Recvs)[i])])
    }

    /// An edge, written into the caller's arrays (not gathered first: ~30 MB at 16k ranks).
    fn edge(&mut self, src: impl Into<i64>, dst: impl Into<i64>) {
        if let (Some(s), Some(t)) = (self.src.get_mut(self.edges), self.dst.get_mut(self.edges)) {
            (*s, *t) = (src.into(), dst.into());
        }
        self.edges += 1;
    }

    /// draft.py `host_time`.
    fn host_time(&mut self, p: &Plan) {
        let (prev, member) = (p.get(P::Prev), p.get(P::Member));
        for k in 0..p.n_chain {
            self.intrinsic[k] -= self.host[k];
        }
        self.pushed.fill(0.0);
        for &k in p.get(P::Onto) {
            self.pushed[at(prev[at(k)])] = self.gap[at(k)];
        }
        for (k, &m) in member.iter().enumerate().take(p.n_chain) {
            let host = if m != 0 { 0.0 } else { self.gap[k] };
            self.host[k] = host + self.pushed[k];
            self.intrinsic[k] += self.host[k];
        }
    }
}

/// draft.py `drafted` (without typical transfer times: the caller's plan has no lone blocking transfer).
/// Each part's temporaries go before the next part's are made (a 16k-rank step's draft is the high-water
/// of its job's close).
fn drafted(d: &mut Draft, p: &Plan, tol: f64, span_len: f64) {
    let n_chain = p.n_chain;
    for (k, &s) in p.get(P::Sync).iter().enumerate().take(n_chain) {
        d.intrinsic[k] = if s != 0 {
            0.0
        } else {
            d.end_at(k) - d.start_at(k)
        };
    }
    program_order(d, p);
    d.host_time(p);
    sends(d, p, tol, span_len);
    let Some(consumers) = recvs(d, p, tol, span_len) else {
        return;
    };
    // not host time
    let prev = p.get(P::Prev);
    for &(c, i) in &consumers {
        let (c, ready) = (c as usize, d.end[d.recv_row(p, i as usize)]);
        if prev[c] >= 0 {
            let own = maximum(0.0, d.start_at(c) - maximum(d.end_at(at(prev[c])), ready));
            d.gap[c] = minimum(d.gap[c], own);
        }
    }
    d.host_time(p);
}

/// draft.py `program_order`, with `external_arrivals` (without host time).
fn program_order(d: &mut Draft, p: &Plan) {
    let prev = p.get(P::Prev);
    let mi = p.get(P::Mi);
    let mut external = vec![f64::NEG_INFINITY; mi.len()];
    for (&i, &node) in p.get(P::AsyncPeer).iter().zip(p.get(P::AsyncPeerNode)) {
        external[at(i)] = d.start_at(at(node));
    }
    for &k in p.get(P::Plain) {
        d.edge(prev[at(k)], k);
    }
    let (barrier_node, has_prev, gate) = (p.get(P::BarrierNode), p.get(P::HasPrev), p.get(P::Gate));
    for (&b, &m) in barrier_node.iter().zip(mi) {
        d.edge(b, m);
    }
    for i in 0..mi.len() {
        if has_prev[i] != 0 {
            d.edge(prev[at(mi[i])], barrier_node[i]);
        }
    }
    let arrivals: Vec<f64> = mi.iter().map(|&m| d.start_at(at(m))).collect();
    for i in 0..mi.len() {
        if has_prev[i] == 0 {
            let b = at(barrier_node[i]);
            d.floor[b] = maximum(d.floor[b], arrivals[i]);
        }
    }
    for i in 0..mi.len() {
        if gate[i] >= 0 {
            d.edge(gate[i], barrier_node[i]);
        }
    }
    for &i in p.get(P::Ungated) {
        let (i, b) = (at(i), at(barrier_node[at(i)]));
        d.floor[b] = maximum(d.floor[b], external[i]);
    }
    let barrier_of = p.get(P::BarrierOf);
    let mut release = vec![f64::NEG_INFINITY; p.n_barrier];
    for i in 0..mi.len() {
        let b = at(barrier_of[i]);
        release[b] = maximum(release[b], maximum(arrivals[i], external[i]));
    }
    for i in 0..mi.len() {
        let m = at(mi[i]);
        d.intrinsic[m] = maximum(0.0, d.end_at(m) - release[at(barrier_of[i])]);
    }
    for &k in p.get(P::Source) {
        d.floor[at(k)] = d.start_at(at(k));
    }
    for &k in p.get(P::After) {
        let k = at(k);
        d.gap[k] = maximum(0.0, d.start_at(k) - d.end_at(at(prev[k])));
    }
}

/// draft.py `transfers`: its sends.
fn sends(d: &mut Draft, p: &Plan, tol: f64, span_len: f64) {
    let n_chain = p.n_chain;
    let rank = p.get(P::Rank);
    let (sends, launch, send_rank) = (p.get(P::Sends), p.get(P::LaunchSends), p.get(P::SendRank));
    let row = |d: &Draft, i: usize| at(d.order[n_chain + at(sends[i])]);
    // per send: the chain position it is launched after, or -1 (draft.py `launched_after`)
    let after: Vec<i32> = if n_chain == 0 || sends.is_empty() {
        vec![-1; sends.len()]
    } else {
        let key: Vec<f64> = (0..n_chain)
            .map(|k| rank[k] as f64 * span_len + d.end_at(k))
            .collect();
        let want: Vec<f64> = (0..sends.len())
            .map(|i| send_rank[i] as f64 * span_len + d.start[row(d, i)] + tol)
            .collect();
        let places = searchsorted(&key, &want, true);
        drop((key, want));
        places
            .iter()
            .zip(send_rank)
            .map(|(&q, &rk)| {
                let j = q as i64 - 1;
                if j >= 0 && rank[j as usize] == rk {
                    j as i32
                } else {
                    -1
                }
            })
            .collect()
    };
    for i in 0..sends.len() {
        if after[i] >= 0 {
            d.edge(after[i], launch[i]);
        }
    }
    for i in 0..sends.len() {
        let (l, r) = (at(launch[i]), row(d, i));
        if after[i] >= 0 {
            let j = at(after[i]);
            d.intrinsic[l] = maximum(0.0, d.start[r] - d.end_at(j) - d.pushed[j]);
        } else {
            d.floor[l] = d.start[r];
        }
    }
    for i in 0..sends.len() {
        d.edge(launch[i], (n_chain + at(sends[i])) as i64);
    }
    for (i, &s) in sends.iter().enumerate() {
        let r = row(d, i);
        d.intrinsic[n_chain + at(s)] = d.end[r] - d.start[r];
    }
}

/// draft.py `transfers`: its receives; returns the compute spans that consume one (chain positions) and
/// the receives they consume (in the plan's `recvs`), None without compute spans.
fn recvs(d: &mut Draft, p: &Plan, tol: f64, span_len: f64) -> Option<Vec<(u32, u32)>> {
    let n_chain = p.n_chain;
    let (recvs, matched) = (p.get(P::Recvs), p.get(P::Matched));
    for (&from, &i) in p.get(P::MatchedFrom).iter().zip(matched) {
        d.edge(from, (n_chain + at(recvs[at(i)])) as i64);
    }
    let mut unmatched = vec![true; recvs.len()];
    for &i in matched {
        unmatched[at(i)] = false;
    }
    for (i, _) in unmatched.iter().enumerate().filter(|(_, &u)| u) {
        let (node, r) = (n_chain + at(recvs[i]), d.recv_row(p, i));
        d.floor[node] = d.start[r];
        d.intrinsic[node] = d.end[r] - d.start[r];
    }
    drop(unmatched);
    let comp = p.get(P::Comp);
    if comp.is_empty() {
        return None;
    }
    let comp_group = p.get(P::CompGroup);
    let comp_key: Vec<f64> = comp
        .iter()
        .zip(comp_group)
        .map(|(&k, &g)| g as f64 * span_len + d.start_at(at(k)))
        .collect();
    let mut by_start: Vec<u32> = (0..comp.len() as u32).collect(); // (a plan's positions fit int32)
    by_start.sort_by(|&a, &b| numpy_order(comp_key[a as usize], comp_key[b as usize]));
    let sorted: Vec<f64> = by_start.iter().map(|&i| comp_key[i as usize]).collect();
    drop(comp_key);
    let (recv_group, recv_rank, recv_mb) =
        (p.get(P::RecvGroup), p.get(P::RecvRank), p.get(P::RecvMb));
    let want: Vec<f64> = (0..recvs.len())
        .map(|i| recv_group[i] as f64 * span_len + d.end[d.recv_row(p, i)] - tol)
        .collect();
    let places = searchsorted(&sorted, &want, false);
    drop((sorted, want));
    let (rank, mb) = (p.get(P::Rank), p.get(P::Mb));
    let n_comp = comp.len();
    let mut consumers = Vec::new();
    for (i, &q) in places.iter().enumerate() {
        let q = q as usize;
        let consumer = at(comp[by_start[q.min(n_comp - 1)] as usize]);
        if q < n_comp && rank[consumer] == recv_rank[i] && mb[consumer] == recv_mb[i] {
            d.edge((n_chain + at(recvs[i])) as i64, consumer as i64);
            consumers.push((consumer as u32, i as u32));
        }
    }
    Some(consumers)
}

/// Whether a plan (`head`, `packed`: as `step_draft` reads them) is well formed: ValueError when it is not,
/// naming what is wrong. A plan is checked once, when it is made (streams/engine/draft.py, `packed`), so
/// that a step drafted on it reads it without checking each index.
#[pyfunction]
pub fn step_plan_check(head: PyBuffer<i64>, packed: PyBuffer<i32>) -> PyResult<()> {
    let plan = Plan::of(items(&head, "head")?, items(&packed, "packed")?)?;
    plan.check()
        .map_err(|what| PyValueError::new_err(format!("step_draft: a malformed plan: {what}")))
}

/// Fill `floor` and `intrinsic` (float64 per node, as the definition makes them: -inf and 0) and the
/// first edges of `src` and `dst` (int64, at least as many as the step has) with a step's draft on its
/// plan (`head`: nodes, chain positions, barriers, then where each planned array begins in `packed`;
/// checked by `step_plan_check` when it was made); `start`, `end`: per row; `order`: the rows in node
/// order. Returns the number of edges.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn step_draft(
    head: PyBuffer<i64>,
    packed: PyBuffer<i32>,
    start: PyBuffer<f64>,
    end: PyBuffer<f64>,
    order: PyBuffer<i64>,
    tol: f64,
    span_len: f64,
    floor: PyBuffer<f64>,
    intrinsic: PyBuffer<f64>,
    src: PyBuffer<i64>,
    dst: PyBuffer<i64>,
) -> PyResult<usize> {
    let plan = Plan::of(items(&head, "head")?, items(&packed, "packed")?)?;
    let (start, end, order) = (
        items(&start, "start")?,
        items(&end, "end")?,
        items(&order, "order")?,
    );
    let writable =
        |b: &PyBuffer<f64>, n: usize| !b.readonly() && b.is_c_contiguous() && b.item_count() == n;
    let rows = start.len() as u64;
    if start.len() != end.len()
        || order.len() != plan.n_spans()
        || !order.iter().all(|&r| (r as u64) < rows) // (a negative row wraps to a large one)
        || !writable(&floor, plan.n)
        || !writable(&intrinsic, plan.n)
        || src.readonly()
        || dst.readonly()
        || !src.is_c_contiguous()
        || !dst.is_c_contiguous()
    {
        return Err(PyValueError::new_err("step_draft: bad arguments"));
    }
    // SAFETY: writable C-contiguous buffers of `item_count` items held by their PyBuffers for this call; the
    // caller passes four distinct fresh arrays, none of them an input.
    let (floor, intrinsic, src, dst) = unsafe {
        (
            std::slice::from_raw_parts_mut(floor.buf_ptr() as *mut f64, floor.item_count()),
            std::slice::from_raw_parts_mut(intrinsic.buf_ptr() as *mut f64, intrinsic.item_count()),
            std::slice::from_raw_parts_mut(src.buf_ptr() as *mut i64, src.item_count()),
            std::slice::from_raw_parts_mut(dst.buf_ptr() as *mut i64, dst.item_count()),
        )
    };
    let n_chain = plan.n_chain;
    let mut d = Draft {
        start,
        end,
        order,
        floor,
        intrinsic,
        gap: vec![0.0; n_chain],
        host: vec![0.0; n_chain],
        pushed: vec![0.0; n_chain],
        src,
        dst,
        edges: 0,
    };
    drafted(&mut d, &plan, tol, span_len);
    if d.edges > d.src.len().min(d.dst.len()) {
        return Err(PyValueError::new_err(
            "step_draft: src and dst are too short",
        ));
    }
    Ok(d.edges)
}

/// Python's `max(a, b)` of two floats: the second only if it is greater.
fn py_max(a: f64, b: f64) -> f64 {
    if b > a {
        b
    } else {
        a
    }
}

/// Python's `min(a, b)` of two floats: the second only if it is less.
fn py_min(a: f64, b: f64) -> f64 {
    if b < a {
        b
    } else {
        a
    }
}

/// stepgraph.py `quantile` of values without NaN (not empty): numpy's linear interpolation between the two
/// neighbouring order statistics, as that definition computes it.
fn quantile(x: &mut [f64], q: f64) -> f64 {
    let at = (x.len() - 1) as f64 * q;
    let cmp = |a: &f64, b: &f64| a.partial_cmp(b).expect("no NaN");
    if at >= (x.len() - 1) as f64 {
        return x.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    }
    let lo = at.floor() as usize;
    let (_, &mut a, above) = x.select_nth_unstable_by(lo, cmp);
    let b = above.iter().copied().fold(f64::INFINITY, f64::min); // (the order statistic after a)
    let t = at - lo as f64;
    if t < 0.5 {
        a + (b - a) * t
    } else {
        b - (b - a) * (1.0 - t)
    }
}

/// stepgraph.py `tolerance` of a step (`order`: its rows in node order; `pairs`: the chain positions `k`
/// whose next one is of the same rank; `limits`: EPS, MAX_TOLERANCE, MAX_TOLERANCE_SHARE), as it computes
/// it; None when a time is not finite (the caller then runs the definition).
#[pyfunction]
pub fn step_tolerance(
    start: PyBuffer<f64>,
    end: PyBuffer<f64>,
    order: PyBuffer<i64>,
    pairs: PyBuffer<i64>,
    limits: (f64, f64, f64),
) -> PyResult<Option<f64>> {
    let (start, end, order) = (
        items(&start, "start")?,
        items(&end, "end")?,
        items(&order, "order")?,
    );
    let pairs = items(&pairs, "pairs")?;
    let (eps, max_tolerance, max_share) = limits;
    if !start.iter().chain(end).all(|t| t.is_finite()) {
        return Ok(None);
    }
    let mut resolution = f64::INFINITY;
    let mut overlap = Vec::new();
    for &k in pairs {
        let k = at(k);
        let apart = start[at(order[k + 1])] - end[at(order[k])];
        if apart != 0.0 {
            resolution = resolution.min(apart.abs());
        }
        if apart < 0.0 {
            overlap.push(-apart);
        }
    }
    if resolution == f64::INFINITY {
        resolution = 0.0;
    }
    let jitter = if overlap.is_empty() {
        0.0
    } else {
        quantile(&mut overlap, 0.9)
    };
    let last = end.iter().fold(0.0, |m: f64, &t| maximum(m, t));
    let cap = py_min(max_tolerance, max_share * last);
    Ok(Some(py_max(
        eps,
        py_min(2.0 * py_max(resolution, jitter), cap),
    )))
}
