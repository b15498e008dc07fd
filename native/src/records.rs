//! The live service's common case, a batch of Kafka records at a time: a well-formed event
//! of a run the engine knows, whose every value takes the common case of the per-event loop.
//! What `Service._process`, `decode_message` and `Monitor.process` do with such a record is
//! done here, without building the event; any other record is left to them.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PySet, PyString, PyTuple};
use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;

use crate::series::{judge_solo, solo_checks, Judged, Series};
use crate::stall::StallCheck;
use crate::Checks;

/// `streamwatch.events.MAX_STEP`.
const MAX_STEP: u64 = 1 << 53;
const MAX_RUN_ID_CHARS: usize = 512;
const FINISHED_TAG: &str = "streamwatch.state";
const FINISHED_VALUE: &str = "finished";

/// An event as `Event.model_validate(obj, strict=True)` accepts it (unknown fields ignored).
/// Anything it cannot read, the careful path reads and explains.
#[derive(Deserialize)]
struct Plain {
    run_id: String,
    step: u64,
    #[serde(default)]
    ts: Option<f64>,
    metrics: Metrics,
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
struct Metrics(Vec<(String, f64)>);

impl<'de> Deserialize<'de> for Metrics {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Ordered;
        impl<'de> Visitor<'de> for Ordered {
            type Value = Metrics;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object of numbers")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Metrics, A::Error> {
                let mut out = Vec::with_capacity(map.size_hint().unwrap_or(32));
                while let Some(entry) = map.next_entry::<String, f64>()? {
                    out.push(entry);
                }
                Ok(Metrics(out))
            }
        }
        d.deserialize_map(Ordered)
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

impl Plain {
    /// The event, when it is as plain as `streamwatch.events._decode_plain` requires.
    fn parse(value: &[u8]) -> Option<Plain> {
        let event: Plain = serde_json::from_slice(value).ok()?;
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

    fn ts(&self) -> Option<f64> {
        self.ts
    }

    fn finished(&self) -> bool {
        matches!(self.tags, Some(Some(Tags { finished: true })))
    }
}

/// A record whose event the common case takes: the run and each value's series and checks.
struct Ready<'py> {
    event: Plain,
    run: Bound<'py, PyAny>,
    stall: Bound<'py, StallCheck>,
    run_id: Bound<'py, PyString>,
    src: Bound<'py, PyString>,
    values: Vec<(Bound<'py, Series>, Bound<'py, Checks>, f64)>,
}

/// The record, when the common case takes it whole. Changes nothing.
fn ready<'py>(
    runs: &Bound<'py, PyDict>,
    record: &Bound<'py, PyAny>,
    max_bytes: usize,
    skip_below: &Bound<'py, PyDict>,
) -> PyResult<Option<Ready<'py>>> {
    let py = runs.py();
    let value = record.getattr(intern!(py, "value"))?;
    let Ok(bytes) = value.downcast::<pyo3::types::PyBytes>() else { return Ok(None) };
    let bytes = bytes.as_bytes();
    if bytes.len() > max_bytes {
        return Ok(None);
    }
    let Some(event) = Plain::parse(bytes) else { return Ok(None) };
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
    if let Some(ts) = event.ts() {
        if stall.borrow().gap_at(py, ts)? {
            return Ok(None); // the event ends a silence nobody reported: a finding
        }
    }
    let series = run.getattr(intern!(py, "series"))?;
    let series = series.downcast::<PyDict>()?;
    let src = PyString::new(py, &event.source_key());
    let step = event.step as i64;
    let mut values: Vec<(Bound<'py, Series>, Bound<'py, Checks>, f64)> =
        Vec::with_capacity(event.metrics.0.len());
    for (name, x) in &event.metrics.0 {
        let Some(entry) = series.get_item(name)? else { return Ok(None) }; // a new series
        let Ok(s) = entry.downcast_into::<Series>() else { return Ok(None) };
        if values.iter().any(|(seen, _, _)| seen.is(&s)) {
            return Ok(None); // a metric twice in one event
        }
        let Some(checks) = solo_checks(&s, &src, step, *x)? else { return Ok(None) };
        values.push((s, checks, *x));
    }
    Ok(Some(Ready { event, run, stall, run_id, src, values }))
}

/// `Service._process` and `Monitor.process` for the records from `start` on, as long as
/// each is one the common case takes whole (`ready`); `monitor.stats` counts them.
///
/// Returns `(next, events, values, found)`: the records before `next` were handled,
/// `events` and `values` of them for the service's counts. `found` is None, or, when the
/// checks found something in the last one's values, what the caller needs to report it
/// and judge the rest of them: `(run, series, step, ts, src, x, results, rest, n)`.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn process_records<'py>(
    py: Python<'py>,
    monitor: &Bound<'py, PyAny>,
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
    let mut found = None;
    let mut next = start;
    while next < records.len() {
        let record = records.get_item(next)?;
        let Some(r) = ready(runs, &record, max_bytes, skip_below)? else { break };
        next += 1;
        let n = r.values.len() as u64;
        events += 1;
        values += n;
        run_partition.set_item(&r.run_id, partition)?;
        heard.set_item(&r.run_id, received)?;
        dirty.add(&r.run_id)?;
        // RunState.observe: no stall ends with this event (`ready` saw to it)
        let step = r.event.step as i64;
        if let Some(ts) = r.event.ts() {
            let last: Option<f64> = r.run.getattr(intern!(py, "last_ts"))?.extract()?;
            if last.is_none_or(|last| ts > last) {
                r.run.setattr(intern!(py, "last_ts"), ts)?;
            }
        }
        r.stall.borrow_mut().observe_event(py, step, r.event.ts())?;
        let loss = r.run.getattr(intern!(py, "loss_metric"))?;
        if !loss.is_none() {
            let loss: String = loss.extract()?;
            if r.event.metrics.0.iter().any(|(name, x)| *name == loss && *x == 0.0) {
                r.run.setattr(intern!(py, "loss_zero_step"), step)?;
            }
        }
        for (i, (s, checks, x)) in r.values.iter().enumerate() {
            match judge_solo(py, &r.run, s, checks, step, *x)? {
                Judged::Quiet => continue,
                Judged::Found(results) => {
                    let rest = PyList::new(py, &r.event.metrics.0[i + 1..])?;
                    let ts = r.event.ts();
                    let args = (&r.run, s, step, ts, &r.src, *x, results, rest, n);
                    found = Some(args.into_pyobject(py)?);
                }
                Judged::Opened => {
                    let rest = PyList::new(py, &r.event.metrics.0[i + 1..])?;
                    let ts = r.event.ts();
                    let args = (&r.run, py.None(), step, ts, &r.src, *x, py.None(), rest, n);
                    found = Some(args.into_pyobject(py)?);
                }
            }
            break;
        }
        if found.is_some() {
            break; // the caller judges the rest, and counts the event in the monitor's stats
        }
        counted_values += n;
        if let Some(ts) = r.event.ts() {
            if ts > now {
                now = ts;
            }
        }
    }
    let counted = events - u64::from(found.is_some());
    if counted > 0 {
        let stats = monitor.getattr(intern!(py, "stats"))?;
        add(&stats, intern!(py, "events"), counted)?;
        add(&stats, intern!(py, "values"), counted_values)?;
        monitor.setattr(intern!(py, "now"), now)?;
    }
    Ok((next, events, values, found))
}

/// What the common case reads of a message: `(run_id, step, ts, source key, metrics,
/// finished)`, or None when it leaves the message to the careful path (for the tests).
#[pyfunction]
#[allow(clippy::type_complexity)]
pub fn _plain_event(
    value: &[u8],
) -> Option<(String, u64, Option<f64>, String, Vec<(String, f64)>, bool)> {
    let event = Plain::parse(value)?;
    let (ts, src, finished) = (event.ts(), event.source_key(), event.finished());
    Some((event.run_id, event.step, ts, src, event.metrics.0, finished))
}

fn add(obj: &Bound<'_, PyAny>, name: &Bound<'_, PyString>, n: u64) -> PyResult<()> {
    let total: u64 = obj.getattr(name)?.extract()?;
    obj.setattr(name, total + n)
}
