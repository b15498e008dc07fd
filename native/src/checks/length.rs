//! `streamwatch.checks.length`: response length explosion and collapse, truncation saturation.

use std::collections::VecDeque;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use serde::{Deserialize, Serialize};

use super::{Named, Settings};
use crate::detectors::{median, push_bounded, Ewma, Persistence, SustainedShift, Window};
use crate::py::{fmt, max, Found, Severity};

pub const KINDS: &[&str] = &["length_explosion", "length_collapse"];
pub const TRUNCATION_KINDS: &[&str] = &["truncation_saturation"];

const FLOOR: f64 = 1e-9;

#[derive(Serialize, Deserialize)]
pub struct LengthCheck {
    named: Named,
    warmup: usize,
    growth_window: usize,
    explosion_growth: f64,
    explosion_ratio: f64,
    explosion_long_window: usize,
    explosion_long_growth: f64,
    collapse_ratio: f64,
    warm: Vec<f64>,
    reference: f64,
    smooth: Ewma,
    recent: VecDeque<f64>,
    long: VecDeque<f64>,
    steps: Window,
    last_log: f64,
    shift: SustainedShift,
    peak: f64,
    explode: Persistence,
    collapse: Persistence,
}

impl LengthCheck {
    pub fn new(py: Python<'_>, named: Named, s: &Settings) -> PyResult<Self> {
        let growth_window = s.usize("growth_window")?;
        let explosion_long_window = s.usize("explosion_long_window")?;
        Ok(LengthCheck {
            named,
            warmup: s.usize("warmup")?,
            growth_window,
            explosion_growth: s.f64("explosion_growth")?,
            explosion_ratio: s.f64("explosion_ratio")?,
            explosion_long_window,
            explosion_long_growth: s.f64("explosion_long_growth")?,
            collapse_ratio: s.f64("collapse_ratio")?,
            warm: Vec::new(),
            reference: f64::NAN,
            smooth: Ewma::new(s.f64("smoothing")?),
            recent: VecDeque::with_capacity(growth_window + 1),
            long: VecDeque::with_capacity(explosion_long_window + 1),
            steps: Window::new(30),
            last_log: f64::NAN,
            shift: SustainedShift::new(py, "up")?,
            peak: f64::NEG_INFINITY,
            explode: Persistence::new(2),
            collapse: Persistence::new(2),
        })
    }

    pub fn update(&mut self, py: Python<'_>, step: i64, x: f64) -> PyResult<Vec<PyObject>> {
        let value = max(x, FLOOR);
        let smooth = self.smooth.update(value);
        let log_x = value.ln();
        let step_growth = log_x - self.last_log;
        self.last_log = log_x;
        if self.warm.len() < self.warmup {
            self.warm.push(value);
            if self.warm.len() == self.warmup {
                self.reference = median(self.warm.iter().copied());
            }
            self.steps.update(step_growth);
            return Ok(Vec::new());
        }
        let noise = max(self.steps.robust_sd(), 1e-3);
        let ph = self.shift.update(py, step_growth / noise)?;
        self.steps.update(step_growth);
        push_bounded(&mut self.recent, self.growth_window + 1, smooth);
        push_bounded(&mut self.long, self.explosion_long_window + 1, smooth);
        self.peak = max(self.peak, smooth);
        let mut found = Vec::new();
        let explosion = self.judge_explosion(py, step, x, smooth, ph)?;
        if self.explode.update(explosion.is_some()) {
            if let Some(f) = explosion {
                found.push(f);
            }
        }
        let collapse = self.judge_collapse(py, step, x, smooth)?;
        if self.collapse.update(collapse.is_some()) {
            if let Some(f) = collapse {
                found.push(f);
            }
        }
        Ok(found)
    }

    /// Python's `min(self._long)` (the first smallest) and `self._long.index(low)`.
    fn long_low(&self) -> (f64, usize) {
        let mut low = self.long[0];
        let mut at = 0;
        for (i, &v) in self.long.iter().enumerate().skip(1) {
            if v < low {
                low = v;
                at = i;
            }
        }
        // `index` finds a NaN by identity: the one `min` returned
        let index = self.long.iter().position(|&v| v == low).unwrap_or(at);
        (low, index)
    }

    fn judge_explosion(
        &self,
        py: Python<'_>,
        step: i64,
        x: f64,
        smooth: f64,
        ph: bool,
    ) -> PyResult<Option<PyObject>> {
        let mut growth = smooth / self.recent[0];
        let to_ref = smooth / self.reference;
        let why = if growth >= self.explosion_growth {
            format!("grew {}x in {} steps", fmt(py, growth, ".2f")?, self.recent.len() - 1)
        } else if ph && growth >= 1.0 + (self.explosion_growth - 1.0) / 2.0 {
            format!(
                "is climbing steadily ({}x in {} steps)",
                fmt(py, growth, ".2f")?,
                self.recent.len() - 1
            )
        } else {
            let (low, index) = self.long_low();
            if smooth >= self.explosion_long_growth * low {
                let since = self.long.len() - 1 - index;
                growth = smooth / low;
                format!("grew {}x in {since} steps", fmt(py, growth, ".2f")?)
            } else {
                return Ok(None);
            }
        };
        let severity =
            if to_ref >= self.explosion_ratio { Severity::Critical } else { Severity::Warning };
        let metric = &self.named.metric;
        let evidence = PyDict::new(py);
        evidence.set_item("value", x)?;
        evidence.set_item("smoothed", smooth)?;
        evidence.set_item("reference", self.reference)?;
        evidence.set_item("growth_in_window", growth)?;
        evidence.set_item("ratio_to_reference", to_ref)?;
        evidence.set_item("page_hinkley", ph)?;
        let found = Found {
            kind: KINDS[0],
            indicator: &self.named.indicator,
            metric,
            severity,
            step,
            message: format!(
                "response length exploding: {metric} {why}, {}x its start",
                fmt(py, to_ref, ".2f")?
            ),
            evidence,
            onset_step: None,
        };
        Ok(Some(found.build(py)?))
    }

    fn judge_collapse(
        &self,
        py: Python<'_>,
        step: i64,
        x: f64,
        smooth: f64,
    ) -> PyResult<Option<PyObject>> {
        let r = smooth / self.peak;
        if r >= self.collapse_ratio {
            return Ok(None);
        }
        let severity =
            if r < self.collapse_ratio / 2.0 { Severity::Critical } else { Severity::Warning };
        let metric = &self.named.metric;
        let evidence = PyDict::new(py);
        evidence.set_item("value", x)?;
        evidence.set_item("smoothed", smooth)?;
        evidence.set_item("peak", self.peak)?;
        evidence.set_item("ratio_to_peak", r)?;
        let found = Found {
            kind: KINDS[1],
            indicator: &self.named.indicator,
            metric,
            severity,
            step,
            message: format!(
                "response length collapsing: {metric} is {}x its peak",
                fmt(py, r, ".2f")?
            ),
            evidence,
            onset_step: None,
        };
        Ok(Some(found.build(py)?))
    }
}

#[derive(Serialize, Deserialize)]
pub struct TruncationCheck {
    named: Named,
    warmup: usize,
    truncation_warning: f64,
    truncation_critical: f64,
    truncation_rise: f64,
    warm: Vec<f64>,
    baseline: f64,
    smooth: Ewma,
    high: Persistence,
}

impl TruncationCheck {
    pub fn new(_py: Python<'_>, named: Named, s: &Settings) -> PyResult<Self> {
        Ok(TruncationCheck {
            named,
            warmup: s.usize("warmup")?,
            truncation_warning: s.f64("truncation_warning")?,
            truncation_critical: s.f64("truncation_critical")?,
            truncation_rise: s.f64("truncation_rise")?,
            warm: Vec::new(),
            baseline: f64::NAN,
            smooth: Ewma::new(s.f64("smoothing")?),
            high: Persistence::new(2),
        })
    }

    pub fn update(&mut self, py: Python<'_>, step: i64, x: f64) -> PyResult<Vec<PyObject>> {
        let smooth = self.smooth.update(x);
        if self.warm.len() < self.warmup {
            self.warm.push(x);
            if self.warm.len() == self.warmup {
                self.baseline = median(self.warm.iter().copied());
            }
            return Ok(Vec::new());
        }
        let rise = smooth - self.baseline;
        let severity = if smooth >= self.truncation_critical {
            Severity::Critical
        } else if smooth >= self.truncation_warning && rise >= self.truncation_rise {
            Severity::Warning
        } else {
            self.high.update(false);
            return Ok(Vec::new());
        };
        if !self.high.update(true) {
            return Ok(Vec::new());
        }
        let metric = &self.named.metric;
        let evidence = PyDict::new(py);
        evidence.set_item("value", x)?;
        evidence.set_item("smoothed", smooth)?;
        evidence.set_item("baseline", self.baseline)?;
        evidence.set_item("rise", rise)?;
        let found = Found {
            kind: TRUNCATION_KINDS[0],
            indicator: &self.named.indicator,
            metric,
            severity,
            step,
            message: format!(
                "completions truncated: {metric} is {} (baseline {}); reward variance will vanish",
                fmt(py, smooth, ".0%")?,
                fmt(py, self.baseline, ".1%")?
            ),
            evidence,
            onset_step: None,
        };
        Ok(vec![found.build(py)?])
    }
}
