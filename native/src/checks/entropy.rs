//! `streamwatch.checks.entropy`: entropy collapse and blow-up.
//! Not ported yet: construction fails, and the engine keeps the Python check.

use pyo3::prelude::*;
use serde::{Deserialize, Serialize};

use super::{Named, Settings};

pub const KINDS: &[&str] = &["entropy_collapse", "entropy_blowup"];

#[derive(Serialize, Deserialize)]
pub struct EntropyCheck {}

impl EntropyCheck {
    pub fn new(_py: Python<'_>, _named: Named, _s: &Settings, _invert: bool) -> PyResult<Self> {
        Err(pyo3::exceptions::PyNotImplementedError::new_err("EntropyCheck"))
    }

    pub fn update(&mut self, _py: Python<'_>, _step: i64, _x: f64) -> PyResult<Vec<PyObject>> {
        Ok(Vec::new())
    }
}
