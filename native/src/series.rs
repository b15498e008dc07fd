//! `streamwatch.run.Series` as a compiled class (the same attributes, for the same Python
//! code), and the common case of `Monitor.process`, which reads them without Python's
//! attribute machinery.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyTuple};

use crate::hacking::HackingCheck;
use crate::Checks;

/// One metric of one run: its checks and the gathering of each step's values across
/// sources (see `streamwatch.run.PySeries`, whose attributes these are).
#[pyclass(module = "streamwatch_native")]
pub struct Series {
    #[pyo3(get)]
    metric: Py<PyString>,
    #[pyo3(get)]
    name: Py<PyString>,
    #[pyo3(get)]
    indicator: PyObject,
    #[pyo3(get, set)]
    checks: PyObject,
    #[pyo3(get)]
    straggler: PyObject,
    #[pyo3(get)]
    feeds_hacking: bool,
    train_reward: bool, // the train reward, which the hacking check follows on every step
    #[pyo3(get)]
    per_source: bool,
    #[pyo3(get)]
    special: bool,
    #[pyo3(get, set)]
    last_step: Py<PyDict>,
    #[pyo3(get, set)]
    pending_step: i64,
    #[pyo3(get, set)]
    pending_sum: f64,
    #[pyo3(get, set)]
    pending_n: i64,
    #[pyo3(get, set)]
    pending_k: i64,
    #[pyo3(get, set)]
    pending_values: Py<PyList>,
    #[pyo3(get, set)]
    expected: i64,
    #[pyo3(get, set)]
    closed: bool,
    #[pyo3(get, set)]
    solo: PyObject,
}

#[pymethods]
impl Series {
    #[new]
    fn new(
        py: Python<'_>,
        metric: Py<PyString>,
        name: Py<PyString>,
        indicator: PyObject,
        checks: PyObject,
        straggler: PyObject,
        feeds_hacking: bool,
    ) -> PyResult<Self> {
        let per_source = !straggler.is_none(py);
        let value = indicator.bind(py).getattr("value");
        let train_reward =
            feeds_hacking && value.is_ok_and(|v| v.eq("train_reward").unwrap_or(false));
        Ok(Series {
            metric,
            name,
            indicator,
            checks,
            straggler,
            feeds_hacking,
            train_reward,
            per_source,
            special: feeds_hacking || per_source,
            last_step: PyDict::new(py).unbind(),
            pending_step: -1,
            pending_sum: 0.0,
            pending_n: 0,
            pending_k: 0,
            pending_values: PyList::empty(py).unbind(),
            expected: 1,
            closed: false,
            solo: py.None(),
        })
    }

    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyTuple>)> {
        let py = slf.py();
        let s = slf.borrow();
        let made = (
            s.metric.clone_ref(py),
            s.name.clone_ref(py),
            s.indicator.clone_ref(py),
            s.checks.clone_ref(py),
            s.straggler.clone_ref(py),
            s.feeds_hacking,
        );
        let state = (
            s.last_step.clone_ref(py),
            s.pending_step,
            s.pending_sum,
            s.pending_n,
            s.pending_k,
            s.pending_values.clone_ref(py),
            s.expected,
            s.closed,
            s.solo.clone_ref(py),
        );
        let restore = py.import("streamwatch_native")?.getattr("_restore_series")?;
        Ok((
            restore,
            PyTuple::new(
                py,
                [made.into_pyobject(py)?.into_any(), state.into_pyobject(py)?.into_any()],
            )?,
        ))
    }
}

type Made = (Py<PyString>, Py<PyString>, PyObject, PyObject, PyObject, bool);
type State = (Py<PyDict>, i64, f64, i64, i64, Py<PyList>, i64, bool, PyObject);

#[pyfunction]
pub fn _restore_series(py: Python<'_>, made: Made, state: State) -> PyResult<Series> {
    let (metric, name, indicator, checks, straggler, feeds_hacking) = made;
    let mut s = Series::new(py, metric, name, indicator, checks, straggler, feeds_hacking)?;
    (
        s.last_step,
        s.pending_step,
        s.pending_sum,
        s.pending_n,
        s.pending_k,
        s.pending_values,
        s.expected,
        s.closed,
        s.solo,
    ) = state;
    Ok(s)
}

/// The series' compiled checks when it takes the common case for `x` at `step`: a series
/// with one source (`solo == src`), a step after its last one, a finite value. None: the
/// reference loop's other branches apply.
pub fn solo_checks<'py>(
    s: &Bound<'py, Series>,
    src: &Bound<'py, PyString>,
    step: i64,
    x: f64,
) -> PyResult<Option<Bound<'py, Checks>>> {
    let sb = s.borrow();
    let solo = sb.solo.bind(s.py());
    let is_solo = solo.is(src) || (!solo.is_none() && solo.eq(src)?);
    if !x.is_finite() || !is_solo || step <= sb.pending_step {
        return Ok(None);
    }
    Ok(sb.checks.bind(s.py()).downcast::<Checks>().ok().cloned())
}

/// What one value of a solo series led to.
pub enum Judged {
    /// Nothing to report.
    Quiet,
    /// The checks' `judge` answer, which found something: the caller reports it.
    Found(PyObject),
    /// The hacking or straggler check fired: the run has an incident open now.
    Opened,
}

/// The common case of the reference loop for one value that passed `solo_checks`: note the
/// step, judge the value, feed the hacking check.
pub fn judge_solo(
    py: Python<'_>,
    run: &Bound<'_, PyAny>,
    s: &Bound<'_, Series>,
    checks: &Bound<'_, Checks>,
    step: i64,
    x: f64,
) -> PyResult<Judged> {
    let (train_reward, special) = {
        let mut sb = s.borrow_mut();
        sb.pending_step = step; // and not in last_step, while solo (see RunState.value)
        (sb.train_reward, sb.feeds_hacking)
    };
    if let Some(results) = checks.borrow_mut().judge_quiet(py, step, x)? {
        return Ok(Judged::Found(results));
    }
    if train_reward {
        if let Ok(hacking) = run.getattr(intern!(py, "hacking"))?.downcast::<HackingCheck>() {
            hacking.borrow_mut().train(x);
            return Ok(Judged::Quiet);
        }
    }
    // a straggler check needs several sources: with one, closing it does nothing
    if special {
        run.call_method1(intern!(py, "_close_special"), (s, step, x))?;
        if run.getattr(intern!(py, "book"))?.getattr(intern!(py, "open"))?.is_truthy()? {
            return Ok(Judged::Opened);
        }
    }
    Ok(Judged::Quiet)
}

/// The common case of `Monitor.process`, for the values of one event in order, with no
/// incident open in the run: each value that passes `solo_checks` is judged by `judge_solo`.
///
/// Returns `(n, found)`: the first `n` values were handled. `found` is None, or, when the
/// n-th value's checks found something, `(series, its checks' judge answer)`: the caller
/// reports it, and takes over from value `n` on.
#[pyfunction]
pub fn process_solo(
    py: Python<'_>,
    run: &Bound<'_, PyAny>,
    series: &Bound<'_, PyDict>,
    step: i64,
    src: &Bound<'_, PyString>,
    metrics: &Bound<'_, PyDict>,
) -> PyResult<(usize, Option<(PyObject, PyObject)>)> {
    for (i, (name, value)) in metrics.iter().enumerate() {
        let Some(entry) = series.get_item(&name)? else { return Ok((i, None)) };
        let Ok(s) = entry.downcast::<Series>() else { return Ok((i, None)) };
        let x: f64 = value.extract()?;
        let Some(checks) = solo_checks(s, src, step, x)? else { return Ok((i, None)) };
        match judge_solo(py, run, s, &checks, step, x)? {
            Judged::Quiet => {}
            Judged::Found(results) => {
                return Ok((i + 1, Some((s.clone().into_any().unbind(), results))))
            }
            Judged::Opened => return Ok((i + 1, None)),
        }
    }
    Ok((metrics.len(), None))
}
