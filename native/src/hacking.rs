//! `streamwatch.checks.hacking`: reward hacking, train reward rising while held-out reward
//! falls. A CUSUM of the held-out shortfall below a reference level (the median of recent
//! evaluations), in eval-noise sds; noise of evaluations and of the train reward alike from
//! clipped second differences (`Bends`).

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::{PyBytes, PyDict};
use serde::{Deserialize, Serialize};

use crate::checks::Settings;
use crate::detectors::{Ewma, Window};
use crate::py::{fmt, max, min, Found, Severity};

pub const KINDS: &[&str] = &["reward_hacking"];

const MIN_NOISE: f64 = 1e-3;
const TRAIN_ALPHA: f64 = 0.3;

static KINDS_TUPLE: GILOnceCell<PyObject> = GILOnceCell::new();

/// Noise of a series from its second differences: the clipped root mean square of the last
/// `size` of them, over sqrt(6).
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct Bends {
    bends: Window,
    last: f64,
    last2: f64,
}

impl Bends {
    pub fn new(size: usize) -> Self {
        Bends { bends: Window::new(size), last: f64::NAN, last2: f64::NAN }
    }

    pub fn update(&mut self, y: f64) {
        if !y.is_finite() {
            return;
        }
        if self.last2.is_finite() {
            self.bends.update(y - 2.0 * self.last + self.last2);
        }
        self.last2 = self.last;
        self.last = y;
    }

    pub fn ready(&self) -> bool {
        self.bends.len() >= 3
    }

    pub fn noise(&self) -> f64 {
        let limit = 4.0 * self.bends.robust_sd();
        let mut total = 0.0;
        for b in self.bends.values() {
            total += min(b * b, limit * limit);
        }
        (total / self.bends.len() as f64 / 6.0).sqrt()
    }
}

/// `HackingCheck`: `train(x)` for each train reward, `heldout(step, metric, y)` for each
/// held-out evaluation, as the reference engine's `Run._close_special` calls them.
#[pyclass(module = "streamwatch_native")]
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct HackingCheck {
    min_evals: i64,
    slack: f64,
    threshold: f64,
    drop: f64,
    train_rise: f64,
    train_rise_sds: f64,
    train: Ewma,
    train_bends: Bends,
    evals: i64,
    reference: Window,
    bends: Bends,
    train_at_reference: f64,
    reference_step: i64,
    cusum: f64,
    since: i64,
}

#[pymethods]
impl HackingCheck {
    #[new]
    fn new(settings: &Bound<'_, PyAny>) -> PyResult<Self> {
        let s = Settings(settings);
        let noise_window = s.usize("noise_window")?;
        Ok(HackingCheck {
            min_evals: s.int("min_evals")?,
            slack: s.f64("slack")?,
            threshold: s.f64("threshold")?,
            drop: s.f64("drop")?,
            train_rise: s.f64("train_rise")?,
            train_rise_sds: s.f64("train_rise_sds")?,
            train: Ewma::new(TRAIN_ALPHA),
            train_bends: Bends::new(noise_window),
            evals: 0,
            reference: Window::new(s.usize("reference")?),
            bends: Bends::new(noise_window),
            train_at_reference: f64::NAN,
            reference_step: -1,
            cusum: 0.0,
            since: -1,
        })
    }

    /// `(Kind.REWARD_HACKING,)`, as the reference check's class attribute.
    #[getter]
    fn kinds(&self, py: Python<'_>) -> PyResult<PyObject> {
        Ok(KINDS_TUPLE.get_or_try_init(py, || crate::py::kinds(py, KINDS))?.clone_ref(py))
    }

    /// A train reward value (the reference's `train(x)`).
    pub fn train(&mut self, x: f64) {
        self.train.update(x);
        self.train_bends.update(x);
    }

    /// A held-out evaluation (the reference's `heldout(step, metric, y)`).
    fn heldout(
        &mut self,
        py: Python<'_>,
        step: i64,
        metric: &str,
        y: f64,
    ) -> PyResult<Vec<PyObject>> {
        self.evals += 1;
        self.bends.update(y);
        let train_now = self.train.value;
        let ready = self.evals >= self.min_evals && self.reference.len() >= 3;
        if !ready || train_now.is_nan() {
            self.note_reference(step, y, train_now);
            return Ok(Vec::new());
        }
        let reference = self.reference.median();
        let noise = max(
            if self.bends.ready() { self.bends.noise() } else { self.reference.robust_sd() },
            MIN_NOISE,
        );
        if self.cusum == 0.0 {
            self.since = step;
        }
        let shortfall = reference - y;
        self.cusum = max(0.0, self.cusum + shortfall / noise - self.slack);
        if self.cusum == 0.0 {
            self.note_reference(step, y, train_now);
            return Ok(Vec::new());
        }
        let drop = shortfall;
        let train_gain = train_now - self.train_at_reference;
        if self.cusum <= self.threshold || drop < self.drop {
            return Ok(Vec::new());
        }
        if train_gain.is_nan() || train_gain < self.train_rise {
            return Ok(Vec::new()); // no rise, or no train reward at the reference
        }
        // two smoothed values far apart differ by chance with sd sqrt(2 alpha / (2 - alpha))
        // x the train noise: a rise within that is no rise
        let train_noise = if self.train_bends.ready() { self.train_bends.noise() } else { 0.0 };
        let train_sd = train_noise * (2.0 * TRAIN_ALPHA / (2.0 - TRAIN_ALPHA)).sqrt();
        if train_gain <= self.train_rise_sds * train_sd {
            return Ok(Vec::new());
        }
        let severity =
            if drop > 3.0 * self.drop * 2.0 { Severity::Critical } else { Severity::Warning };
        let evidence = PyDict::new(py);
        evidence.set_item("heldout", y)?;
        evidence.set_item("heldout_reference", reference)?;
        evidence.set_item("heldout_drop", drop)?;
        evidence.set_item("eval_noise_sd", noise)?;
        evidence.set_item("cusum_sds", self.cusum)?;
        evidence.set_item("train_reward", train_now)?;
        evidence.set_item("train_reward_at_reference", self.train_at_reference)?;
        evidence.set_item(
            "train_gain_sds",
            if train_sd > 0.0 { train_gain / train_sd } else { f64::INFINITY },
        )?;
        let found = Found {
            kind: KINDS[0],
            indicator: "heldout_reward",
            metric,
            severity,
            step,
            message: format!(
                "train reward {} since step {} while held-out {metric} fell {} below its level \
                 of {}",
                fmt(py, train_gain, "+.3g")?,
                self.reference_step,
                fmt(py, drop, ".3g")?,
                fmt(py, reference, ".3g")?
            ),
            evidence,
            onset_step: Some(self.since),
        };
        Ok(vec![found.build(py)?])
    }

    fn __reduce__(&self, py: Python<'_>) -> PyResult<(PyObject, (PyObject,))> {
        let state = bincode::serialize(self)
            .map_err(|e| PyValueError::new_err(format!("cannot save the hacking check: {e}")))?;
        let restore = py.import("streamwatch_native")?.getattr("_restore_hacking")?;
        Ok((restore.unbind(), (PyBytes::new(py, &state).into_any().unbind(),)))
    }
}

impl HackingCheck {
    /// No evidence of a fall: this evaluation is part of the held-out's normal level.
    fn note_reference(&mut self, step: i64, y: f64, train_now: f64) {
        self.reference.update(y);
        self.reference_step = step;
        self.train_at_reference = train_now;
    }
}

#[pyfunction]
pub fn _restore_hacking(state: &[u8]) -> PyResult<HackingCheck> {
    bincode::deserialize(state)
        .map_err(|e| PyValueError::new_err(format!("cannot restore the hacking check: {e}")))
}
