//! streamwatch's compiled core: the engine's per-value work.
//!
//! `streamwatch.run` gathers values across sources and turns findings into incidents. Here
//! are the checks that judge each step's value (`checks`), the series (`series`), the
//! per-run hacking and stall checks, the loop over the values of an event that needs
//! nothing more (`series::process_solo`) and the live service's loop over a batch of Kafka
//! records (`records`). The Python checks in `streamwatch.checks` are the reference: these
//! do the same arithmetic in the same order and build the same findings, and the tests
//! compare the two engines incident for incident.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

mod checks;
mod detectors;
mod hacking;
mod py;
mod records;
mod series;
mod stall;

use checks::{AnyCheck, Named};

/// The checks of one series, in order; `judge(step, x)` answers like the reference engine's
/// loop over them: each check's kinds with what it found.
#[pyclass(module = "streamwatch_native")]
pub struct Checks {
    checks: Vec<AnyCheck>,
    kinds: Vec<PyObject>,
}

impl Checks {
    fn from_checks(py: Python<'_>, checks: Vec<AnyCheck>) -> PyResult<Self> {
        let kinds = checks.iter().map(|c| py::kinds(py, c.kinds())).collect::<PyResult<_>>()?;
        Ok(Checks { checks, kinds })
    }

    /// Every check sees the value; the results of all of them when any found something.
    pub(crate) fn judge_quiet(
        &mut self,
        py: Python<'_>,
        step: i64,
        x: f64,
    ) -> PyResult<Option<PyObject>> {
        let mut found_any: Option<Vec<Vec<PyObject>>> = None;
        for (i, check) in self.checks.iter_mut().enumerate() {
            let found = check.update(py, step, x)?;
            if !found.is_empty() || found_any.is_some() {
                let all = found_any.get_or_insert_with(|| (0..i).map(|_| Vec::new()).collect());
                all.push(found);
            }
        }
        match found_any {
            None => Ok(None),
            Some(all) => Ok(Some(self.results(py, all)?)),
        }
    }

    fn results(&self, py: Python<'_>, all: Vec<Vec<PyObject>>) -> PyResult<PyObject> {
        let items = all
            .into_iter()
            .zip(&self.kinds)
            .map(|(found, kinds)| -> PyResult<PyObject> {
                let found = PyList::new(py, found)?;
                Ok(PyTuple::new(py, [kinds.clone_ref(py).into_bound(py), found.into_any()])?
                    .into_any()
                    .unbind())
            })
            .collect::<PyResult<Vec<_>>>()?;
        Ok(PyList::new(py, items)?.into_any().unbind())
    }
}

#[pymethods]
impl Checks {
    /// `specs`: (check class name, indicator name, metric, settings section, invert).
    #[new]
    fn new(
        py: Python<'_>,
        specs: Vec<(String, String, String, Bound<'_, PyAny>, bool)>,
    ) -> PyResult<Self> {
        let checks = specs
            .into_iter()
            .map(|(class_name, indicator, metric, settings, invert)| {
                AnyCheck::new(py, &class_name, Named { indicator, metric }, &settings, invert)
            })
            .collect::<PyResult<Vec<_>>>()?;
        Checks::from_checks(py, checks)
    }

    /// `[(kinds, findings), ...]`, one pair per check, in order.
    fn judge(&mut self, py: Python<'_>, step: i64, x: f64) -> PyResult<PyObject> {
        let all = self
            .checks
            .iter_mut()
            .map(|check| check.update(py, step, x))
            .collect::<PyResult<Vec<_>>>()?;
        self.results(py, all)
    }

    /// `judge`, or None when no check found anything.
    fn quiet(&mut self, py: Python<'_>, step: i64, x: f64) -> PyResult<Option<PyObject>> {
        self.judge_quiet(py, step, x)
    }

    fn __len__(&self) -> usize {
        self.checks.len()
    }

    fn __reduce__(&self, py: Python<'_>) -> PyResult<(PyObject, (PyObject,))> {
        let state = bincode::serialize(&self.checks)
            .map_err(|e| PyValueError::new_err(format!("cannot save the checks: {e}")))?;
        let restore = py.import("streamwatch_native")?.getattr("_restore_checks")?;
        Ok((restore.unbind(), (PyBytes::new(py, &state).into_any().unbind(),)))
    }
}

#[pyfunction]
fn _restore_checks(py: Python<'_>, state: &[u8]) -> PyResult<Checks> {
    let checks: Vec<AnyCheck> = bincode::deserialize(state)
        .map_err(|e| PyValueError::new_err(format!("cannot restore the checks: {e}")))?;
    Checks::from_checks(py, checks)
}

#[pymodule]
fn streamwatch_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Checks>()?;
    m.add_class::<hacking::HackingCheck>()?;
    m.add_function(wrap_pyfunction!(hacking::_restore_hacking, m)?)?;
    m.add_class::<series::Series>()?;
    m.add_class::<records::Routes>()?;
    m.add_function(wrap_pyfunction!(records::process_records, m)?)?;
    m.add_function(wrap_pyfunction!(records::_plain_event, m)?)?;
    m.add_function(wrap_pyfunction!(series::process_solo, m)?)?;
    m.add_function(wrap_pyfunction!(series::_restore_series, m)?)?;
    m.add_class::<stall::StallCheck>()?;
    m.add_function(wrap_pyfunction!(stall::_restore_stall, m)?)?;
    m.add_function(wrap_pyfunction!(_restore_checks, m)?)?;
    Ok(())
}
