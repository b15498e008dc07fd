//! The live service's common case, a batch of Kafka records at a time: a well-formed event
//! of a run the engine knows, whose every value takes the common case of the per-event loop.
//! What `Service._process`, `decode_message` and `Monitor.process` do with such a record is
//! done here, without building the event; any other record is left to them.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PySet, PyString, PyTuple};
use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use crate::series::{judge_solo, solo_checks, Judged, Series};
use crate::stall::StallCheck;

/// `streamwatch.events.MAX_STEP`.
const MAX_STEP: u64 = 1 << 53;
const MAX_RUN_ID_CHARS: usize = 512;
const FINISHED_TAG: &str = "streamwatch.state";
const FINISHED_VALUE: &str = "finished";

/// An event as `Event.model_validate(obj, strict=True)` accepts it (unknown fields ignored).
/// Anything it cannot read, the careful path reads and explains.
/// Its strings are borrowed from the message where they have no escapes.
#[derive(Deserialize)]
struct Plain<'a> {
    #[serde(borrow)]
    run_id: Cow<'a, str>,
    step: u64,
    #[serde(default)]
    ts: Option<f64>,
    #[serde(borrow)]
    metrics: Metrics<'a>,
    #[serde(default, deserialize_with = "present")]
    source: Option<Option<Source>>,
    #[serde(default, deserialize_with = "present")]
    tags: Option<Option<Tags>>,
}

/// A field that is there, even as `null`: `Some(None)`. (`tags: null` is not an event.)
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

#[derive(Deserialize)]
struct Source {
    #[serde(default)]
    host: Option<String>,
    #[serde(default)]
    rank: Option<i64>,
}

/// `-0` (an int, 0 in Python) and `-0.0` are the same float once read: the careful path
/// reads them apart.
fn is_minus_zero(x: f64) -> bool {
    x == 0.0 && x.is_sign_negative()
}

/// The metrics in their order; every value a JSON number.
struct Metrics<'a>(Vec<(Cow<'a, str>, f64)>);

impl<'de: 'a, 'a> Deserialize<'de> for Metrics<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Ordered<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for Ordered<'a> {
            type Value = Metrics<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object of numbers")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Metrics<'a>, A::Error> {
                let mut out = Vec::with_capacity(map.size_hint().unwrap_or(32));
                while let Some((Borrowed(name), x)) = map.next_entry::<Borrowed<'a>, f64>()? {
                    out.push((name, x));
                }
                Ok(Metrics(out))
            }
        }
        d.deserialize_map(Ordered(std::marker::PhantomData))
    }
}

/// A string borrowed from the message when it has no escapes (serde's `Cow<str>` alone
/// always copies).
struct Borrowed<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Borrowed<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Text<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for Text<'a> {
            type Value = Borrowed<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Borrowed<'a>, E> {
                Ok(Borrowed(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Borrowed<'a>, E> {
                Ok(Borrowed(Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_str(Text(std::marker::PhantomData))
    }
}

/// The tags: only whether the end-of-run marker is among them matters here.
struct Tags {
    finished: bool,
}

impl<'de> Deserialize<'de> for Tags {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Strings;
        impl<'de> Visitor<'de> for Strings {
            type Value = Tags;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object of strings")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Tags, A::Error> {
                let mut finished = false;
                while let Some((key, value)) = map.next_entry::<String, String>()? {
                    finished |= key == FINISHED_TAG && value == FINISHED_VALUE;
                }
                Ok(Tags { finished })
            }
        }
        d.deserialize_map(Strings)
    }
}

impl<'a> Plain<'a> {
    /// The event, when it is as plain as `streamwatch.events._decode_plain` requires.
    fn parse(value: &'a [u8]) -> Option<Plain<'a>> {
        let event: Plain<'a> = serde_json::from_slice(value).ok()?;
        let chars = event.run_id.chars().count();
        let plain = (1..=MAX_RUN_ID_CHARS).contains(&chars)
            && event.step <= MAX_STEP
            && event.ts.is_none_or(|ts| ts.is_finite() && !is_minus_zero(ts))
            && !event.metrics.0.is_empty()
            && event.metrics.0.iter().all(|(name, x)| !name.is_empty() && !is_minus_zero(*x))
            && !matches!(event.source, Some(None))
            && !matches!(event.tags, Some(None));
        plain.then_some(event)
    }

    /// `streamwatch.events.source_key`.
    fn source_key(&self) -> String {
        match &self.source {
            Some(Some(Source { host: Some(h), rank: Some(r) })) => format!("{h}/{r}"),
            Some(Some(Source { host: Some(h), rank: None })) => h.clone(),
            Some(Some(Source { host: None, rank: Some(r) })) => format!("rank{r}"),
            _ => String::new(),
        }
    }

    fn finished(&self) -> bool {
        matches!(self.tags, Some(Some(Tags { finished: true })))
    }
}

/// What each run's last event named, in order, with the series: a run's next event names
/// the same metrics (one process logs the same dict every step), whose series are then
/// found without building a name and looking it up. Kept by the service, across batches.
#[pyclass(module = "streamwatch_native")]
#[derive(Default)]
pub struct Routes {
    runs: HashMap<String, Route>,
}

struct Route {
    run: PyObject, // the run's state these series belong to (a restored run is another)
    series: Vec<(String, Py<Series>)>,
}

/// Runs remembered before starting afresh (a route is only a short cut).
const MAX_ROUTES: usize = 1 << 16;

#[pymethods]
impl Routes {
    #[new]
    fn new() -> Self {
        Routes::default()
    }

    fn __len__(&self) -> usize {
        self.runs.len()
    }
}

/// A record whose event the common case takes: its run, and the series of its values
/// (None for a metric the run has not seen).
struct Ready<'py> {
    run: Bound<'py, PyAny>,
    stall: Bound<'py, StallCheck>,
    run_id: Bound<'py, PyString>,
    series: Vec<Option<Bound<'py, Series>>>,
}

/// The record, when the common case takes it: a plain event (not the end-of-run marker),
/// each metric once, of a run with no incident open, that ends no silence. Changes nothing
/// but `routes`.
fn ready<'py>(
    runs: &Bound<'py, PyDict>,
    routes: &mut Routes,
    record: &Bound<'py, PyAny>,
    event: &Plain,
    skip_below: &Bound<'py, PyDict>,
) -> PyResult<Option<Ready<'py>>> {
    let py = runs.py();
    if event.finished() {
        return Ok(None);
    }
    let run_id = PyString::new(py, &event.run_id);
    let Some(run) = runs.get_item(&run_id)? else { return Ok(None) }; // a new run
    if !skip_below.is_empty() {
        if let Some(below) = skip_below.get_item(&run_id)? {
            let offset: i64 = record.getattr(intern!(py, "offset"))?.extract()?;
            if offset < below.extract::<i64>()? {
                return Ok(None);
            }
        }
    }
    if run.getattr(intern!(py, "book"))?.getattr(intern!(py, "open"))?.is_truthy()? {
        return Ok(None);
    }
    let Ok(stall) = run.getattr(intern!(py, "stall"))?.downcast_into::<StallCheck>() else {
        return Ok(None);
    };
    if let Some(ts) = event.ts {
        if stall.borrow().gap_at(py, ts)? {
            return Ok(None); // the event ends a silence nobody reported: a finding
        }
    }
    let metrics = &event.metrics.0;
    let route = routes.runs.get(event.run_id.as_ref()).filter(|route| route.run.bind(py).is(&run));
    let same = route.is_some_and(|route| {
        route.series.len() == metrics.len()
            && route.series.iter().zip(metrics).all(|((a, _), (b, _))| a == b)
    });
    let series = if let Some(route) = route.filter(|_| same) {
        route.series.iter().map(|(_, s)| Some(s.bind(py).clone())).collect()
    } else {
        let mut names = HashSet::with_capacity(metrics.len());
        if !metrics.iter().all(|(name, _)| names.insert(name.as_ref())) {
            return Ok(None); // a metric twice in one event: the careful path keeps the last
        }
        let by_name = run.getattr(intern!(py, "series"))?;
        let by_name = by_name.downcast::<PyDict>()?;
        let mut series = Vec::with_capacity(metrics.len());
        for (name, _) in metrics {
            series.push(match by_name.get_item(name)? {
                Some(s) => match s.downcast_into::<Series>() {
                    Ok(s) => Some(s),
                    Err(_) => return Ok(None), // a run restored from the Python engine's state
                },
                None => None,
            });
        }
        if series.iter().all(Option::is_some) {
            if routes.runs.len() >= MAX_ROUTES {
                routes.runs.clear();
            }
            let kept = metrics.iter().zip(&series).map(|((name, _), s)| {
                (name.to_string(), s.as_ref().expect("all known").clone().unbind())
            });
            let route = Route { run: run.clone().unbind(), series: kept.collect() };
            routes.runs.insert(event.run_id.to_string(), route);
        }
        series
    };
    Ok(Some(Ready { run, stall, run_id, series }))
}

/// `Service._process` and `Monitor.process` for the records from `start` on, as long as
/// each is one the common case takes (`ready`); `monitor.stats` counts them. The values of
/// an event are judged here while they take the common case of the per-event loop
/// (`solo_checks`); from the first that does not, the caller judges the rest.
///
/// Returns `(next, events, values, rest)`: the records before `next` were handled,
/// `events` and `values` of them for the service's counts. `rest` is None, or what the
/// caller needs to finish the last one: `(run, series, step, ts, src, x, results, items,
/// n)`, where `results` (of `series` at `x`, when not None) are to be reported first, then
/// `items` judged and the event counted (`Monitor._values`).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn process_records<'py>(
    py: Python<'py>,
    monitor: &Bound<'py, PyAny>,
    routes: &Bound<'py, Routes>,
    records: &Bound<'py, PyList>,
    start: usize,
    max_bytes: usize,
    skip_below: &Bound<'py, PyDict>,
    partition: &Bound<'py, PyAny>,
    run_partition: &Bound<'py, PyDict>,
    heard: &Bound<'py, PyDict>,
    received: &Bound<'py, PyAny>,
    dirty: &Bound<'py, PySet>,
) -> PyResult<(usize, u64, u64, Option<Bound<'py, PyTuple>>)> {
    let runs = monitor.getattr(intern!(py, "runs"))?;
    let runs = runs.downcast::<PyDict>()?;
    let mut now: f64 = monitor.getattr(intern!(py, "now"))?.extract()?;
    let (mut events, mut values, mut counted_values) = (0u64, 0u64, 0u64);
    let mut rest = None;
    let mut next = start;
    let mut routes = routes.borrow_mut();
    while next < records.len() {
        let record = records.get_item(next)?;
        let value = record.getattr(intern!(py, "value"))?;
        let Ok(bytes) = value.downcast::<PyBytes>() else { break };
        let bytes = bytes.as_bytes();
        if bytes.len() > max_bytes {
            break;
        }
        let Some(event) = Plain::parse(bytes) else { break };
        let Some(r) = ready(runs, &mut routes, &record, &event, skip_below)? else { break };
        next += 1;
        let metrics = &event.metrics.0;
        let n = metrics.len() as u64;
        events += 1;
        values += n;
        run_partition.set_item(&r.run_id, partition)?;
        heard.set_item(&r.run_id, received)?;
        dirty.add(&r.run_id)?;
        // RunState.observe: no stall ends with this event (`ready` saw to it)
        let (step, ts) = (event.step as i64, event.ts);
        if let Some(ts) = ts {
            let last: Option<f64> = r.run.getattr(intern!(py, "last_ts"))?.extract()?;
            if last.is_none_or(|last| ts > last) {
                r.run.setattr(intern!(py, "last_ts"), ts)?;
            }
        }
        r.stall.borrow_mut().observe(py, step, ts)?;
        let loss = r.run.getattr(intern!(py, "loss_metric"))?;
        if !loss.is_none() {
            let loss: String = loss.extract()?;
            if metrics.iter().any(|(name, x)| *name == loss && *x == 0.0) {
                r.run.setattr(intern!(py, "loss_zero_step"), step)?;
            }
        }
        let src = PyString::new(py, &event.source_key());
        for (i, ((_, x), s)) in metrics.iter().zip(&r.series).enumerate() {
            let checks = match s {
                Some(s) => solo_checks(s, &src, step, *x)?,
                None => None,
            };
            let (Some(s), Some(checks)) = (s, checks) else {
                let items = PyList::new(py, &metrics[i..])?;
                let args = (&r.run, py.None(), step, ts, &src, *x, py.None(), items, n);
                rest = Some(args.into_pyobject(py)?);
                break;
            };
            let results = match judge_solo(py, &r.run, s, &checks, step, *x)? {
                Judged::Quiet => continue,
                Judged::Found(results) => results,
                Judged::Opened => py.None(),
            };
            let items = PyList::new(py, &metrics[i + 1..])?;
            rest = Some((&r.run, s, step, ts, &src, *x, results, items, n).into_pyobject(py)?);
            break;
        }
        if rest.is_some() {
            break; // the caller judges the rest, and counts the event in the monitor's stats
        }
        counted_values += n;
        if let Some(ts) = ts {
            if ts > now {
                now = ts;
            }
        }
    }
    let counted = events - u64::from(rest.is_some());
    if counted > 0 {
        let stats = monitor.getattr(intern!(py, "stats"))?;
        add(&stats, intern!(py, "events"), counted)?;
        add(&stats, intern!(py, "values"), counted_values)?;
        monitor.setattr(intern!(py, "now"), now)?;
    }
    Ok((next, events, values, rest))
}

/// What the common case reads of a message: `(run_id, step, ts, source key, metrics,
/// finished)`, or None when it leaves the message to the careful path (for the tests).
#[pyfunction]
#[allow(clippy::type_complexity)]
pub fn _plain_event(
    value: &[u8],
) -> Option<(String, u64, Option<f64>, String, Vec<(String, f64)>, bool)> {
    let event = Plain::parse(value)?;
    let (ts, src, finished) = (event.ts, event.source_key(), event.finished());
    let metrics = event.metrics.0.into_iter().map(|(name, x)| (name.into_owned(), x)).collect();
    Some((event.run_id.into_owned(), event.step, ts, src, metrics, finished))
}

fn add(obj: &Bound<'_, PyAny>, name: &Bound<'_, PyString>, n: u64) -> PyResult<()> {
    let total: u64 = obj.getattr(name)?.extract()?;
    obj.setattr(name, total + n)
}
