//! streamwatch's compiled core: the engine's per-value work.
//!
//! `streamwatch.run` keeps a run's series, gathers their values across sources and turns
//! findings into incidents; the checks that judge each step's value, and the loop over the
//! values of an event that needs nothing more than that, are here. The Python checks in
//! `streamwatch.checks` are the reference: these do the same arithmetic in the same order
//! and build the same findings, and the tests compare the two engines incident for incident.

use pyo3::exceptions::PyValueError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};

mod checks;
mod detectors;
mod py;

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
        let kinds = checks
            .iter()
            .map(|c| py::kinds(py, c.kinds()))
            .collect::<PyResult<_>>()?;
        Ok(Checks { checks, kinds })
    }

    /// Every check sees the value; the results of all of them when any found something.
    fn judge_quiet(&mut self, py: Python<'_>, step: i64, x: f64) -> PyResult<Option<PyObject>> {
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
                Ok(
                    PyTuple::new(py, [kinds.clone_ref(py).into_bound(py), found.into_any()])?
                        .into_any()
                        .unbind(),
                )
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
                AnyCheck::new(
                    py,
                    &class_name,
                    Named { indicator, metric },
                    &settings,
                    invert,
                )
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

    fn __len__(&self) -> usize {
        self.checks.len()
    }

    fn __reduce__(&self, py: Python<'_>) -> PyResult<(PyObject, (PyObject,))> {
        let state = bincode::serialize(&self.checks)
            .map_err(|e| PyValueError::new_err(format!("cannot save the checks: {e}")))?;
        let restore = py
            .import("streamwatch_native")?
            .getattr("_restore_checks")?;
        Ok((
            restore.unbind(),
            (PyBytes::new(py, &state).into_any().unbind(),),
        ))
    }
}

#[pyfunction]
fn _restore_checks(py: Python<'_>, state: &[u8]) -> PyResult<Checks> {
    let checks: Vec<AnyCheck> = bincode::deserialize(state)
        .map_err(|e| PyValueError::new_err(format!("cannot restore the checks: {e}")))?;
    Checks::from_checks(py, checks)
}

/// The common case of `Monitor.process`, for the values of one event in order: a series
/// that exists, has one source (`series.solo == src`), a step after its last one and a
/// finite value, with no incident open in the run. Updates the series as the reference
/// loop does and judges the value with its compiled checks.
///
/// Returns `(n, found)`: the first `n` values were handled. `found` is None, or, when the
/// n-th value's checks found something, `(series, its checks' judge answer)`: the caller
/// reports it, and takes over from value `n` on.
#[pyfunction]
fn process_solo(
    py: Python<'_>,
    run: &Bound<'_, PyAny>,
    series: &Bound<'_, PyDict>,
    step: i64,
    src: &Bound<'_, PyString>,
    metrics: &Bound<'_, PyDict>,
) -> PyResult<(usize, Option<(PyObject, PyObject)>)> {
    let step_obj = step.into_pyobject(py)?;
    for (i, (name, value)) in metrics.iter().enumerate() {
        let Some(s) = series.get_item(&name)? else {
            return Ok((i, None));
        };
        let x: f64 = value.extract()?;
        if !x.is_finite() {
            return Ok((i, None));
        }
        let solo = s.getattr(intern!(py, "solo"))?;
        if solo.is_none() || !solo.eq(src)? {
            return Ok((i, None));
        }
        let pending: i64 = s.getattr(intern!(py, "pending_step"))?.extract()?;
        if step <= pending {
            return Ok((i, None));
        }
        let checks_obj = s.getattr(intern!(py, "checks"))?;
        let Ok(checks) = checks_obj.downcast::<Checks>() else {
            return Ok((i, None));
        };
        s.getattr(intern!(py, "last_step"))?
            .set_item(src, &step_obj)?;
        s.setattr(intern!(py, "pending_step"), &step_obj)?;
        let results = checks.borrow_mut().judge_quiet(py, step, x)?;
        if let Some(results) = results {
            return Ok((i + 1, Some((s.unbind(), results))));
        }
        if s.getattr(intern!(py, "special"))?.is_truthy()? {
            run.call_method1(intern!(py, "_close_special"), (&s, step, x))?;
            if run
                .getattr(intern!(py, "book"))?
                .getattr(intern!(py, "open"))?
                .is_truthy()?
            {
                return Ok((i + 1, None));
            }
        }
    }
    Ok((metrics.len(), None))
}

#[pymodule]
fn streamwatch_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Checks>()?;
    m.add_function(wrap_pyfunction!(process_solo, m)?)?;
    m.add_function(wrap_pyfunction!(_restore_checks, m)?)?;
    Ok(())
}
