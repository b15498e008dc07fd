//! `streamwatch.checks.entropy`: entropy collapse and blow-up (and, with `invert`, mean token
//! probability watched as `1 - p`).

use std::collections::VecDeque;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use serde::{Deserialize, Serialize};

use super::{Named, Settings};
use crate::detectors::{median, push_bounded, Ewma, Persistence};
use crate::py::{fmt, max, min, Found, Severity};

pub const KINDS: &[&str] = &["entropy_collapse", "entropy_blowup"];

const FLOOR: f64 = 1e-9;

/// `streamwatch.checks.base.ratio`: a / b without dividing by zero (inf when b is 0 and a
/// is not).
fn ratio(a: f64, b: f64) -> f64 {
    if b == 0.0 {
        return if a == 0.0 { 1.0 } else { f64::INFINITY.copysign(a) };
    }
    a / b
}

#[derive(Serialize, Deserialize)]
pub struct EntropyCheck {
    named: Named,
    invert: bool,
    warmup: usize,
    collapse_ratio: f64,
    collapse_critical_ratio: f64,
    fall_window: i64,
    fall_factor: f64,
    fall_min_ratio: f64,
    blowup_ratio: f64,
    rebound_factor: f64,
    warm: Vec<f64>,
    reference: f64,
    smooth: Ewma,
    /// `deque(maxlen=fall_window + 1)`
    recent: VecDeque<f64>,
    recent_maxlen: usize,
    low: f64,
    collapse: Persistence,
    blowup: Persistence,
}

impl EntropyCheck {
    pub fn new(_py: Python<'_>, named: Named, s: &Settings, invert: bool) -> PyResult<Self> {
        let fall_window = s.int("fall_window")?;
        let recent_maxlen = usize::try_from(fall_window + 1)
            .map_err(|_| pyo3::exceptions::PyValueError::new_err("maxlen must be non-negative"))?;
        Ok(EntropyCheck {
            named,
            invert,
            warmup: s.usize("warmup")?,
            collapse_ratio: s.f64("collapse_ratio")?,
            collapse_critical_ratio: s.f64("collapse_critical_ratio")?,
            fall_window,
            fall_factor: s.f64("fall_factor")?,
            fall_min_ratio: s.f64("fall_min_ratio")?,
            blowup_ratio: s.f64("blowup_ratio")?,
            rebound_factor: s.f64("rebound_factor")?,
            warm: Vec::new(),
            reference: f64::NAN,
            smooth: Ewma::new(s.f64("smoothing")?),
            recent: VecDeque::with_capacity(recent_maxlen + 1),
            recent_maxlen,
            low: f64::INFINITY,
            collapse: Persistence::new(2),
            blowup: Persistence::new(2),
        })
    }

    pub fn update(&mut self, py: Python<'_>, step: i64, x: f64) -> PyResult<Vec<PyObject>> {
        let value = max(if self.invert { 1.0 - x } else { x }, FLOOR);
        let smooth = self.smooth.update(value);
        if self.warm.len() < self.warmup {
            self.warm.push(value);
            if self.warm.len() == self.warmup {
                self.reference = max(median(self.warm.iter().copied()), FLOOR);
            }
            return Ok(Vec::new());
        }
        push_bounded(&mut self.recent, self.recent_maxlen, smooth);
        self.low = min(self.low, smooth);
        let mut found = Vec::new();
        let collapse = self.judge_collapse(py, step, smooth, x)?;
        if self.collapse.update(collapse.is_some()) {
            if let Some(finding) = collapse {
                found.push(finding);
            }
        }
        let blowup = self.judge_blowup(py, step, smooth, x)?;
        if self.blowup.update(blowup.is_some()) {
            if let Some(finding) = blowup {
                found.push(finding);
            }
        }
        Ok(found)
    }

    fn evidence<'py>(&self, py: Python<'py>, smooth: f64, x: f64) -> PyResult<Bound<'py, PyDict>> {
        let evidence = PyDict::new(py);
        evidence.set_item("value", x)?;
        evidence.set_item("smoothed", self.shown(smooth))?;
        evidence.set_item("reference", self.shown(self.reference))?;
        evidence.set_item("ratio_to_reference", smooth / self.reference)?;
        evidence.set_item("run_minimum", self.shown(self.low))?;
        Ok(evidence)
    }

    fn shown(&self, v: f64) -> f64 {
        if self.invert {
            1.0 - v
        } else {
            v
        }
    }

    fn judge_collapse(
        &self,
        py: Python<'_>,
        step: i64,
        smooth: f64,
        x: f64,
    ) -> PyResult<Option<PyObject>> {
        // the reference is at least FLOOR: no division by zero
        let r = smooth / self.reference;
        let full = self.recent.len() == self.recent_maxlen;
        let fall = if full { ratio(self.recent[0], smooth) } else { 1.0 };
        let (severity, why) = if r < self.collapse_critical_ratio {
            (Severity::Critical, format!("is {}x its start", fmt(py, r, ".3f")?))
        } else if r < self.collapse_ratio {
            (Severity::Warning, format!("is {}x its start", fmt(py, r, ".3f")?))
        } else if fall >= self.fall_factor && r < self.fall_min_ratio {
            (
                Severity::Warning,
                format!(
                    "fell {}x in {} steps to {}x its start",
                    fmt(py, fall, ".1f")?,
                    self.fall_window,
                    fmt(py, r, ".3f")?
                ),
            )
        } else {
            return Ok(None);
        };
        let evidence = self.evidence(py, smooth, x)?;
        evidence.set_item("fall_in_window", fall)?;
        let mut what = String::from("entropy collapsing");
        if self.invert {
            what.push_str(" (token probability rising towards 1)");
        }
        let metric = &self.named.metric;
        let found = Found {
            kind: KINDS[0],
            indicator: &self.named.indicator,
            metric,
            severity,
            step,
            message: format!("{what}: {metric} {why}"),
            evidence,
            onset_step: None,
        };
        Ok(Some(found.build(py)?))
    }

    fn judge_blowup(
        &self,
        py: Python<'_>,
        step: i64,
        smooth: f64,
        x: f64,
    ) -> PyResult<Option<PyObject>> {
        let above_start = smooth / self.reference;
        // `low` is the minimum of EWMAs of values of at least FLOOR: never zero
        let above_low = smooth / self.low;
        let why = if above_start > self.blowup_ratio {
            format!("is {}x its start", fmt(py, above_start, ".2f")?)
        } else if above_low > self.rebound_factor {
            format!("climbed {}x above the run's minimum", fmt(py, above_low, ".2f")?)
        } else {
            return Ok(None);
        };
        let severity = if above_start > 2.0 * self.blowup_ratio {
            Severity::Critical
        } else {
            Severity::Warning
        };
        let evidence = self.evidence(py, smooth, x)?;
        evidence.set_item("ratio_to_minimum", above_low)?;
        let metric = &self.named.metric;
        let found = Found {
            kind: KINDS[1],
            indicator: &self.named.indicator,
            metric,
            severity,
            step,
            message: format!("entropy blowing up (gibberish risk): {metric} {why}"),
            evidence,
            onset_step: None,
        };
        Ok(Some(found.build(py)?))
    }
}
