//! A decomposition's rows evaluated from the step as it is (`Walk::step_ends`): each row heals a few of a
//! large job's many nodes (a rank, a replica, a link), and only the nodes whose end it changes are
//! evaluated again, in order of evaluation from the healed nodes down, each with `dag_ends`' arithmetic (a
//! node whose end comes out the same, bit for bit, changes none of its successors). A row over a block's
//! scratch costs every node (a few ns each); here a few times more per node, for the nodes changed only:
//! the rows that change more than `1 / SPARSE` of the nodes are left to the blocks (`Walk::blocks`). Only
//! when the rows take more than one block: a block's pass over the graph costs about as much as a few of
//! its rows (a graph whose live ends fit `SCRATCH` rows several times over), and this way costs a pass
//! of its own (the step as it is) before its rows.

use super::{maximum, Healed, Layout, Walk};

/// About how much more a node evaluated here costs than a node of a row in a block (reads all over the
/// graph's arrays, against a block's rows side by side; measured 8-30x): a row is evaluated here while it
/// changes at most `nodes / SPARSE` ends, so a row left to the blocks part way has cost little more.
const SPARSE: usize = 16;

/// Per place, the places of its successors (CSR), ascending: made once per layout, when a call first
/// evaluates rows here.
pub(super) struct Successors {
    ptr: Vec<u32>,
    next: Vec<u32>,
}

impl Successors {
    pub(super) fn of(l: &Layout) -> Self {
        let n = l.order.len();
        let mut ptr = vec![0u32; n + 1];
        l.preds.iter().for_each(|&p| ptr[p as usize + 1] += 1);
        for k in 0..n {
            ptr[k + 1] += ptr[k];
        }
        let mut at: Vec<u32> = ptr[..n].to_vec();
        let mut next = vec![0u32; l.preds.len()];
        for k in 0..n {
            for &p in l.preds_of(k) {
                next[at[p as usize] as usize] = k as u32; // (places in order: each list ascending)
                at[p as usize] += 1;
            }
        }
        Successors { ptr, next }
    }

    fn of_place(&self, k: usize) -> &[u32] {
        &self.next[self.ptr[k] as usize..self.ptr[k + 1] as usize]
    }
}

impl Walk<'_> {
    /// The step end of each row that changes few nodes' ends, into `result`; the rows left to the blocks
    /// (more changed than the budget, a healed value below 0 or NaN, a NaN end, a step ending at a zero
    /// whose sign depends on the order of the nodes), ascending. None: no row is evaluated here (a row
    /// listed only by a walk over every node, rows that fit one block, a base below 0 or NaN, no row within
    /// the budget).
    /// With no duration below 0 each row's latest end is one of the sinks' (`Walk::blocks`): the changed
    /// sinks' or the latest of the others, as the step is.
    pub(super) fn sparse(
        &self,
        base: &[f64],
        result: &mut [f64],
        rows: &impl Healed,
    ) -> Option<Vec<usize>> {
        let n = self.floor.len();
        let budget = n / SPARSE;
        let mut healed = Vec::new();
        let within = |r: usize, healed: &mut Vec<(usize, f64)>| {
            rows.row(r, healed) && healed.len() <= budget
        };
        if n == 0
            || self.block_rows(result.len()) == result.len()
            || !(0..result.len()).any(|r| within(r, &mut healed))
            || !base.iter().all(|&d| d >= 0.0)
        {
            return None;
        }
        let by_place = |values: &[f64]| -> Vec<f64> {
            self.order.iter().map(|&i| values[i as usize]).collect()
        };
        let (floor, mut dur) = (by_place(self.floor), by_place(base));
        let mut end = vec![0.0; n]; // per place: its end in the step, then in the row being evaluated
        for k in 0..n {
            end[k] = self.end_at(k, &end, floor[k], dur[k]);
        }
        if end.iter().any(|e| e.is_nan()) {
            return None;
        }
        let next = self.l.successors.get_or_init(|| Successors::of(self.l));
        let mut latest = self.sinks.clone(); // by their end in the step, latest first
        latest.sort_unstable_by(|&a, &b| end[b as usize].total_cmp(&end[a as usize]));
        let mut left = Vec::new();
        let mut due = Due::of(n);
        let (mut changed, mut saved) = (Vec::new(), Vec::new());
        for (r, out) in result.iter_mut().enumerate() {
            if !within(r, &mut healed) || !healed.iter().all(|&(_, v)| v >= 0.0) {
                left.push(r);
                continue;
            }
            due.next_row();
            for &(i, v) in &healed {
                let k = self.place[i] as usize;
                saved.push((k, dur[k]));
                dur[k] = v; // (a node listed twice: its later value)
                due.add(k);
            }
            let (mut evaluated, mut nan) = (0, false);
            while let Some(k) = due.pop() {
                evaluated += 1;
                if evaluated > budget {
                    break;
                }
                let e = self.end_at(k, &end, floor[k], dur[k]);
                if e.to_bits() != end[k].to_bits() {
                    changed.push((k, end[k]));
                    end[k] = e;
                    nan |= e.is_nan();
                    next.of_place(k).iter().for_each(|&s| due.add(s as usize));
                }
            }
            let mut peak = f64::NEG_INFINITY;
            let sinks = due.visited.iter().filter(|&&k| next.of_place(k).is_empty());
            let unchanged = latest.iter().map(|&k| k as usize).find(|&k| !due.queued(k));
            for &k in sinks.chain(unchanged.as_ref()) {
                peak = if end[k] > peak { end[k] } else { peak };
            }
            if evaluated > budget || nan || peak == 0.0 {
                left.push(r);
            } else {
                *out = peak;
            }
            changed.drain(..).rev().for_each(|(k, e)| end[k] = e);
            saved.drain(..).rev().for_each(|(k, d)| dur[k] = d);
            due.drop_queued();
        }
        Some(left)
    }
}

/// The places a row evaluates, taken in order of evaluation: a place is queued when a node before it
/// changes (its successors come after it: a bit per place, found again by a scan forward from the place
/// evaluated last, never behind it), and is evaluated after all its predecessors.
struct Due {
    bits: Vec<u64>,      // per place, whether it is queued and not yet evaluated
    seen: Vec<u32>,      // per place, the last row (from 1) that queued it
    visited: Vec<usize>, // the places queued in the row
    word: usize,         // where the scan is
    row: u32,
}

impl Due {
    fn of(n: usize) -> Self {
        Due {
            bits: vec![0; n.div_ceil(64)],
            seen: vec![0; n],
            visited: Vec::new(),
            word: usize::MAX,
            row: 0,
        }
    }

    /// Ready for the next row.
    fn next_row(&mut self) {
        self.visited.clear();
        self.word = usize::MAX;
        self.row += 1;
    }

    fn add(&mut self, k: usize) {
        if self.seen[k] != self.row {
            self.seen[k] = self.row;
            self.visited.push(k);
            self.bits[k / 64] |= 1 << (k % 64);
            self.word = self.word.min(k / 64);
        }
    }

    /// Whether the row queued place `k`.
    fn queued(&self, k: usize) -> bool {
        self.seen[k] == self.row
    }

    /// The first queued place, taken off the queue.
    fn pop(&mut self) -> Option<usize> {
        while self.word < self.bits.len() {
            let w = self.bits[self.word];
            if w != 0 {
                self.bits[self.word] = w & (w - 1);
                return Some(self.word * 64 + w.trailing_zeros() as usize);
            }
            self.word += 1;
        }
        None
    }

    /// The queue emptied (a row left before its end).
    fn drop_queued(&mut self) {
        self.visited
            .iter()
            .for_each(|&k| self.bits[k / 64] &= !(1 << (k % 64)));
    }
}

impl Walk<'_> {
    /// The end of place `k` with `floor` and duration `d`, its predecessors' ends read from `end` (by
    /// place): `evaluate_row`'s arithmetic.
    fn end_at(&self, k: usize, end: &[f64], floor: f64, d: f64) -> f64 {
        match self.preds_of(k) {
            [] => floor + d,
            [p, rest @ ..] => {
                let ready = rest
                    .iter()
                    .fold(end[*p as usize], |r, q| maximum(r, end[*q as usize]));
                maximum(ready, floor) + d
            }
        }
    }
}
