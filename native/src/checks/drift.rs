//! `streamwatch.checks.drift`: generic drift (river's ADWIN, confirmed by size).
//!
//! The value, centred and scaled by its warm-up (median, robust sd), goes to ADWIN. A change
//! ADWIN finds counts only if, within the next few steps, the mean of the last few values
//! differs from the median before them by 20% of its size.

use std::collections::VecDeque;

use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::PyDict;
use serde::{Deserialize, Serialize};

use super::{Named, Settings};
use crate::detectors::{median, push_bounded, LevelShift};
use crate::py::{fmt, max, Found, Severity};

pub const KINDS: &[&str] = &["metric_drift"];

const RECENT: usize = 5;
const HISTORY: usize = 30;
const MIN_RELATIVE: f64 = 0.2;
/// `LevelShift`'s default grace period (the Python check does not set it).
const GRACE_PERIOD: i64 = 10;

static FSUM: GILOnceCell<PyObject> = GILOnceCell::new();

#[derive(Serialize, Deserialize)]
pub struct DriftCheck {
    named: Named,
    warmup: usize,
    severity: Severity,
    warm: Option<Vec<f64>>,
    center: f64,
    scale: f64,
    adwin: LevelShift,
    history: VecDeque<f64>,
    armed: u32,
}

impl DriftCheck {
    pub fn new(py: Python<'_>, named: Named, s: &Settings) -> PyResult<Self> {
        let severity = Severity::from_value(&s.text("severity")?)?;
        Ok(DriftCheck {
            named,
            warmup: s.usize("warmup")?,
            severity,
            warm: Some(Vec::new()),
            center: 0.0,
            scale: 1.0,
            adwin: LevelShift::new(py, s.f64("delta")?, s.int("clock")?, GRACE_PERIOD)?,
            history: VecDeque::with_capacity(HISTORY + 1),
            armed: 0,
        })
    }

    pub fn update(&mut self, py: Python<'_>, step: i64, x: f64) -> PyResult<Vec<PyObject>> {
        push_bounded(&mut self.history, HISTORY, x);
        if let Some(warm) = self.warm.as_mut() {
            warm.push(x);
            if warm.len() == self.warmup {
                let center = median(warm.iter().copied());
                let mad = 1.4826 * median(warm.iter().map(|v| (v - center).abs()));
                self.center = center;
                // `mad or abs(center) * 0.01 or 1.0`: only 0.0 is falsy (NaN is not)
                self.scale = if mad != 0.0 {
                    mad
                } else if center.abs() * 0.01 != 0.0 {
                    center.abs() * 0.01
                } else {
                    1.0
                };
                self.warm = None;
            }
            return Ok(Vec::new());
        }
        if self.adwin.update(py, (x - self.center) / self.scale)? {
            self.armed = RECENT as u32; // ADWIN saw a change: confirm its size over the next steps
        }
        if self.armed == 0 {
            return Ok(Vec::new());
        }
        self.armed -= 1;
        let n = self.history.len();
        let split = n.saturating_sub(RECENT);
        let recent = fmean(py, self.history.range(split..))?;
        let before = if n > RECENT { median(self.history.range(..split).copied()) } else { recent };
        let change = recent - before;
        let size = max(before.abs(), recent.abs());
        if change.abs() <= MIN_RELATIVE * size || !change.is_finite() {
            return Ok(Vec::new());
        }
        self.armed = 0;
        let rel = if before != 0.0 {
            fmt(py, change / before.abs(), "+.0%")?
        } else {
            "from zero".to_string()
        };
        let metric = &self.named.metric;
        let evidence = PyDict::new(py);
        evidence.set_item("value", x)?;
        evidence.set_item("before", before)?;
        evidence.set_item("after", recent)?;
        evidence.set_item("change", change)?;
        let found = Found {
            kind: KINDS[0],
            indicator: &self.named.indicator,
            metric,
            severity: self.severity,
            step,
            message: format!(
                "{metric} shifted from ~{} to ~{} ({rel})",
                fmt(py, before, ".4g")?,
                fmt(py, recent, ".4g")?
            ),
            evidence,
            onset_step: None,
        };
        Ok(vec![found.build(py)?])
    }
}

/// `statistics.fmean` (Python 3.11): `math.fsum(xs) / len(xs)`, the sum exactly rounded.
fn fmean<'a>(py: Python<'_>, values: impl ExactSizeIterator<Item = &'a f64>) -> PyResult<f64> {
    let n = values.len();
    let xs: Vec<f64> = values.copied().collect();
    let fsum =
        FSUM.get_or_try_init(py, || Ok::<_, PyErr>(py.import("math")?.getattr("fsum")?.unbind()))?;
    let total: f64 = fsum.bind(py).call1((xs,))?.extract()?;
    Ok(total / n as f64)
}
