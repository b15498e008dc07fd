//! `streamwatch.checks.drift`: generic drift (river's ADWIN, confirmed by size).
//! Not ported yet: construction fails, and the engine keeps the Python check.

use pyo3::prelude::*;
use serde::{Deserialize, Serialize};

use super::{Named, Settings};

pub const KINDS: &[&str] = &["metric_drift"];

#[derive(Serialize, Deserialize)]
pub struct DriftCheck {}

impl DriftCheck {
    pub fn new(_py: Python<'_>, _named: Named, _s: &Settings) -> PyResult<Self> {
        Err(pyo3::exceptions::PyNotImplementedError::new_err("DriftCheck"))
    }

    pub fn update(&mut self, _py: Python<'_>, _step: i64, _x: f64) -> PyResult<Vec<PyObject>> {
        Ok(Vec::new())
    }
}
