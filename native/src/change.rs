//! The change detector's two tests (streams/engine/detectors/changepoint.py, `ChangePoint._statistics`):
//! per series, the line test (a level shift or a change of slope against one line through the window) and
//! the variance test (two means of the log squared differences), with the numpy definition's values bit
//! for bit. The definition runs ~100 numpy calls a test whatever the number of series; a test of one
//! series is all call overhead there, and a few microseconds here.
//!
//! Same values: every number is computed by the same IEEE operations in the same order as the definition
//! (sums and cumulative sums row after row, `np.maximum`/`np.minimum` propagating NaN, `argmax` taking the
//! first NaN or else the first maximum); the logarithms stay in the definition (`floor`, `top`).

use std::collections::HashMap;

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::dag::{items, items_mut, overlap, span};

/// numpy's `maximum`: NaN if either is NaN, else the larger (the second when equal: 0.0 and -0.0 give -0.0).
fn maximum(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else if a > b {
        a
    } else {
        b
    }
}

/// numpy's `minimum`: NaN if either is NaN, else the smaller (the second when equal).
fn minimum(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else if a < b {
        a
    } else {
        b
    }
}

/// `np.clip` as the definition's `_clip`: `minimum(maximum(x, low), high)`.
fn clip(x: f64, low: f64, high: f64) -> f64 {
    minimum(maximum(x, low), high)
}

/// numpy's `argmax`: the first NaN, else the first largest.
fn argmax(a: &[f64]) -> usize {
    let mut best = 0;
    for (i, &v) in a.iter().enumerate() {
        if v.is_nan() {
            return i;
        }
        if v > a[best] {
            best = i;
        }
    }
    best
}

/// What the line test takes from a window's valid length `k` alone (`_line_terms`, one column).
struct LineTerms {
    grid: Vec<f64>,
    t: Vec<f64>,
    n: f64,
    st: f64,
    det: f64,
    level_den: Vec<f64>,
    bend_den: Vec<f64>,
    level_ok: Vec<bool>,
    bend_ok: Vec<bool>,
    confirmed: Vec<bool>,
}

fn line_terms(w: usize, k: usize, m: f64) -> LineTerms {
    let wf = w as f64;
    let grid: Vec<f64> = (0..w).map(|j| j as f64 / wf - 0.5).collect();
    let t: Vec<f64> = (0..w)
        .map(|j| if j >= w - k { grid[j] } else { 0.0 })
        .collect();
    // `_closed_form`: the count, sum and sum of squares of the valid positions up to each index
    let first = (w - k) as f64;
    let ww = (w * w) as f64;
    let (mut n_left, mut st_left, mut stt_left) = (vec![0.0; w], vec![0.0; w], vec![0.0; w]);
    for j in 0..w {
        let jj = maximum(j as f64, first - 1.0);
        let count = jj - first + 1.0;
        let total = (first + jj) * count / 2.0;
        let squares = (jj * (jj + 1.0) * (2.0 * jj + 1.0)
            - (first - 1.0) * first * (2.0 * first - 1.0))
            / 6.0;
        n_left[j] = count;
        st_left[j] = total / wf - 0.5 * count;
        stt_left[j] = squares / ww - total / wf + 0.25 * count;
    }
    let (n, st, stt) = (k as f64, st_left[w - 1], stt_left[w - 1]);
    let det = n * stt - st * st;
    let explained = |v1: f64, v2: f64| (stt * v1 * v1 - 2.0 * st * v1 * v2 + n * v2 * v2) / det;
    let (mut level_den, mut bend_den) = (vec![0.0; w], vec![0.0; w]);
    let (mut level_ok, mut bend_ok, mut confirmed) =
        (vec![false; w], vec![false; w], vec![false; w]);
    for j in 0..w {
        let (n_r, st_r, stt_r) = (n - n_left[j], st - st_left[j], stt - stt_left[j]);
        let g = grid[j];
        let (h, ht) = (st_r - g * n_r, stt_r - g * st_r);
        let hh = stt_r - 2.0 * g * st_r + g * g * n_r;
        level_den[j] = n_r - explained(n_r, st_r);
        bend_den[j] = hh - explained(h, ht);
        let left_ok = n_left[j] >= m;
        level_ok[j] = left_ok && n_r >= 1.0;
        bend_ok[j] = left_ok && n_r >= 2.0 * m;
        confirmed[j] = n_r >= m;
    }
    LineTerms {
        grid,
        t,
        n,
        st,
        det,
        level_den,
        bend_den,
        level_ok,
        bend_ok,
        confirmed,
    }
}

/// `_winsorise` of one window (its last `k` values valid), then `z`: the values less the newest, over `sigma`
/// (0 outside the valid ones).
fn standardised(x: &[f64], k: usize, sigma: f64, bound: f64, z: &mut [f64]) {
    let w = x.len();
    let start = w - k;
    let winsorised = |i: usize| {
        let before = if i == 0 { x[w - 1] } else { x[i - 1] };
        let after = if i == w - 1 { x[w - 3] } else { x[i + 1] };
        // the oldest valid value (when the window is not full): its two successors
        let before = if i == start && start > 0 {
            after
        } else {
            before
        };
        let med = clip(x[i], minimum(before, after), maximum(before, after));
        clip(x[i], med - bound, med + bound)
    };
    let newest = winsorised(w - 1);
    for (i, zi) in z.iter_mut().enumerate() {
        *zi = if i >= start {
            (winsorised(i) - newest) / sigma
        } else {
            0.0
        };
    }
}

/// `_line_glr` of one series: (gain over the residual noise, last index of the left side, a slope change).
fn line_glr(z: &[f64], k: usize, c: &LineTerms, e: &mut [f64]) -> (f64, usize, bool) {
    let w = z.len();
    let start = w - k;
    let (mut z_sum, mut tz_sum) = (z[0], c.t[0] * z[0]);
    for (&t, &v) in c.t.iter().zip(z).skip(1) {
        z_sum += v;
        tz_sum += t * v;
    }
    let slope = (c.n * tz_sum - c.st * z_sum) / c.det;
    let mean = (z_sum - slope * c.st) / c.n;
    for j in 0..w {
        e[j] = if j >= start {
            z[j] - mean - slope * c.t[j]
        } else {
            0.0
        };
    }
    let mut sse = e[0] * e[0];
    for &v in &e[1..] {
        sse += v * v;
    }
    let (mut gain, mut level, mut bend) = (vec![0.0; w], vec![0.0; w], vec![0.0; w]);
    let (mut sum_e, mut sum_te) = (0.0, 0.0);
    for j in 0..w {
        if j == 0 {
            (sum_e, sum_te) = (e[0], c.t[0] * e[0]);
        } else {
            sum_e += e[j];
            sum_te += c.t[j] * e[j];
        }
        let (e_r, te_r) = (-sum_e, -sum_te);
        let lv = e_r * e_r / c.level_den[j];
        let he = te_r - c.grid[j] * e_r;
        let bd = he * he / c.bend_den[j];
        level[j] = if c.level_ok[j] && lv.is_finite() {
            lv
        } else {
            f64::NEG_INFINITY
        };
        bend[j] = if c.bend_ok[j] && bd.is_finite() {
            bd
        } else {
            f64::NEG_INFINITY
        };
        gain[j] = maximum(level[j], bend[j]);
    }
    let at = argmax(&gain);
    let is_slope = bend[at] > level[at];
    let best = if c.confirmed[at] { gain[at] } else { 0.0 };
    let residual = maximum((sse - best) / (k.saturating_sub(3).max(1)) as f64, 1.0);
    (best / residual, at, is_slope)
}

/// `_mean_glr` of one series' log squared differences (clipped to `floor`..`top`; the first point of the
/// segment has none): (the best split's statistic, last index of its left side).
fn mean_glr(y: &[f64], k: usize, floor: f64, top: f64, m: f64, stat: &mut [f64]) -> (f64, usize) {
    let w = y.len();
    let count = (k - 1) as f64; // the valid differences
    let n = w as f64 - (w as f64 - count); // n_left at the last index, as the definition computes it
    let mut s_left = 0.0;
    let mut cum = vec![0.0; w];
    for j in 0..w {
        let v = if j > w - k {
            clip(y[j], floor, top)
        } else {
            0.0
        };
        s_left = if j == 0 { v } else { s_left + v };
        cum[j] = s_left;
    }
    let total = cum[w - 1];
    for j in 0..w {
        let n_left = maximum((j + 1) as f64 - (w as f64 - count), 0.0);
        let n_right = n - n_left;
        let weight = n_left * n_right / n;
        let diff = cum[j] / n_left - (total - cum[j]) / n_right;
        stat[j] = if n_left >= m && n_right >= m {
            weight * diff * diff
        } else {
            f64::NEG_INFINITY
        };
    }
    let at = argmax(stat);
    (stat[at], at)
}

/// What turns the tests' statistics into alarms (`ChangePoint`'s fields, and `LOG_CHI2_VAR` as Python has it).
struct Scoring {
    clip: f64,
    min_side: f64,
    line_a: f64,
    line_b: f64,
    var_a: f64,
    var_b: f64,
    log_chi2_var: f64,
}

/// One alarm (`ChangePoint._scored`): the last column of the old segment, the kind (0 level, 1 slope,
/// 2 variance) and the score; none when neither score is over 1 or either is NaN.
fn alarm(line: (f64, usize, bool), var: (f64, usize), n: i64, s: &Scoring) -> Option<[f64; 3]> {
    let ln = (n as f64).ln(); // the C library's log, as `streams.fpmath.log` takes it
    let line_score = line.0 / (s.line_a + s.line_b * ln);
    let var_score = var.0 / (s.var_a + s.var_b * ln) / s.log_chi2_var;
    if !(line_score > 1.0 || var_score > 1.0) || line_score.is_nan() || var_score.is_nan() {
        return None;
    }
    Some(if line_score >= var_score {
        [line.1 as f64, f64::from(u8::from(line.2)), line_score]
    } else {
        [var.1 as f64, 2.0, var_score]
    })
}

/// Both tests of each of the `tested` series (their rows in `x`, `y`: series x `w`, C order; `n`: their
/// segments' lengths, `sigma` their noise), scored: each alarm written to `out` as (position in `tested`, split,
/// kind, score), in order; how many, or None when a window has fewer than 3 valid values (the definition's).
fn alarms_of(
    x: &[f64],
    y: &[f64],
    n: &[i64],
    sigma: &[f64],
    tested: &[usize],
    s: &Scoring,
    out: &mut [f64],
) -> Option<usize> {
    let w = x.len().checked_div(n.len()).unwrap_or(0);
    if w < 3 || tested.iter().any(|&r| n[r].min(w as i64) < 3) {
        return None;
    }
    let (mut z, mut e, mut stat) = (vec![0.0; w], vec![0.0; w], vec![0.0; w]);
    let mut terms: HashMap<usize, LineTerms> = HashMap::new(); // per valid length: most windows are full
    let mut alarms = 0;
    for (i, &r) in tested.iter().enumerate() {
        let k = n[r].min(w as i64) as usize;
        let c = terms
            .entry(k)
            .or_insert_with(|| line_terms(w, k, s.min_side));
        let sg = sigma[r];
        // `_statistics`' bounds of the log squared differences: 1e-2 and 6 noise units
        let (floor, top) = (2.0 * (1e-2 * sg).ln(), 2.0 * (6.0 * sg).ln());
        standardised(&x[r * w..(r + 1) * w], k, sg, s.clip * sg, &mut z);
        let line = line_glr(&z, k, c, &mut e);
        let var = mean_glr(&y[r * w..(r + 1) * w], k, floor, top, s.min_side, &mut stat);
        if let Some([split, kind, score]) = alarm(line, var, n[r], s) {
            out[alarms * 4..(alarms + 1) * 4].copy_from_slice(&[i as f64, split, kind, score]);
            alarms += 1;
        }
    }
    Some(alarms)
}

/// `ChangePoint._alarms`: both tests of each of `rows` (series of `x`, `y`, `n`, `sigma`: windows series x `w`,
/// C order, segments' lengths, noise; each at least 2 `min_side` long, its noise known), scored with `scoring`
/// (clip, line_a, line_b, var_a, var_b, log_chi2_var); each alarm written to `out` (rows x 4: position in
/// `rows`, split, kind: 0 level, 1 slope, 2 variance, score), in order. Returns how many, or -1 (`out` not
/// all written) when a window has fewer than 3 valid values: the definition's.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn change_alarms(
    py: Python<'_>,
    x: PyBuffer<f64>,
    y: PyBuffer<f64>,
    n: PyBuffer<i64>,
    sigma: PyBuffer<f64>,
    rows: PyBuffer<i64>,
    min_side: usize,
    scoring: (f64, f64, f64, f64, f64, f64),
    mut out: PyBuffer<f64>,
) -> PyResult<i64> {
    let spans = [
        span(&out),
        span(&x),
        span(&y),
        span(&n),
        span(&sigma),
        span(&rows),
    ];
    if overlap(&spans, 1) {
        return Err(PyValueError::new_err(
            "change_alarms: out shares memory with another array",
        ));
    }
    let (x, y, n) = (items(&x, "x")?, items(&y, "y")?, items(&n, "n")?);
    let (sigma, rows) = (items(&sigma, "sigma")?, items(&rows, "rows")?);
    let out = items_mut(&mut out, "out")?;
    let series = n.len();
    let bad = x.len() != series * x.len().checked_div(series).unwrap_or(0)
        || y.len() != x.len()
        || sigma.len() != series
        || out.len() != rows.len() * 4
        || rows.iter().any(|&r| r < 0 || r as usize >= series);
    if bad {
        return Err(PyValueError::new_err("change_alarms: bad arguments"));
    }
    let s = scoring_of(min_side, scoring);
    let tested: Vec<usize> = rows.iter().map(|&r| r as usize).collect();
    let found = py.detach(|| alarms_of(x, y, n, sigma, &tested, &s, out));
    Ok(found.map_or(-1, |a| a as i64))
}

fn scoring_of(
    min_side: usize,
    (clip, line_a, line_b, var_a, var_b, log_chi2_var): (f64, f64, f64, f64, f64, f64),
) -> Scoring {
    Scoring {
        clip,
        min_side: min_side as f64,
        line_a,
        line_b,
        var_a,
        var_b,
        log_chi2_var,
    }
}

/// One round of `ChangePoint.update` (`_round`): each of `rows` (unique) gets its value appended to its window
/// in `x` (series x `w`, C order) and the log of its squared difference to `y` (`f64::ln`: the C library's log,
/// as `streams.fpmath.log` takes it), its segment length `n` and sample count `seen` counted (`_append`).
/// Writes to `due[0]` the positions (in `rows`) of the series that learn their noise now (`_relearns`) and to
/// `due[1]` those tested now with their noise as it is (`_tested`). When none learns, also runs and scores the
/// tests of those (`change_alarms`, its `out`). Returns (how many learn, how many are tested, how many alarms:
/// -1 when none was looked for, because some learn or a window is too short for the native tests).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn change_round(
    py: Python<'_>,
    mut x: PyBuffer<f64>,
    mut y: PyBuffer<f64>,
    mut n: PyBuffer<i64>,
    mut seen: PyBuffer<i64>,
    sigma: PyBuffer<f64>,
    phase: PyBuffer<i64>,
    rows: PyBuffer<i64>,
    values: PyBuffer<f64>,
    limits: (i64, i64, i64, i64), // warmup, window, min_side, every
    scoring: (f64, f64, f64, f64, f64, f64),
    mut due: PyBuffer<i64>,
    mut out: PyBuffer<f64>,
) -> PyResult<(usize, usize, i64)> {
    let spans = [
        span(&x),
        span(&y),
        span(&n),
        span(&seen),
        span(&due),
        span(&out),
        span(&sigma),
        span(&phase),
        span(&rows),
        span(&values),
    ];
    if overlap(&spans, 6) {
        return Err(PyValueError::new_err(
            "change_round: an array written shares memory with another",
        ));
    }
    let (sigma, phase) = (items(&sigma, "sigma")?, items(&phase, "phase")?);
    let (rows, values) = (items(&rows, "rows")?, items(&values, "values")?);
    let (x, y) = (items_mut(&mut x, "x")?, items_mut(&mut y, "y")?);
    let (n, seen) = (items_mut(&mut n, "n")?, items_mut(&mut seen, "seen")?);
    let (due, out) = (items_mut(&mut due, "due")?, items_mut(&mut out, "out")?);
    let (warmup, window, min_side, every) = limits;
    let series = n.len();
    let w = x.len().checked_div(series).unwrap_or(0);
    let bad = w < 1
        || window < 1
        || min_side < 0
        || x.len() != series * w
        || y.len() != x.len()
        || seen.len() != series
        || sigma.len() != series
        || phase.len() != series
        || values.len() != rows.len()
        || due.len() != 2 * rows.len()
        || out.len() != 4 * rows.len()
        || rows.iter().any(|&r| r < 0 || r as usize >= series)
        || twice(rows, series);
    if bad {
        return Err(PyValueError::new_err("change_round: bad arguments"));
    }
    let (relearn, tested) = due.split_at_mut(rows.len());
    let (mut relearns, mut tests) = (0, 0);
    for (i, (&r, &v)) in rows.iter().zip(values).enumerate() {
        let r = r as usize;
        let (xr, yr) = (&mut x[r * w..(r + 1) * w], &mut y[r * w..(r + 1) * w]);
        let d = if n[r] > 0 { v - xr[w - 1] } else { f64::NAN };
        xr.copy_within(1.., 0);
        xr[w - 1] = v;
        yr.copy_within(1.., 0);
        yr[w - 1] = (d * d).ln();
        n[r] += 1;
        seen[r] += 1;
        let k = n[r];
        // `_relearns`: at `warmup` points, then as the segment doubles, then once per window
        let refresh = (k & (k - 1)) == 0 && k > warmup && k <= window || k % window == 0;
        if sigma[r].is_nan() && k >= warmup || refresh {
            relearn[relearns] = i as i64;
            relearns += 1;
        }
        // `_tested`: the noise known, the segment long enough, and its turn
        let turn = every <= 1 || (seen[r] + phase[r]).rem_euclid(every) == 0;
        if sigma[r].is_finite() && k >= 2 * min_side && turn {
            tested[tests] = i as i64;
            tests += 1;
        }
    }
    if relearns > 0 {
        return Ok((relearns, tests, -1));
    }
    let s = scoring_of(min_side as usize, scoring);
    let picked: Vec<usize> = tested[..tests]
        .iter()
        .map(|&i| rows[i as usize] as usize)
        .collect();
    let (x, n): (&[f64], &[i64]) = (x, n);
    let found = py.detach(|| alarms_of(x, y, n, sigma, &picked, &s, out));
    Ok((relearns, tests, found.map_or(-1, |a| a as i64)))
}

/// Whether a row (each in `0..series`) is given twice: `ChangePoint.update` takes each series once.
fn twice(rows: &[i64], series: usize) -> bool {
    let mut once = vec![false; series];
    rows.iter()
        .any(|&r| std::mem::replace(&mut once[r as usize], true))
}
