//! `streamwatch.checks.length`: response length explosion and collapse, truncation saturation.
//! Not ported yet: construction fails, and the engine keeps the Python check.

use pyo3::prelude::*;
use serde::{Deserialize, Serialize};

use super::{Named, Settings};

pub const KINDS: &[&str] = &["length_explosion", "length_collapse"];
pub const TRUNCATION_KINDS: &[&str] = &["truncation_saturation"];

#[derive(Serialize, Deserialize)]
pub struct LengthCheck {}

impl LengthCheck {
    pub fn new(_py: Python<'_>, _named: Named, _s: &Settings) -> PyResult<Self> {
        Err(pyo3::exceptions::PyNotImplementedError::new_err("LengthCheck"))
    }

    pub fn update(&mut self, _py: Python<'_>, _step: i64, _x: f64) -> PyResult<Vec<PyObject>> {
        Ok(Vec::new())
    }
}

#[derive(Serialize, Deserialize)]
pub struct TruncationCheck {}

impl TruncationCheck {
    pub fn new(_py: Python<'_>, _named: Named, _s: &Settings) -> PyResult<Self> {
        Err(pyo3::exceptions::PyNotImplementedError::new_err("TruncationCheck"))
    }

    pub fn update(&mut self, _py: Python<'_>, _step: i64, _x: f64) -> PyResult<Vec<PyObject>> {
        Ok(Vec::new())
    }
}
