//! What the core needs from the Python side: streamwatch's `Finding`, `Kind` and `Severity`,
//! Python's own number formatting (messages read exactly as the reference engine writes
//! them) and Python's `min`/`max` semantics. Findings are rare, so going through Python to
//! build them costs nothing that matters.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::{PyDict, PyFloat, PyTuple};
use serde::{Deserialize, Serialize};

static FINDING: GILOnceCell<PyObject> = GILOnceCell::new();
static KIND: GILOnceCell<PyObject> = GILOnceCell::new();
static SEVERITY: GILOnceCell<PyObject> = GILOnceCell::new();
static FORMAT: GILOnceCell<PyObject> = GILOnceCell::new();

fn incidents_attr<'py>(
    py: Python<'py>,
    cell: &'static GILOnceCell<PyObject>,
    name: &str,
) -> PyResult<&'py Bound<'py, PyAny>> {
    cell.get_or_try_init(py, || Ok(py.import("streamwatch.incidents")?.getattr(name)?.unbind()))
        .map(|obj| obj.bind(py))
}

/// `format(x, spec)`, as Python writes it (`.4g`, `.0%`, `+.0%`, `.2f`, ...).
pub fn fmt(py: Python<'_>, x: f64, spec: &str) -> PyResult<String> {
    let format = FORMAT.get_or_try_init(py, || {
        Ok::<_, PyErr>(py.import("builtins")?.getattr("format")?.unbind())
    })?;
    format.bind(py).call1((x, spec))?.extract()
}

/// A `Kind` member by its value ("metric_spike").
pub fn kind(py: Python<'_>, value: &str) -> PyResult<PyObject> {
    Ok(incidents_attr(py, &KIND, "Kind")?.call1((value,))?.unbind())
}

/// The `Kind` members of a check, as the tuple the reference engine's checks carry.
pub fn kinds(py: Python<'_>, values: &[&str]) -> PyResult<PyObject> {
    let members = values.iter().map(|v| kind(py, v)).collect::<PyResult<Vec<_>>>()?;
    Ok(PyTuple::new(py, members)?.into_any().unbind())
}

#[derive(Clone, Copy, Serialize, Deserialize)]
pub enum Severity {
    Info,
    Warning,
    Critical,
}

impl Severity {
    /// `Severity(value)`.
    pub fn from_value(value: &str) -> PyResult<Self> {
        match value {
            "info" => Ok(Severity::Info),
            "warning" => Ok(Severity::Warning),
            "critical" => Ok(Severity::Critical),
            other => Err(PyValueError::new_err(format!("'{other}' is not a valid Severity"))),
        }
    }

    fn value(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Critical => "critical",
        }
    }
}

/// One `Finding`, built exactly as a check of the reference engine builds it.
pub struct Found<'py> {
    pub kind: &'static str,
    pub indicator: &'py str,
    pub metric: &'py str,
    pub severity: Severity,
    pub step: i64,
    pub message: String,
    pub evidence: Bound<'py, PyDict>,
    pub onset_step: Option<i64>,
}

impl<'py> Found<'py> {
    pub fn build(self, py: Python<'py>) -> PyResult<PyObject> {
        let severity =
            incidents_attr(py, &SEVERITY, "Severity")?.call1((self.severity.value(),))?;
        let args = (
            kind(py, self.kind)?,
            self.indicator,
            self.metric,
            severity,
            self.step,
            self.message,
            self.evidence,
        );
        let kwargs = PyDict::new(py);
        if let Some(onset) = self.onset_step {
            kwargs.set_item("onset_step", onset)?;
        }
        Ok(incidents_attr(py, &FINDING, "Finding")?.call(args, Some(&kwargs))?.unbind())
    }
}

/// `f(x)`, with no argument tuple (vectorcall): river's detectors take a value per update.
pub fn call_float<'py>(f: &Bound<'py, PyAny>, x: f64) -> PyResult<Bound<'py, PyAny>> {
    let py = f.py();
    let arg = PyFloat::new(py, x);
    let args = [arg.as_ptr()];
    // SAFETY: `f` and `arg` are live objects held for the call; one positional argument.
    unsafe {
        let out =
            pyo3::ffi::PyObject_Vectorcall(f.as_ptr(), args.as_ptr(), 1, std::ptr::null_mut());
        Bound::from_owned_ptr_or_err(py, out)
    }
}

/// Python's `min(a, b)`: `a` unless `b < a` (so a NaN stays where Python keeps it).
#[inline]
pub fn min(a: f64, b: f64) -> f64 {
    if b < a {
        b
    } else {
        a
    }
}

/// Python's `max(a, b)`: `a` unless `b > a`.
#[inline]
pub fn max(a: f64, b: f64) -> f64 {
    if b > a {
        b
    } else {
        a
    }
}
