//! `streamwatch.checks.reward`: reward chaos and reward collapse.
//! Not ported yet: construction fails, and the engine keeps the Python check.

use pyo3::prelude::*;
use serde::{Deserialize, Serialize};

use super::{Named, Settings};

pub const KINDS: &[&str] = &["reward_chaos", "reward_collapse"];

#[derive(Serialize, Deserialize)]
pub struct RewardCheck {}

impl RewardCheck {
    pub fn new(_py: Python<'_>, _named: Named, _s: &Settings) -> PyResult<Self> {
        Err(pyo3::exceptions::PyNotImplementedError::new_err("RewardCheck"))
    }

    pub fn update(&mut self, _py: Python<'_>, _step: i64, _x: f64) -> PyResult<Vec<PyObject>> {
        Ok(Vec::new())
    }
}
