//! `streamwatch.checks.stall`: run stalls, no events for several times the run's own cadence
//! (the median gap between its recent step advances, in event time). Silence is event time
//! too in a replay (the newest event time seen across runs, minus the run's newest); a live
//! service measures it on its own clock (`heard`: when it last received one of the run's
//! events).

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::{PyBytes, PyDict};
use serde::{Deserialize, Serialize};

use crate::checks::Settings;
use crate::detectors::Window;
use crate::py::{fmt, max, Found, Severity};

pub const KINDS: &[&str] = &["run_stalled"];

const GAPS: usize = 20;

static KINDS_TUPLE: GILOnceCell<PyObject> = GILOnceCell::new();

/// `StallCheck`: `observe(step, ts)` for each event of the run, `check(now, heard)` as time
/// passes, as the reference engine's `RunState.observe` and `RunState.check_stall` call them;
/// the engine sets `ended` when the run's input is over.
#[pyclass(module = "streamwatch_native")]
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct StallCheck {
    factor: f64,
    min_seconds: f64,
    min_steps: i64,
    /// The newest event time (NaN before the first).
    #[pyo3(get)]
    last_ts: f64,
    /// The highest step (-1 before the first).
    #[pyo3(get)]
    last_step: i64,
    step_ts: f64,
    gaps: Window,
    /// The run's input is over: no stall check until its next event.
    #[pyo3(get, set)]
    ended: bool,
}

#[pymethods]
impl StallCheck {
    #[new]
    fn new(settings: &Bound<'_, PyAny>) -> PyResult<Self> {
        let s = Settings(settings);
        Ok(StallCheck {
            factor: s.f64("factor")?,
            min_seconds: s.f64("min_seconds")?,
            min_steps: s.int("min_steps")?,
            last_ts: f64::NAN,
            last_step: -1,
            step_ts: f64::NAN,
            gaps: Window::new(GAPS),
            ended: false,
        })
    }

    /// `(Kind.RUN_STALLED,)`, as the reference check's class attribute.
    #[getter]
    fn kinds(&self, py: Python<'_>) -> PyResult<PyObject> {
        Ok(KINDS_TUPLE.get_or_try_init(py, || crate::py::kinds(py, KINDS))?.clone_ref(py))
    }

    /// An event arrived (the reference's `observe(step, ts)`).
    #[pyo3(signature = (step, ts))]
    pub fn observe(
        &mut self,
        py: Python<'_>,
        step: i64,
        ts: Option<f64>,
    ) -> PyResult<Option<PyObject>> {
        let ts = match ts {
            Some(ts) if ts.is_finite() => ts,
            _ => return Ok(None),
        };
        self.ended = false;
        // a gap shorter than the least limit needs no cadence (the common case: be quick)
        let gap =
            if ts - self.last_ts > self.min_seconds { self.check(py, ts, None)? } else { None };
        if self.last_ts.is_nan() || ts > self.last_ts {
            self.last_ts = ts;
        }
        if step > self.last_step {
            if self.last_step >= 0 && !self.step_ts.is_nan() && ts > self.step_ts {
                // both are >= 0 here: the difference fits
                self.gaps.update((ts - self.step_ts) / (step - self.last_step) as f64);
            }
            self.last_step = step;
            self.step_ts = ts;
        }
        Ok(gap)
    }

    /// The median gap between step advances, per step; NaN while too few.
    fn cadence(&self) -> f64 {
        if (self.gaps.len() as i64) < self.min_steps - 1 {
            return f64::NAN;
        }
        self.gaps.median()
    }

    /// Silent too long? (the reference's `check(now, heard)`).
    #[pyo3(signature = (now, heard=None))]
    fn check(&self, py: Python<'_>, now: f64, heard: Option<f64>) -> PyResult<Option<PyObject>> {
        if self.last_ts.is_nan() {
            return Ok(None); // no event time yet: no cadence either
        }
        let silent = now - heard.unwrap_or(self.last_ts);
        // `not silent > min_seconds`: a NaN silence is no stall
        if self.ended || silent.is_nan() || silent <= self.min_seconds {
            return Ok(None);
        }
        let cadence = self.cadence();
        if cadence.is_nan() || cadence <= 0.0 {
            return Ok(None); // too few steps, or steps too close in time to measure
        }
        let limit = max(self.factor * cadence, self.min_seconds);
        if silent <= limit {
            return Ok(None);
        }
        let severity = if silent > 3.0 * limit { Severity::Critical } else { Severity::Warning };
        let evidence = PyDict::new(py);
        evidence.set_item("silent_seconds", silent)?;
        evidence.set_item("cadence_seconds", cadence)?;
        evidence.set_item("limit_seconds", limit)?;
        evidence.set_item("last_step", self.last_step)?;
        evidence.set_item("last_event_ts", self.last_ts)?;
        let found = Found {
            kind: KINDS[0],
            indicator: "run",
            metric: "",
            severity,
            step: self.last_step,
            message: format!(
                "run stalled: no events for {} s ({}x its cadence of {} s) after step {}",
                fmt(py, silent, ".0f")?,
                fmt(py, silent / cadence, ".1f")?,
                fmt(py, cadence, ".0f")?,
                self.last_step
            ),
            evidence,
            onset_step: Some(self.last_step),
        };
        Ok(Some(found.build(py)?))
    }

    fn __reduce__(&self, py: Python<'_>) -> PyResult<(PyObject, (PyObject,))> {
        let state = bincode::serialize(self)
            .map_err(|e| PyValueError::new_err(format!("cannot save the stall check: {e}")))?;
        let restore = py.import("streamwatch_native")?.getattr("_restore_stall")?;
        Ok((restore.unbind(), (PyBytes::new(py, &state).into_any().unbind(),)))
    }
}

impl StallCheck {
    /// Would `observe(_, Some(ts))` end a silence with a finding? (Changes nothing.)
    pub fn gap_at(&self, py: Python<'_>, ts: f64) -> PyResult<bool> {
        let silent = ts - self.last_ts;
        if silent.is_nan() || silent <= self.min_seconds {
            return Ok(false); // `observe` does not judge the gap then
        }
        let mut probe = self.clone(); // judged as `observe` judges: input not over
        probe.ended = false;
        Ok(probe.check(py, ts, None)?.is_some())
    }
}

#[pyfunction]
pub fn _restore_stall(state: &[u8]) -> PyResult<StallCheck> {
    bincode::deserialize(state)
        .map_err(|e| PyValueError::new_err(format!("cannot restore the stall check: {e}")))
}
