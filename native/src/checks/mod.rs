//! The per-value checks of `streamwatch.checks`, one module each, value for value the same:
//! the same arithmetic in the same order, Python's `min`/`max` (see `crate::py`), the same
//! findings built through Python.

use pyo3::prelude::*;
use serde::{Deserialize, Serialize};

pub mod drift;
pub mod entropy;
pub mod length;
pub mod reward;
pub mod spike;

/// Reads the fields of a settings section (a pydantic model) once, at construction.
pub struct Settings<'a, 'py>(pub &'a Bound<'py, PyAny>);

impl Settings<'_, '_> {
    pub fn f64(&self, name: &str) -> PyResult<f64> {
        self.0.getattr(name)?.extract()
    }
    pub fn int(&self, name: &str) -> PyResult<i64> {
        self.0.getattr(name)?.extract()
    }
    pub fn usize(&self, name: &str) -> PyResult<usize> {
        self.0.getattr(name)?.extract()
    }
    pub fn text(&self, name: &str) -> PyResult<String> {
        // enums (Severity) by their value
        let attr = self.0.getattr(name)?;
        match attr.getattr("value") {
            Ok(value) => value.extract(),
            Err(_) => attr.extract(),
        }
    }
}

/// Where a check reports: the series' indicator name and metric.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct Named {
    pub indicator: String,
    pub metric: String,
}

/// One check of a series. `update` is the reference check's `update(step, x)`.
#[derive(Serialize, Deserialize)]
pub enum AnyCheck {
    Drift(drift::DriftCheck),
    Entropy(entropy::EntropyCheck),
    Length(length::LengthCheck),
    Reward(reward::RewardCheck),
    Spike(spike::SpikeCheck),
    Truncation(length::TruncationCheck),
}

impl AnyCheck {
    /// Builds the check the reference engine names `class_name` ("SpikeCheck", ...).
    pub fn new(
        py: Python<'_>,
        class_name: &str,
        named: Named,
        settings: &Bound<'_, PyAny>,
        invert: bool,
    ) -> PyResult<Self> {
        let s = Settings(settings);
        Ok(match class_name {
            "DriftCheck" => AnyCheck::Drift(drift::DriftCheck::new(py, named, &s)?),
            "EntropyCheck" => AnyCheck::Entropy(entropy::EntropyCheck::new(py, named, &s, invert)?),
            "LengthCheck" => AnyCheck::Length(length::LengthCheck::new(py, named, &s)?),
            "RewardCheck" => AnyCheck::Reward(reward::RewardCheck::new(py, named, &s)?),
            "SpikeCheck" => AnyCheck::Spike(spike::SpikeCheck::new(named, &s)?),
            "TruncationCheck" => AnyCheck::Truncation(length::TruncationCheck::new(py, named, &s)?),
            other => {
                return Err(pyo3::exceptions::PyNotImplementedError::new_err(format!(
                    "no compiled check {other}"
                )))
            }
        })
    }

    pub fn kinds(&self) -> &'static [&'static str] {
        match self {
            AnyCheck::Drift(_) => drift::KINDS,
            AnyCheck::Entropy(_) => entropy::KINDS,
            AnyCheck::Length(_) => length::KINDS,
            AnyCheck::Reward(_) => reward::KINDS,
            AnyCheck::Spike(_) => spike::KINDS,
            AnyCheck::Truncation(_) => length::TRUNCATION_KINDS,
        }
    }

    pub fn update(&mut self, py: Python<'_>, step: i64, x: f64) -> PyResult<Vec<PyObject>> {
        match self {
            AnyCheck::Drift(c) => c.update(py, step, x),
            AnyCheck::Entropy(c) => c.update(py, step, x),
            AnyCheck::Length(c) => c.update(py, step, x),
            AnyCheck::Reward(c) => c.update(py, step, x),
            AnyCheck::Spike(c) => c.update(py, step, x),
            AnyCheck::Truncation(c) => c.update(py, step, x),
        }
    }
}
