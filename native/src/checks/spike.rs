//! `streamwatch.checks.spike`: loss / grad-norm / KL spikes that persist.

use pyo3::prelude::*;
use pyo3::types::PyDict;
use serde::{Deserialize, Serialize};

use super::{Named, Settings};
use crate::detectors::{Persistence, Window};
use crate::py::{fmt, max, Found, Severity};

pub const KINDS: &[&str] = &["metric_spike"];

#[derive(Serialize, Deserialize)]
pub struct SpikeCheck {
    named: Named,
    factor: f64,
    robust_z: f64,
    window: Window,
    spiking: Persistence,
    first_step: i64,
}

impl SpikeCheck {
    pub fn new(named: Named, s: &Settings) -> PyResult<Self> {
        Ok(SpikeCheck {
            named,
            factor: s.f64("factor")?,
            robust_z: s.f64("robust_z")?,
            window: Window::new(s.usize("window")?),
            spiking: Persistence::new(s.int("persist")? as u64),
            first_step: -1,
        })
    }

    pub fn update(&mut self, py: Python<'_>, step: i64, x: f64) -> PyResult<Vec<PyObject>> {
        let w = &mut self.window;
        if !w.full() {
            w.update(x);
            return Ok(Vec::new());
        }
        let med = w.median();
        let dist = (x - med).abs();
        let mut spike = dist > (self.factor - 1.0) * med.abs();
        let mut sd = f64::NAN;
        if spike {
            sd = max(w.robust_sd(), 1e-12);
            spike = dist > self.robust_z * sd;
        }
        w.update(x);
        if spike && self.spiking.streak == 0 {
            self.first_step = step;
        }
        if !self.spiking.update(spike) {
            return Ok(Vec::new());
        }
        let size = if med != 0.0 { x / med } else { f64::INFINITY };
        let severity =
            if size.abs() >= 10.0 * self.factor { Severity::Critical } else { Severity::Warning };
        let streak = self.spiking.streak;
        let metric = &self.named.metric;
        let evidence = PyDict::new(py);
        evidence.set_item("value", x)?;
        evidence.set_item("window_median", med)?;
        evidence.set_item("window_robust_sd", sd)?;
        evidence.set_item("robust_z", dist / sd)?;
        evidence.set_item("times_median", size)?;
        evidence.set_item("steps_spiking", streak)?;
        let found = Found {
            kind: KINDS[0],
            indicator: &self.named.indicator,
            metric,
            severity,
            step,
            message: format!(
                "{metric} spiking for {streak} steps: {} against a recent median of {}",
                fmt(py, x, ".4g")?,
                fmt(py, med, ".4g")?
            ),
            evidence,
            onset_step: Some(self.first_step),
        };
        Ok(vec![found.build(py)?])
    }
}
