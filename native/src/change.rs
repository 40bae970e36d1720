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

use crate::dag::{items, overlap, span};

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

/// Both tests of each of `rows` series (`x`, `y`: their windows, rows x `w`, C order; `k`: the valid length
/// of each window, at least 2 `min_side`; `sigma`, `floor`, `top`: the noise and the log squared difference's
/// bounds of each), written to `out` (rows x 5: line statistic, its split, 1 for a slope change, variance
/// statistic, its split); false (and `out` untouched) when a window has fewer than 3 valid values.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn change_tests(
    py: Python<'_>,
    x: PyBuffer<f64>,
    y: PyBuffer<f64>,
    k: PyBuffer<i64>,
    sigma: PyBuffer<f64>,
    floor: PyBuffer<f64>,
    top: PyBuffer<f64>,
    clip_at: f64,
    min_side: usize,
    out: PyBuffer<f64>,
) -> PyResult<bool> {
    let (x, y, k) = (items(&x, "x")?, items(&y, "y")?, items(&k, "k")?);
    let (sigma, floor, top) = (
        items(&sigma, "sigma")?,
        items(&floor, "floor")?,
        items(&top, "top")?,
    );
    let rows = k.len();
    let w = x.len().checked_div(rows).unwrap_or(0);
    let bad = rows == 0
        || w < 3
        || x.len() != rows * w
        || y.len() != x.len()
        || sigma.len() != rows
        || floor.len() != rows
        || top.len() != rows
        || out.item_count() != rows * 5
        || out.readonly()
        || !out.is_c_contiguous();
    if bad {
        return Err(PyValueError::new_err("change_tests: bad arguments"));
    }
    if k.iter().any(|&v| v < 3 || v > w as i64) {
        return Ok(false); // windows this short: the definition
    }
    let m = min_side as f64;
    let result = py.detach(|| {
        let mut result = vec![0.0; rows * 5];
        let (mut z, mut e, mut stat) = (vec![0.0; w], vec![0.0; w], vec![0.0; w]);
        let mut terms: HashMap<usize, LineTerms> = HashMap::new(); // per valid length: most windows are full
        for r in 0..rows {
            let kr = k[r] as usize;
            let c = terms.entry(kr).or_insert_with(|| line_terms(w, kr, m));
            let window = &x[r * w..(r + 1) * w];
            standardised(window, kr, sigma[r], clip_at * sigma[r], &mut z);
            let (line, line_at, slope) = line_glr(&z, kr, c, &mut e);
            let (var, var_at) =
                mean_glr(&y[r * w..(r + 1) * w], kr, floor[r], top[r], m, &mut stat);
            result[r * 5..(r + 1) * 5].copy_from_slice(&[
                line,
                line_at as f64,
                f64::from(u8::from(slope)),
                var,
                var_at as f64,
            ]);
        }
        result
    });
    // SAFETY: a writable C-contiguous buffer of `item_count` f64 (checked above) held by `out` for this call.
    let dest =
        unsafe { std::slice::from_raw_parts_mut(out.buf_ptr() as *mut f64, out.item_count()) };
    dest.copy_from_slice(&result);
    Ok(true)
}

/// A writable C-contiguous buffer's items (the caller has checked that no other buffer of the call shares its
/// memory: `overlap`).
pub(crate) fn items_mut<'a, T: pyo3::buffer::Element>(
    buf: &'a mut PyBuffer<T>,
    name: &str,
) -> PyResult<&'a mut [T]> {
    if buf.readonly() || !buf.is_c_contiguous() || !crate::dag::machine_order(buf) {
        return Err(PyValueError::new_err(format!(
            "{name}: not writable, contiguous and in the machine's byte order"
        )));
    }
    // SAFETY: a writable C-contiguous buffer of `item_count` items of T (its format checked by PyBuffer::get),
    // held by `buf` for the slice's lifetime; no other buffer of the call overlaps it (`overlap`).
    Ok(unsafe { std::slice::from_raw_parts_mut(buf.buf_ptr() as *mut T, buf.item_count()) })
}

/// `ChangePoint.update`'s bookkeeping of one round (`_append`, `_relearns`, `_tested`): each of `rows`
/// (unique) gets its value appended to its window in `x` (series x `w`, C order) and its row of `y` shifted
/// (its newest column left for the caller: the log of the squared difference written to `squared`, which
/// stays numpy's), its segment length `n` and sample count `seen` counted. Writes to `relearn` the positions
/// (in `rows`) of the series that learn their noise now and to `tested` those tested now (with their noise
/// as it is: the caller decides again after learning); returns how many of each.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn change_append(
    mut x: PyBuffer<f64>,
    mut y: PyBuffer<f64>,
    mut n: PyBuffer<i64>,
    mut seen: PyBuffer<i64>,
    sigma: PyBuffer<f64>,
    phase: PyBuffer<i64>,
    rows: PyBuffer<i64>,
    values: PyBuffer<f64>,
    limits: (i64, i64, i64, i64), // warmup, window, min_side, every
    mut squared: PyBuffer<f64>,
    mut relearn: PyBuffer<i64>,
    mut tested: PyBuffer<i64>,
) -> PyResult<(usize, usize)> {
    let spans = [
        span(&x),
        span(&y),
        span(&n),
        span(&seen),
        span(&squared),
        span(&relearn),
        span(&tested),
        span(&sigma),
        span(&phase),
        span(&rows),
        span(&values),
    ];
    if overlap(&spans, 7) {
        return Err(PyValueError::new_err(
            "change_append: an array written shares memory with another",
        ));
    }
    let (sigma, phase) = (items(&sigma, "sigma")?, items(&phase, "phase")?);
    let (rows, values) = (items(&rows, "rows")?, items(&values, "values")?);
    let (x, y) = (items_mut(&mut x, "x")?, items_mut(&mut y, "y")?);
    let (n, seen) = (items_mut(&mut n, "n")?, items_mut(&mut seen, "seen")?);
    let squared = items_mut(&mut squared, "squared")?;
    let (relearn, tested) = (
        items_mut(&mut relearn, "relearn")?,
        items_mut(&mut tested, "tested")?,
    );
    let (warmup, window, min_side, every) = limits;
    let series = n.len();
    let w = x.len().checked_div(series).unwrap_or(0);
    let bad = w < 1
        || window < 1
        || x.len() != series * w
        || y.len() != x.len()
        || seen.len() != series
        || sigma.len() != series
        || phase.len() != series
        || values.len() != rows.len()
        || squared.len() != rows.len()
        || relearn.len() != rows.len()
        || tested.len() != rows.len()
        || rows.iter().any(|&r| r < 0 || r as usize >= series)
        || twice(rows, series);
    if bad {
        return Err(PyValueError::new_err("change_append: bad arguments"));
    }
    let (mut relearns, mut tests) = (0, 0);
    for (i, (&r, &v)) in rows.iter().zip(values).enumerate() {
        let r = r as usize;
        let (xr, yr) = (&mut x[r * w..(r + 1) * w], &mut y[r * w..(r + 1) * w]);
        let d = if n[r] > 0 { v - xr[w - 1] } else { f64::NAN };
        squared[i] = d * d;
        xr.copy_within(1.., 0);
        xr[w - 1] = v;
        yr.copy_within(1.., 0);
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
    Ok((relearns, tests))
}

/// Whether a row (each in `0..series`) is given twice: `ChangePoint.update` takes each series once.
fn twice(rows: &[i64], series: usize) -> bool {
    let mut once = vec![false; series];
    rows.iter()
        .any(|&r| std::mem::replace(&mut once[r as usize], true))
}
