//! `streamwatch.checks.reward`: reward chaos (volatility jumps) and reward collapse (a
//! sustained drop from the peak).

use std::collections::VecDeque;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use serde::{Deserialize, Serialize};

use super::{Named, Settings};
use crate::detectors::{push_bounded, Ewma, Persistence, Window};
use crate::py::{fmt, max, min, Found, Severity};

pub const KINDS: &[&str] = &["reward_chaos", "reward_collapse"];

const TINY: f64 = 1e-12;
const MIN_REFERENCE: usize = 10;

/// `detrended_sd`: the sd of the residuals around the least-squares line through `values`
/// (equally spaced), from sums of the offsets from the first value; inf when the squares
/// overflow (or a value is not finite). Each of Python's `sum()`s is a plain left-to-right
/// addition from 0.0 (Python 3.11), kept here as one accumulator each, in the same order.
pub fn detrended_sd(values: &VecDeque<f64>) -> f64 {
    let n = values.len();
    let first = values[0];
    let mut total = 0.0; // sum(d)
    let mut sum_id = 0.0; // sum(map(mul, range(n), d))
    let mut sum_dd = 0.0; // sum(map(mul, d, d))
    for (i, v) in values.iter().enumerate() {
        let d = v - first;
        total += d;
        sum_id += i as f64 * d;
        sum_dd += d * d;
    }
    let nf = n as f64;
    let sxx = (n * (n * n - 1)) as f64 / 12.0;
    let sxy = sum_id - (n - 1) as f64 / 2.0 * total; // sum of (i - mid) * d[i]
    let sse = sum_dd - total * total / nf - sxy * sxy / sxx;
    if sse.is_nan() {
        // inf - inf: the squares overflowed
        return f64::INFINITY;
    }
    (max(sse, 0.0) / (n - 2) as f64).sqrt()
}

#[derive(Serialize, Deserialize)]
pub struct RewardCheck {
    named: Named,
    warmup: i64,
    chaos_ratio: f64,
    chaos_window: i64,
    chaos_floor: f64,
    collapse_fraction: f64,
    collapse_noise: f64,
    n: i64,
    low: f64,
    high: f64,
    smooth: Ewma,
    recent: VecDeque<f64>,
    recent_max: usize,
    waiting: VecDeque<(f64, bool)>,
    reference: Window,
    noise: f64,
    start: f64,
    peak: f64,
    peak_step: i64,
    chaos: Persistence,
    collapse: Persistence,
}

impl RewardCheck {
    pub fn new(_py: Python<'_>, named: Named, s: &Settings) -> PyResult<Self> {
        let chaos_window = s.int("chaos_window")?;
        let recent_max = s.usize("chaos_window")?;
        Ok(RewardCheck {
            named,
            warmup: s.int("warmup")?,
            chaos_ratio: s.f64("chaos_ratio")?,
            chaos_window,
            chaos_floor: s.f64("chaos_floor")?,
            collapse_fraction: s.f64("collapse_fraction")?,
            collapse_noise: s.f64("collapse_noise")?,
            n: 0,
            low: f64::INFINITY,
            high: f64::NEG_INFINITY,
            smooth: Ewma::new(s.f64("smoothing")?),
            recent: VecDeque::with_capacity(recent_max + 1),
            recent_max,
            waiting: VecDeque::with_capacity(recent_max + 2),
            reference: Window::new(s.usize("chaos_history")?),
            noise: f64::NAN,
            start: f64::NAN,
            peak: f64::NEG_INFINITY,
            peak_step: -1,
            chaos: Persistence::new(s.int("chaos_persist")? as u64),
            collapse: Persistence::new(s.int("collapse_persist")? as u64),
        })
    }

    pub fn update(&mut self, py: Python<'_>, step: i64, x: f64) -> PyResult<Vec<PyObject>> {
        self.n += 1;
        let smooth = self.smooth.update(x);
        self.low = min(self.low, smooth);
        self.high = max(self.high, smooth);
        push_bounded(&mut self.recent, self.recent_max, x);
        if self.n < self.warmup {
            return Ok(Vec::new());
        }
        if self.n == self.warmup {
            self.start = smooth;
        }
        let mut found = Vec::new();
        if self.recent.len() == self.recent_max {
            if let Some(chaos) = self.judge_chaos(py, step, x)? {
                found.push(chaos);
            }
        }
        if smooth > self.peak {
            self.peak = smooth;
            self.peak_step = step;
        }
        if !self.noise.is_nan() {
            if let Some(collapse) = self.judge_collapse(py, step, x, smooth)? {
                found.push(collapse);
            }
        }
        Ok(found)
    }

    fn judge_chaos(&mut self, py: Python<'_>, step: i64, x: f64) -> PyResult<Option<PyObject>> {
        let recent = detrended_sd(&self.recent);
        if self.reference.len() >= MIN_REFERENCE {
            self.noise = max(self.reference.median(), TINY);
        }
        let mut alarm = false;
        let mut r = f64::NAN;
        let mut floor = f64::NAN;
        if !self.noise.is_nan() {
            // a curve that moved over a wide range is not chaotic at a tiny noise: judge
            // against a floor that is a small fraction of that range
            floor = max(self.noise, self.chaos_floor * (self.high - self.low));
            r = recent / floor;
            alarm = r > self.chaos_ratio;
        }
        self.waiting.push_back((recent, alarm));
        if self.waiting.len() as i64 > self.chaos_window {
            // no overlap with the recent window
            let (figure, was_alarm) = self.waiting.pop_front().expect("a waiting figure");
            if !was_alarm {
                self.reference.update(figure);
            }
        }
        if !self.chaos.update(alarm) {
            return Ok(None);
        }
        let severity =
            if r > 2.0 * self.chaos_ratio { Severity::Critical } else { Severity::Warning };
        let metric = &self.named.metric;
        let window = self.chaos_window;
        let evidence = PyDict::new(py);
        evidence.set_item("value", x)?;
        evidence.set_item("recent_noise_sd", recent)?;
        evidence.set_item("reference_noise_sd", floor)?;
        evidence.set_item("noise_ratio", r)?;
        evidence.set_item("window", window)?;
        let found = Found {
            kind: KINDS[0],
            indicator: &self.named.indicator,
            metric,
            severity,
            step,
            message: format!(
                "reward curve turned noisy: {metric} noise over the last {window} steps is {}x \
                 the run's own",
                fmt(py, r, ".1f")?
            ),
            evidence,
            onset_step: Some(step - self.chaos.streak as i64 - window.div_euclid(2)),
        };
        Ok(Some(found.build(py)?))
    }

    fn judge_collapse(
        &mut self,
        py: Python<'_>,
        step: i64,
        x: f64,
        smooth: f64,
    ) -> PyResult<Option<PyObject>> {
        let drop = self.peak - smooth;
        let gain = max(self.peak - self.start, 0.0);
        let noise = self.noise;
        let frac = if gain > TINY { drop / gain } else { f64::INFINITY };
        let down = drop > self.collapse_fraction * gain && drop > self.collapse_noise * noise;
        if !self.collapse.update(down) {
            return Ok(None);
        }
        let severity = if frac > 2.0 * self.collapse_fraction {
            Severity::Critical
        } else {
            Severity::Warning
        };
        let metric = &self.named.metric;
        let evidence = PyDict::new(py);
        evidence.set_item("value", x)?;
        evidence.set_item("smoothed", smooth)?;
        evidence.set_item("peak", self.peak)?;
        evidence.set_item("peak_step", self.peak_step)?;
        evidence.set_item("drop", drop)?;
        evidence.set_item("drop_fraction_of_gain", frac)?;
        evidence.set_item("noise_sd", noise)?;
        let found = Found {
            kind: KINDS[1],
            indicator: &self.named.indicator,
            metric,
            severity,
            step,
            message: format!(
                "reward collapsing: {metric} fell {} from its peak {} at step {}",
                fmt(py, drop, ".3g")?,
                fmt(py, self.peak, ".3g")?,
                self.peak_step
            ),
            evidence,
            onset_step: Some(self.peak_step),
        };
        Ok(Some(found.build(py)?))
    }
}
