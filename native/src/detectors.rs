//! The detectors of `streamwatch.detectors`, value for value: a window with robust
//! statistics, an EWMA, a persistence counter, and river's ADWIN and Page-Hinkley (the river
//! objects themselves, called through Python).

use std::collections::VecDeque;

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The last `size` finite values, also kept in order: median and 1.4826 x MAD.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct Window {
    size: usize,
    values: VecDeque<f64>,
    ordered: Vec<f64>,
}

impl Window {
    pub fn new(size: usize) -> Self {
        Window {
            size,
            values: VecDeque::with_capacity(size + 1),
            ordered: Vec::with_capacity(size + 1),
        }
    }

    pub fn update(&mut self, x: f64) {
        if !x.is_finite() {
            return;
        }
        if self.values.len() == self.size {
            let old = self.values.pop_front().expect("a full window");
            let at = self.ordered.partition_point(|v| *v < old); // bisect_left
            self.ordered.remove(at);
        }
        self.values.push_back(x);
        let at = self.ordered.partition_point(|v| *v <= x); // insort (bisect_right)
        self.ordered.insert(at, x);
    }

    pub fn full(&self) -> bool {
        self.values.len() == self.size
    }

    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// The values in order of arrival, oldest first (Python's `Window.values`).
    pub fn values(&self) -> impl Iterator<Item = f64> + '_ {
        self.values.iter().copied()
    }

    pub fn median(&self) -> f64 {
        if self.ordered.is_empty() {
            f64::NAN
        } else {
            median_of_sorted(&self.ordered)
        }
    }

    pub fn robust_sd(&self) -> f64 {
        self.median_and_sd().1
    }

    pub fn median_and_sd(&self) -> (f64, f64) {
        if self.ordered.len() < 2 {
            return (self.median(), f64::NAN);
        }
        let m = median_of_sorted(&self.ordered);
        let mut dev: Vec<f64> = self.ordered.iter().map(|v| (v - m).abs()).collect();
        dev.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
        (m, 1.4826 * median_of_sorted(&dev))
    }
}

/// The median of sorted values, as `statistics.median` computes it.
pub fn median_of_sorted(ordered: &[f64]) -> f64 {
    let n = ordered.len();
    let mid = n / 2;
    if n % 2 == 1 {
        ordered[mid]
    } else {
        (ordered[mid - 1] + ordered[mid]) / 2.0
    }
}

/// `statistics.median` of finite values in any order. The sort is stable and compares as
/// Python's `sorted` does (-0.0 == 0.0: they keep their order of arrival).
pub fn median(values: impl IntoIterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = values.into_iter().collect();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    median_of_sorted(&v)
}

/// `deque(maxlen=size).append(x)`: a full deque drops its oldest value.
pub fn push_bounded<T>(d: &mut VecDeque<T>, size: usize, x: T) {
    if d.len() == size {
        d.pop_front();
    }
    d.push_back(x);
}

/// EWMA with weight `alpha` on the newest value; NaN until the first finite update.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct Ewma {
    alpha: f64,
    pub value: f64,
    n: u64,
}

impl Ewma {
    pub fn new(alpha: f64) -> Self {
        Ewma { alpha, value: f64::NAN, n: 0 }
    }

    pub fn update(&mut self, x: f64) -> f64 {
        if !x.is_finite() {
            return self.value;
        }
        self.n += 1;
        if self.n == 1 {
            self.value = x;
        } else {
            self.value += self.alpha * (x - self.value);
        }
        self.value
    }
}

/// True once a condition held for `needed` updates in a row.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct Persistence {
    needed: u64,
    pub streak: u64,
}

impl Persistence {
    pub fn new(needed: u64) -> Self {
        Persistence { needed, streak: 0 }
    }

    pub fn update(&mut self, cond: bool) -> bool {
        self.streak = if cond { self.streak + 1 } else { 0 };
        self.streak >= self.needed
    }
}

/// A Python object kept inside the core's state, pickled with it.
pub struct PyState(pub PyObject);

impl Serialize for PyState {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let bytes = Python::with_gil(|py| -> PyResult<Vec<u8>> {
            let pickle = py.import("pickle")?;
            pickle.call_method1("dumps", (self.0.bind(py),))?.extract()
        })
        .map_err(serde::ser::Error::custom)?;
        serializer.serialize_bytes(&bytes)
    }
}

impl<'de> Deserialize<'de> for PyState {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let bytes: Vec<u8> = serde_bytes_vec(deserializer)?;
        Python::with_gil(|py| -> PyResult<PyState> {
            let pickle = py.import("pickle")?;
            let obj = pickle.call_method1("loads", (PyBytes::new(py, &bytes),))?;
            Ok(PyState(obj.unbind()))
        })
        .map_err(serde::de::Error::custom)
    }
}

fn serde_bytes_vec<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<u8>, D::Error> {
    struct Bytes;
    impl<'de> serde::de::Visitor<'de> for Bytes {
        type Value = Vec<u8>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("bytes")
        }
        fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
            Ok(v.to_vec())
        }
        fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
            Ok(v)
        }
    }
    deserializer.deserialize_bytes(Bytes)
}

/// `LevelShift`: river's ADWIN over a signal, ignoring non-finite values. Each value goes
/// straight to the `update` of ADWIN's compiled window (`ADWIN._helper`); after a change,
/// the next update starts a fresh window, as `ADWIN.update` does.
#[derive(Serialize, Deserialize)]
pub struct LevelShift {
    adwin: PyState,
    #[serde(skip)]
    update: Option<PyObject>, // the window's bound `update`, looked up once per window
    drift: bool,
}

impl LevelShift {
    pub fn new(py: Python<'_>, delta: f64, clock: i64, grace_period: i64) -> PyResult<Self> {
        let kwargs = pyo3::types::PyDict::new(py);
        kwargs.set_item("delta", delta)?;
        kwargs.set_item("clock", clock)?;
        kwargs.set_item("grace_period", grace_period)?;
        let adwin = py.import("river.drift")?.getattr("ADWIN")?.call((), Some(&kwargs))?;
        Ok(LevelShift { adwin: PyState(adwin.unbind()), update: None, drift: false })
    }

    pub fn update(&mut self, py: Python<'_>, x: f64) -> PyResult<bool> {
        if !x.is_finite() {
            return Ok(false);
        }
        if self.drift {
            self.adwin.0.bind(py).call_method0(intern!(py, "_reset"))?;
            self.update = None;
        }
        let update = match &self.update {
            Some(update) => update.bind(py),
            None => {
                let helper = self.adwin.0.bind(py).getattr(intern!(py, "_helper"))?;
                let update = helper.getattr(intern!(py, "update"))?;
                self.update.insert(update.unbind()).bind(py)
            }
        };
        self.drift = crate::py::call_float(update, x)?.is_truthy()?;
        Ok(self.drift)
    }
}

/// `SustainedShift`: river's Page-Hinkley on a signal in noise-sd units, clipped.
#[derive(Serialize, Deserialize)]
pub struct SustainedShift {
    ph: PyState,
    #[serde(skip)]
    update: Option<PyObject>, // its bound `update`, looked up once
    clip: f64,
}

impl SustainedShift {
    /// `mode` "up" or "down"; the defaults of `SustainedShift` otherwise.
    pub fn new(py: Python<'_>, mode: &str) -> PyResult<Self> {
        let kwargs = pyo3::types::PyDict::new(py);
        kwargs.set_item("min_instances", 10)?;
        kwargs.set_item("delta", 0.5)?;
        kwargs.set_item("threshold", 8.0)?;
        kwargs.set_item("mode", mode)?;
        let ph = py.import("river.drift")?.getattr("PageHinkley")?.call((), Some(&kwargs))?;
        Ok(SustainedShift { ph: PyState(ph.unbind()), update: None, clip: 4.0 })
    }

    pub fn update(&mut self, py: Python<'_>, z: f64) -> PyResult<bool> {
        if !z.is_finite() {
            return Ok(false);
        }
        let clipped = crate::py::max(-self.clip, crate::py::min(self.clip, z));
        let ph = self.ph.0.bind(py);
        let update = match &self.update {
            Some(update) => update.bind(py),
            None => self.update.insert(ph.getattr(intern!(py, "update"))?.unbind()).bind(py),
        };
        crate::py::call_float(update, clipped)?;
        ph.getattr(intern!(py, "drift_detected"))?.is_truthy()
    }
}
