//! The Python module `llmpipe_native`: one class, `Transform`, whose `run` takes a batch's columns
//! and returns the encoded buffer, row ends, row positions and dead letters.

use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple};

use crate::packed::Packed;
use crate::RawRecord;

const LATENCY_MS: &str = "latency.ms";
const ATTRIBUTES: &str = "attributes";

#[pyclass(frozen, name = "Transform", module = "llmpipe_native")]
struct PyTransform {
    /// Shared with the threads of `start_packed` runs.
    inner: Arc<crate::Transform>,
    /// The output buffer, kept between batches (see `Transform::run`).
    scratch: Arc<Mutex<Vec<u8>>>,
}

/// The owned Python objects a record's slices borrow from.
struct Held<'py> {
    value: Bound<'py, PyBytes>,
    key: Option<Bound<'py, PyBytes>>,
    latency: Option<Bound<'py, PyBytes>>,
    attributes: Option<Bound<'py, PyBytes>>,
}

fn optional_bytes<'py>(item: Bound<'py, PyAny>, what: &str) -> PyResult<Option<Bound<'py, PyBytes>>> {
    if item.is_none() {
        return Ok(None);
    }
    item.cast_into::<PyBytes>().map(Some).map_err(|_| PyTypeError::new_err(format!("{what} must be bytes or None")))
}

/// The last `latency.ms` and `attributes` values among one record's `(name, value)` headers.
fn scan_headers<'py>(headers: &Bound<'py, PyAny>) -> PyResult<Found<'py>> {
    let mut found = (None, None);
    // A list (what the consumer hands over) is walked in place, without an iterator object per record.
    if let Ok(list) = headers.cast::<PyList>() {
        for header in list.iter() {
            visit_header(&header, &mut found)?;
        }
    } else {
        for header in headers.try_iter()? {
            visit_header(&header?, &mut found)?;
        }
    }
    Ok(found)
}

type Found<'py> = (Option<Bound<'py, PyBytes>>, Option<Bound<'py, PyBytes>>);

fn visit_header<'py>(header: &Bound<'py, PyAny>, found: &mut Found<'py>) -> PyResult<()> {
    let pair = header.cast::<PyTuple>().map_err(|_| PyTypeError::new_err("a header must be a (name, value) tuple"))?;
    let name = pair.get_borrowed_item(0)?;
    let name = name.cast::<PyString>().map_err(|_| PyTypeError::new_err("a header name must be str"))?;
    let name = name.to_str()?;
    if name == LATENCY_MS {
        found.0 = optional_bytes(pair.get_item(1)?, "a header value")?;
    } else if name == ATTRIBUTES {
        found.1 = optional_bytes(pair.get_item(1)?, "a header value")?;
    }
    Ok(())
}

/// Each record's value, key and the two headers the transform reads, checked and kept alive.
fn hold<'py>(values: &Bound<'py, PyList>, keys: &Bound<'py, PyList>, headers: &Bound<'py, PyList>) -> PyResult<Vec<Held<'py>>> {
    let n = values.len();
    if keys.len() != n || headers.len() != n {
        return Err(PyValueError::new_err("values, keys and headers differ in length"));
    }
    let mut held = Vec::with_capacity(n);
    for i in 0..n {
        let value = values.get_item(i)?.cast_into::<PyBytes>().map_err(|_| PyTypeError::new_err("a value must be bytes"))?;
        let key = optional_bytes(keys.get_item(i)?, "a key")?;
        let (latency, attributes) = scan_headers(&headers.get_item(i)?)?;
        held.push(Held { value, key, latency, attributes });
    }
    Ok(held)
}

fn bytes_of<'a>(b: &'a Option<Bound<'_, PyBytes>>) -> Option<&'a [u8]> {
    b.as_ref().map(|b| b.as_bytes())
}

fn int64s(raw: &[u8], n: usize, what: &str) -> PyResult<Vec<i64>> {
    if raw.len() != n * 8 {
        return Err(PyValueError::new_err(format!("{what}: expected {n} int64 values")));
    }
    Ok(raw.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes"))).collect())
}

fn int64_bytes<'py>(py: Python<'py>, values: &[i64]) -> Bound<'py, PyBytes> {
    let raw: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    PyBytes::new(py, &raw)
}

/// A contiguous buffer's items as a slice (an empty one for a zero-length buffer).
pub(crate) fn view<'b, T: pyo3::buffer::Element>(buf: &'b PyBuffer<T>, what: &str) -> PyResult<&'b [T]> {
    if !buf.is_c_contiguous() {
        return Err(PyValueError::new_err(format!("{what} must be a contiguous buffer")));
    }
    if buf.item_count() == 0 {
        return Ok(&[]);
    }
    // SAFETY: a C-contiguous buffer of `item_count` items of `T` (PyBuffer checked the format and
    // alignment), alive as long as `buf`.
    Ok(unsafe { std::slice::from_raw_parts(buf.buf_ptr() as *const T, buf.item_count()) })
}

/// The ten columns of a packed batch, in the order `gpu_stage.transform.packed.PackedBatch.columns` gives them.
struct PackedBuffers {
    values: PyBuffer<u8>,
    value_ends: PyBuffer<i64>,
    keys: PyBuffer<u8>,
    key_ends: PyBuffer<i64>,
    key_null: PyBuffer<u8>,
    headers: PyBuffer<u8>,
    header_ends: PyBuffer<i64>,
    partitions: PyBuffer<i64>,
    offsets: PyBuffer<i64>,
    timestamps: PyBuffer<i64>,
}

impl PackedBuffers {
    fn of(columns: &Bound<'_, PyTuple>) -> PyResult<Self> {
        if columns.len() != 10 {
            return Err(PyValueError::new_err("a packed batch has ten columns"));
        }
        let item = |i: usize| columns.get_item(i);
        Ok(PackedBuffers {
            values: PyBuffer::get(&item(0)?)?,
            value_ends: PyBuffer::get(&item(1)?)?,
            keys: PyBuffer::get(&item(2)?)?,
            key_ends: PyBuffer::get(&item(3)?)?,
            key_null: PyBuffer::get(&item(4)?)?,
            headers: PyBuffer::get(&item(5)?)?,
            header_ends: PyBuffer::get(&item(6)?)?,
            partitions: PyBuffer::get(&item(7)?)?,
            offsets: PyBuffer::get(&item(8)?)?,
            timestamps: PyBuffer::get(&item(9)?)?,
        })
    }

    /// The columns as slices, checked (lengths, ends, header encoding).
    fn packed(&self) -> PyResult<Packed<'_>> {
        let packed = Packed {
            values: view(&self.values, "values")?,
            value_ends: view(&self.value_ends, "value_ends")?,
            keys: view(&self.keys, "keys")?,
            key_ends: view(&self.key_ends, "key_ends")?,
            key_null: view(&self.key_null, "key_null")?,
            headers: view(&self.headers, "headers")?,
            header_ends: view(&self.header_ends, "header_ends")?,
            partitions: view(&self.partitions, "partitions")?,
            offsets: view(&self.offsets, "offsets")?,
            timestamps: view(&self.timestamps, "timestamps_ms")?,
        };
        packed.check().map_err(PyValueError::new_err)?;
        Ok(packed)
    }
}

/// A writable contiguous byte buffer as a mutable slice.
#[allow(clippy::mut_from_ref)] // the buffer's memory is Python's, not borrowed from `buf`
fn view_mut<'b, T: pyo3::buffer::Element>(buf: &'b PyBuffer<T>, what: &str) -> PyResult<&'b mut [T]> {
    if buf.readonly() || !buf.is_c_contiguous() {
        return Err(PyValueError::new_err(format!("{what} must be a writable contiguous buffer")));
    }
    if buf.item_count() == 0 {
        return Ok(&mut []);
    }
    // SAFETY: writable and C-contiguous, `item_count` items of `T` (PyBuffer checked the format and
    // alignment), alive as long as `buf`; the caller does not touch it from Python while the call runs.
    Ok(unsafe { std::slice::from_raw_parts_mut(buf.buf_ptr() as *mut T, buf.item_count()) })
}

type LaneColumns<'py> = (
    Bound<'py, PyBytes>,
    Bound<'py, PyBytes>,
    Bound<'py, PyBytes>,
    Bound<'py, PyBytes>,
    Bound<'py, PyBytes>,
    Bound<'py, PyBytes>,
);

/// What `lane_input` returns: the packed batch's columns, or the size `out` must have.
#[derive(IntoPyObject)]
enum LaneInput<'py> {
    Packed(LaneColumns<'py>),
    Needs(usize),
}

type RunResult<'py> = (Bound<'py, PyBytes>, Bound<'py, PyBytes>, Bound<'py, PyBytes>, Bound<'py, PyList>);

impl PyTransform {
    /// The output buffer of the last batch, to be reused by this one.
    fn take_scratch(&self) -> Vec<u8> {
        std::mem::take(&mut *crate::lock(&self.scratch))
    }

    /// A run's result as Python objects; the output buffer is kept for the next batch.
    fn result<'py>(&self, py: Python<'py>, out: crate::Output, bad: Bound<'py, PyList>) -> RunResult<'py> {
        result_of(py, &self.scratch, out, bad)
    }
}

fn result_of<'py>(py: Python<'py>, scratch: &Mutex<Vec<u8>>, out: crate::Output, bad: Bound<'py, PyList>) -> RunResult<'py> {
    let buf = PyBytes::new(py, &out.buf);
    let (ends, positions) = (int64_bytes(py, &out.ends), int64_bytes(py, &out.positions));
    *crate::lock(scratch) = out.buf;
    (buf, ends, positions, bad)
}

/// The batch positions to transform (every record's for None), checked against the batch.
fn picks_of(packed: &Packed<'_>, positions: Option<&PyBuffer<i64>>) -> PyResult<Vec<i64>> {
    let picks: Vec<i64> = match positions {
        Some(p) => view(p, "positions")?.to_vec(),
        None => (0..packed.len() as i64).collect(),
    };
    if picks.iter().any(|&p| p < 0 || p as usize >= packed.len()) {
        return Err(PyValueError::new_err("a position lies outside the batch"));
    }
    packed.check_headers(Some(&picks)).map_err(PyValueError::new_err)?;
    Ok(picks)
}

/// The records at `picks` (checked by `picks_of`) transformed; rows carry batch positions.
fn run_picks(inner: &crate::Transform, packed: &Packed<'_>, picks: &[i64], threads: usize, scratch: Vec<u8>) -> crate::Output {
    let mut out = inner.run_split(&picked_records(packed, picks), threads, scratch);
    at_picks(&mut out, picks);
    out
}

/// The records at `picks` (checked by `picks_of`), in that order.
fn picked_records<'a>(packed: &Packed<'a>, picks: &[i64]) -> Vec<RawRecord<'a>> {
    picks.iter().map(|&p| packed.record(p as usize)).collect()
}

/// Rows numbered by their place in `picks` renumbered by their batch position.
fn at_picks(out: &mut crate::Output, picks: &[i64]) {
    for row in &mut out.positions {
        *row = picks[*row as usize];
    }
}

/// A run's result, its dead letters as `(position, reason, text)`: a dead letter's record stays in
/// the batch until its dead-letter record is made (Python objects, under the GIL, only when read).
fn picked_result<'py>(py: Python<'py>, scratch: &Mutex<Vec<u8>>, mut out: crate::Output, picks: &[i64]) -> PyResult<RunResult<'py>> {
    let bad = PyList::empty(py);
    for (i, reason, text) in std::mem::take(&mut out.bad) {
        bad.append((picks[i], reason, text))?;
    }
    Ok(result_of(py, scratch, out, bad))
}

/// A `Transform.start_packed` run: the records of a packed batch transformed on native threads,
/// helped by the thread that takes the result.
///
/// No Python thread takes part, so nothing waits for the GIL on the way in or out: a Python thread
/// would need it to start the work and again to return it, and a thread busy running Python code
/// holds it for up to the interpreter's switch interval (5 ms) each time. The records go out in
/// chunks (`crate::Chunked`): `result()` transforms the chunks no thread has taken yet, so the
/// caller's wait is work, not idle time.
#[pyclass(name = "PackedRun", module = "llmpipe_native")]
struct PackedRun {
    /// Joined before `held` is let go (`result` and `Drop`): they read the buffers `held` keeps.
    /// (`held` is the last field, so `shared`, whose records point into those buffers, drops first.)
    threads: Vec<JoinHandle<f64>>,
    shared: Option<Arc<Shared>>,
    picks: Vec<i64>,
    scratch: Arc<Mutex<Vec<u8>>>,
    seconds: Option<f64>,
    helped: usize,
    held: Option<PackedBuffers>,
}

/// What a run's threads share: the transform and the records, in chunks.
struct Shared {
    inner: Arc<crate::Transform>,
    records: crate::Chunked<'static>,
}

/// Records per chunk of a `PackedRun`: about 0.2 ms of one core's work on ~1 KB bodies.
const RUN_CHUNK: usize = 64;

#[pymethods]
impl PackedRun {
    /// Transform the chunks no thread has taken, wait for the run's threads (all without the GIL)
    /// and return what `run_packed` returns; once only.
    fn result<'py>(&mut self, py: Python<'py>) -> PyResult<RunResult<'py>> {
        let shared = self.shared.take().ok_or_else(|| PyValueError::new_err("this run's result was taken"))?;
        let threads = std::mem::take(&mut self.threads);
        let (helped, joined) = py.detach(|| {
            let helped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| shared.records.work(&shared.inner)));
            let joined: Result<Vec<f64>, _> = threads.into_iter().map(JoinHandle::join).collect();
            (helped, joined)
        });
        let panicked = || pyo3::exceptions::PyRuntimeError::new_err("the native run panicked");
        self.helped = helped.map_err(|_| panicked())?;
        self.seconds = Some(joined.map_err(|_| panicked())?.iter().sum());
        let records = Arc::try_unwrap(shared).map_err(|_| panicked())?.records;
        let mut out = records.finish().ok_or_else(panicked)?;
        self.held = None; // the threads have ended and the records that pointed into the buffers are gone
        at_picks(&mut out, &self.picks);
        picked_result(py, &self.scratch, out, &self.picks)
    }

    /// Seconds the run's native threads spent on it (None until its result is taken).
    #[getter]
    fn seconds(&self) -> Option<f64> {
        self.seconds
    }

    /// Chunks of records `result()` transformed itself (0 until then).
    #[getter]
    fn helped(&self) -> usize {
        self.helped
    }
}

impl Drop for PackedRun {
    fn drop(&mut self) {
        for thread in self.threads.drain(..) {
            let _ = thread.join(); // the threads read `held`'s buffers: they end before those are let go
        }
    }
}

#[pymethods]
impl PyTransform {
    /// Compile the transform for one Avro record schema and content JSON Schema (both JSON text).
    #[new]
    fn new(avro_schema: &str, content_schema: &str, max_record_bytes: usize) -> PyResult<Self> {
        crate::Transform::new(avro_schema, content_schema, max_record_bytes)
            .map(|inner| PyTransform { inner: Arc::new(inner), scratch: Arc::new(Mutex::new(Vec::new())) })
            .map_err(PyValueError::new_err)
    }

    /// Transform one batch. `values`, `keys` and `headers` are lists; `partitions`, `offsets` and
    /// `timestamps_ms` are little-endian int64 buffers. Returns `(buf, ends, positions, bad)`:
    /// the encoded rows, each row's end in `buf` and batch position (int64 buffers), and
    /// `(position, reason, text)` for each dead letter.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (values, keys, headers, partitions, offsets, timestamps_ms, threads=1))]
    fn run<'py>(
        &self,
        py: Python<'py>,
        values: &Bound<'py, PyList>,
        keys: &Bound<'py, PyList>,
        headers: &Bound<'py, PyList>,
        partitions: &[u8],
        offsets: &[u8],
        timestamps_ms: &[u8],
        threads: usize,
    ) -> PyResult<RunResult<'py>> {
        let n = values.len();
        let partitions = int64s(partitions, n, "partitions")?;
        let offsets = int64s(offsets, n, "offsets")?;
        let timestamps = int64s(timestamps_ms, n, "timestamps_ms")?;
        let held = hold(values, keys, headers)?;
        let records: Vec<RawRecord<'_>> = held.iter().enumerate().map(|(i, h)| RawRecord {
            value: h.value.as_bytes(),
            key: h.key.as_ref().map(|k| k.as_bytes()),
            latency: h.latency.as_ref().map(|v| v.as_bytes()),
            attributes: h.attributes.as_ref().map(|v| v.as_bytes()),
            partition: partitions[i],
            offset: offsets[i],
            timestamp_ms: timestamps[i],
        }).collect();
        let scratch = self.take_scratch();
        // The bytes objects are immutable and `held` keeps them alive, so their buffers can be read
        // without the GIL: other Python threads (metrics, watchdog, a consumer) run meanwhile.
        let inner = &self.inner;
        let mut out = py.detach(move || inner.run_split(&records, threads, scratch));
        let bad = PyList::empty(py);
        for (i, reason, text) in std::mem::take(&mut out.bad) {
            bad.append((i, reason, text))?;
        }
        Ok(self.result(py, out, bad))
    }

    /// A batch's columns as a device lane takes them. The values are written back to back into
    /// `out` (a writable, contiguous buffer, e.g. pinned host memory the device copies from);
    /// returns `(value_ends, keys, key_ends, key_null, headers, header_ends)`: each value's end
    /// (int64), and the keys and the headers the transform reads packed as `gpu_stage.transform.packed` packs
    /// them. When `out` is smaller than the values' total size, returns that size instead (an int)
    /// and writes nothing. The copying and packing run without the GIL.
    fn lane_input<'py>(
        &self,
        py: Python<'py>,
        values: &Bound<'py, PyList>,
        keys: &Bound<'py, PyList>,
        headers: &Bound<'py, PyList>,
        out: &Bound<'py, PyAny>,
    ) -> PyResult<LaneInput<'py>> {
        let held = hold(values, keys, headers)?;
        let target = PyBuffer::<u8>::get(out)?;
        if target.readonly() || !target.is_c_contiguous() {
            return Err(PyValueError::new_err("out must be a writable contiguous byte buffer"));
        }
        let total: usize = held.iter().map(|h| h.value.as_bytes().len()).sum();
        if target.len_bytes() < total {
            // The caller grows its buffer to this size and calls again (rare: buffers are reused).
            return Ok(LaneInput::Needs(total));
        }
        let base = target.buf_ptr() as usize;
        let records: Vec<(&[u8], Option<&[u8]>, Option<&[u8]>, Option<&[u8]>)> = held
            .iter()
            .map(|h| (h.value.as_bytes(), bytes_of(&h.key), bytes_of(&h.latency), bytes_of(&h.attributes)))
            .collect();
        // `held` keeps the bytes objects alive and `target` the buffer: both are read and written
        // without the GIL, so the caller's other threads run meanwhile.
        let (value_ends, cols) = py.detach(move || {
            // SAFETY: `target` is a writable, C-contiguous buffer of at least `total` bytes, held
            // (and not shared with Rust code) until this call returns.
            let dst = unsafe { std::slice::from_raw_parts_mut(base as *mut u8, total) };
            let values: Vec<&[u8]> = records.iter().map(|r| r.0).collect();
            crate::pack::pack_into(&values, dst);
            let value_ends = crate::pack::ends_of(&values);
            (value_ends, crate::packed::RecordColumns::of(records.iter().map(|r| (r.1, r.2, r.3))))
        });
        drop(target);
        Ok(LaneInput::Packed((
            int64_bytes(py, &value_ends),
            PyBytes::new(py, &cols.keys),
            int64_bytes(py, &cols.key_ends),
            PyBytes::new(py, &cols.key_null),
            PyBytes::new(py, &cols.headers),
            int64_bytes(py, &cols.header_ends),
        )))
    }

    /// Transform the records at `positions` (int64, increasing; None: every record) of a packed
    /// batch (`columns`: see `PackedBuffers`). Returns what `run` returns, with batch positions:
    /// each dead letter is `(position, reason, text)`, its record read from the batch by the caller.
    /// Runs without the GIL; the caller leaves the buffers alone meanwhile.
    #[pyo3(signature = (columns, positions=None, threads=1))]
    fn run_packed<'py>(
        &self,
        py: Python<'py>,
        columns: &Bound<'py, PyTuple>,
        positions: Option<PyBuffer<i64>>,
        threads: usize,
    ) -> PyResult<RunResult<'py>> {
        let held = PackedBuffers::of(columns)?;
        let packed = held.packed()?;
        let picks = picks_of(&packed, positions.as_ref())?;
        let scratch = self.take_scratch();
        let inner = &self.inner;
        let out = py.detach(|| run_picks(inner, &packed, &picks, threads, scratch));
        picked_result(py, &self.scratch, out, &picks)
    }

    /// `run_packed` started on `threads` native threads (0: none, `result()` does it all); returns
    /// the run, whose `result()` helps finish it and returns its result. The caller leaves the
    /// buffers alone until then.
    #[pyo3(signature = (columns, positions=None, threads=1))]
    fn start_packed(&self, columns: &Bound<'_, PyTuple>, positions: Option<PyBuffer<i64>>, threads: usize) -> PyResult<PackedRun> {
        let held = PackedBuffers::of(columns)?;
        let picks = picks_of(&held.packed()?, positions.as_ref())?;
        // SAFETY: the slices point into the buffers `held` keeps exported; the run owns `held` and
        // joins its threads before letting it go (`PackedRun::result` and `Drop`), so they outlive them.
        let packed: Packed<'static> = unsafe { std::mem::transmute::<Packed<'_>, Packed<'static>>(held.packed()?) };
        let records = picked_records(&packed, &picks);
        let chunks = picks.len().div_ceil(RUN_CHUNK);
        let shared = Arc::new(Shared { inner: Arc::clone(&self.inner), records: crate::Chunked::new(records, RUN_CHUNK, self.take_scratch()) });
        let mut run = PackedRun {
            threads: Vec::new(),
            shared: Some(Arc::clone(&shared)),
            picks,
            scratch: Arc::clone(&self.scratch),
            seconds: None,
            helped: 0,
            held: Some(held),
        };
        for _ in 0..threads.min(chunks) {
            let shared = Arc::clone(&shared);
            let thread = std::thread::Builder::new().name("llmpipe-native-run".into()).spawn(move || {
                let started = Instant::now();
                shared.records.work(&shared.inner);
                started.elapsed().as_secs_f64()
            });
            // On an error, dropping `run` joins the threads already started.
            run.threads.push(thread.map_err(|e| pyo3::exceptions::PyRuntimeError::new_err(format!("cannot start a native thread: {e}")))?);
        }
        Ok(run)
    }

}

/// Refuse a packed batch whose columns differ in length or whose ends leave their buffers (what a
/// device reads by those ends must lie inside them); headers are read where they are used.
#[pyfunction]
fn check_packed(columns: &Bound<'_, PyTuple>) -> PyResult<()> {
    PackedBuffers::of(columns)?.packed().map(drop)
}

/// Copy the byte buffer `src` into `dst` (writable, of the same size) without the GIL, on two
/// threads when it is large: a batch's values into page-locked memory.
#[pyfunction]
fn copy_into(py: Python<'_>, src: PyBuffer<u8>, dst: PyBuffer<u8>) -> PyResult<()> {
    let from = view(&src, "src")?;
    let to = view_mut(&dst, "dst")?;
    if from.len() != to.len() {
        return Err(PyValueError::new_err("copy_into needs buffers of one size"));
    }
    py.detach(|| crate::packed::copy_into(from, to));
    Ok(())
}

/// Copy each row of `src` (row `i` ends at `src_ends[i]`) to `dst` at `starts[i]`, without the GIL:
/// the native core's rows into their places among the device lane's.
#[pyfunction]
fn place(py: Python<'_>, dst: PyBuffer<u8>, src: PyBuffer<u8>, src_ends: PyBuffer<i64>, starts: PyBuffer<i64>) -> PyResult<()> {
    let to = view_mut(&dst, "dst")?;
    let (from, ends, at) = (view(&src, "src")?, view(&src_ends, "src_ends")?, view(&starts, "starts")?);
    py.detach(|| crate::packed::place(to, from, ends, at)).map_err(PyValueError::new_err)
}

/// Each good row's place in a batch's output (see `packed::lane_offsets`), without the GIL; returns
/// how many good rows there are.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn lane_offsets(
    py: Python<'_>,
    sizes: PyBuffer<i64>,
    rest_rows: PyBuffer<i64>,
    rest_ends: PyBuffer<i64>,
    rows: PyBuffer<i64>,
    offsets: PyBuffer<i64>,
    starts: PyBuffer<i64>,
    rest_starts: PyBuffer<i64>,
) -> PyResult<usize> {
    let (sizes, rest_rows, rest_ends) = (view(&sizes, "sizes")?, view(&rest_rows, "rest_rows")?, view(&rest_ends, "rest_ends")?);
    let (rows, offsets) = (view_mut(&rows, "rows")?, view_mut(&offsets, "offsets")?);
    let (starts, rest_starts) = (view_mut(&starts, "starts")?, view_mut(&rest_starts, "rest_starts")?);
    py.detach(|| crate::packed::lane_offsets(sizes, rest_rows, rest_ends, rows, offsets, starts, rest_starts))
        .map_err(PyValueError::new_err)
}

/// Record `i`'s headers from a packed header buffer and its ends, as `(name, value)` pairs (a null
/// value is None): a dead letter keeps its record's headers.
#[pyfunction]
fn headers_at<'py>(py: Python<'py>, buf: PyBuffer<u8>, ends: PyBuffer<i64>, i: usize) -> PyResult<Bound<'py, PyList>> {
    let (bytes, ends) = (view(&buf, "buf")?, view(&ends, "ends")?);
    let end = *ends.get(i).ok_or_else(|| PyValueError::new_err("record index out of range"))?;
    let start = if i == 0 { 0 } else { ends[i - 1] };
    let raw = usize::try_from(start)
        .ok()
        .zip(usize::try_from(end).ok())
        .and_then(|(s, e)| bytes.get(s..e))
        .ok_or_else(|| PyValueError::new_err("header ends outside the buffer"))?;
    header_list(py, raw)
}

/// One record's packed headers as a list of `(name, value)` pairs (a null value is None).
fn header_list<'py>(py: Python<'py>, raw: &[u8]) -> PyResult<Bound<'py, PyList>> {
    let list = PyList::empty(py);
    for (name, value) in crate::packed::headers(raw).map_err(PyValueError::new_err)? {
        let name = std::str::from_utf8(name).map_err(|_| PyValueError::new_err("a header name is not UTF-8"))?;
        list.append((name, value.map(|v| PyBytes::new(py, v))))?;
    }
    Ok(list)
}

/// The records at `positions` of a packed batch (`columns`: see `PackedBuffers`), each as `(value,
/// key, headers, partition, offset)`, made in one pass: the dead letters of a batch, once read.
#[pyfunction]
fn records_at<'py>(
    py: Python<'py>,
    columns: &Bound<'py, PyTuple>,
    positions: PyBuffer<i64>,
) -> PyResult<Bound<'py, PyList>> {
    let held = PackedBuffers::of(columns)?;
    let packed = held.packed()?;
    let out = PyList::empty(py);
    for &at in view(&positions, "positions")? {
        let p = usize::try_from(at)
            .ok()
            .filter(|&p| p < packed.len())
            .ok_or_else(|| PyValueError::new_err("a position lies outside the batch"))?;
        let headers = header_list(py, packed.header_bytes(p))?;
        let value = PyBytes::new(py, packed.value(p));
        let key = packed.key(p).map(|k| PyBytes::new(py, k));
        out.append((value, key, headers, packed.partitions[p], packed.offsets[p]))?;
    }
    Ok(out)
}

#[pymodule]
fn llmpipe_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyTransform>()?;
    m.add_class::<PackedRun>()?;
    m.add_class::<crate::kafka::KafkaReader>()?;
    m.add_class::<crate::writer::KafkaWriter>()?;
    m.add("KafkaCallError", m.py().get_type::<crate::writer::KafkaCallError>())?;
    m.add_function(wrap_pyfunction!(check_packed, m)?)?;
    m.add_function(wrap_pyfunction!(copy_into, m)?)?;
    m.add_function(wrap_pyfunction!(place, m)?)?;
    m.add_function(wrap_pyfunction!(headers_at, m)?)?;
    m.add_function(wrap_pyfunction!(records_at, m)?)?;
    m.add_function(wrap_pyfunction!(lane_offsets, m)?)?;
    Ok(())
}
