//! A transactional Kafka producer that writes a batch's typed rows straight from the buffers the
//! transform returns, with no Python object per record.
//!
//! On the worker's confluent-kafka path every typed row costs a `bytes` object for its value, one
//! for its key and a `produce` call with its header list: on the GPU host that was the largest part
//! of the worker's main thread. Here one call enqueues a whole chunk: each row's datum (behind an
//! optional wire prefix) is a slice of the output buffer, its key a slice of the raw batch's key
//! column (or an item of a list), and the one header list is copied per record by librdkafka. The
//! GIL is released meanwhile. Transactions (init, begin, send offsets with a consumer's serialized
//! group metadata, commit, abort) are librdkafka's, and their errors come back as `KafkaCallError`
//! with librdkafka's classification, so the caller can tell fatal, abortable and retriable apart.
//! Delivery reports are served by this client's calls; the first failed one is kept.

use std::ffi::{c_void, CString};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use pyo3::buffer::PyBuffer;
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, DeliveryResult, Producer, ProducerContext};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientContext;
use rdkafka_sys as rdsys;
use rdkafka_sys::rd_kafka_vtype_t::*;

use crate::kafka::{log_level, partition_list, timeout, Reported};
use crate::packed::{check_ends, span};
use crate::py::view;

create_exception!(
    llmpipe_native,
    KafkaCallError,
    PyException,
    "A Kafka client call failed: args are (text, code name, fatal, retriable, abortable)."
);

/// How long one wait for room in librdkafka's queue lasts before the next try.
const ROOM_WAIT: Duration = Duration::from_millis(50);

struct WriterContext {
    reports: Reported,
    delivered: AtomicU64,
    purged: AtomicU64,
    first_failure: Mutex<Option<String>>,
}

impl ClientContext for WriterContext {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, text: &str) {
        self.reports.report(level as i32, facility, text);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        self.reports.error(&error, reason);
    }
}

impl ProducerContext for WriterContext {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _opaque: ()) {
        match result {
            Ok(_) => {
                self.delivered.fetch_add(1, Ordering::Relaxed);
            }
            Err((err, msg)) => {
                let code = err.rdkafka_error_code();
                if matches!(code, Some(RDKafkaErrorCode::PurgeQueue | RDKafkaErrorCode::PurgeInflight)) {
                    self.purged.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                let text = format!("delivery failed topic={}[{}]: {err}", msg.topic(), msg.partition());
                self.reports.report(3, "DELIVERY", &text);
                self.first_failure.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert(text);
            }
        }
    }
}

/// A failed call as librdkafka classifies it: (text, code name, fatal, retriable, abortable).
type Failure = (String, String, bool, bool, bool);

/// The classification of `err`.
fn failure_of(err: &KafkaError) -> Failure {
    let (code, fatal, retriable, abortable) = match err {
        KafkaError::Transaction(e) => (e.code(), e.is_fatal(), e.is_retriable(), e.txn_requires_abort()),
        other => (other.rdkafka_error_code().unwrap_or(RDKafkaErrorCode::Fail), false, false, false),
    };
    (err.to_string(), format!("{code:?}"), fatal, retriable, abortable)
}

/// The classification of a librdkafka error object, which is destroyed here.
///
/// # Safety
/// `err` is an error librdkafka returned and nothing else owns.
unsafe fn failure_of_ptr(err: *mut rdsys::rd_kafka_error_t) -> Failure {
    let text = std::ffi::CStr::from_ptr(rdsys::rd_kafka_error_string(err)).to_string_lossy().into_owned();
    let code: RDKafkaErrorCode = rdsys::rd_kafka_error_code(err).into();
    let failure = (
        text,
        format!("{code:?}"),
        rdsys::rd_kafka_error_is_fatal(err) != 0,
        rdsys::rd_kafka_error_is_retriable(err) != 0,
        rdsys::rd_kafka_error_txn_requires_abort(err) != 0,
    );
    rdsys::rd_kafka_error_destroy(err);
    failure
}

/// A `KafkaCallError` for `action` that failed with `failure`.
fn raised(action: &str, failure: Failure) -> PyErr {
    let (text, code, fatal, retriable, abortable) = failure;
    KafkaCallError::new_err((format!("{action} failed: {text}"), code, fatal, retriable, abortable))
}

/// A `KafkaCallError` for `action`, classified as librdkafka classifies `err`.
fn call_error(action: &str, err: &KafkaError) -> PyErr {
    raised(action, failure_of(err))
}

/// The keys of the rows of one produce call: a packed key column read at row positions, or a list.
enum Keys<'a> {
    Packed { buf: &'a [u8], ends: &'a [i64], null: &'a [u8], rows: &'a [i64] },
    Listed(Vec<Option<&'a [u8]>>),
    None,
}

impl Keys<'_> {
    fn key(&self, i: usize) -> Option<&[u8]> {
        match self {
            Keys::Packed { buf, ends, null, rows } => {
                let at = rows[i] as usize;
                if null[at] != 0 {
                    return None;
                }
                let (start, end) = span(ends, at);
                Some(&buf[start..end])
            }
            Keys::Listed(keys) => keys[i],
            Keys::None => None,
        }
    }
}

/// librdkafka headers: one list, copied into each record (librdkafka owns a record's copy).
struct HeaderTemplate(*mut rdsys::rd_kafka_headers_t);

// SAFETY: the template is only read (copied) after it is built, by one call at a time.
unsafe impl Send for HeaderTemplate {}
unsafe impl Sync for HeaderTemplate {}

impl HeaderTemplate {
    fn of(headers: &[(String, Option<Vec<u8>>)]) -> Self {
        // SAFETY: a fresh list; each name and value is copied by `rd_kafka_header_add`.
        unsafe {
            let list = rdsys::rd_kafka_headers_new(headers.len());
            for (name, value) in headers {
                let (ptr, len) = value.as_ref().map_or((std::ptr::null(), 0), |v| (v.as_ptr() as *const c_void, v.len() as isize));
                rdsys::rd_kafka_header_add(list, name.as_ptr() as *const _, name.len() as isize, ptr, len);
            }
            Self(list)
        }
    }

    fn copy(&self) -> *mut rdsys::rd_kafka_headers_t {
        // SAFETY: `self.0` is a live list.
        unsafe { rdsys::rd_kafka_headers_copy(self.0) }
    }
}

impl Drop for HeaderTemplate {
    fn drop(&mut self) {
        // SAFETY: built by `of`, destroyed once.
        unsafe { rdsys::rd_kafka_headers_destroy(self.0) }
    }
}

/// A transactional producer (see the module docstring).
#[pyclass(name = "KafkaWriter", module = "llmpipe_native")]
pub struct KafkaWriter {
    producer: BaseProducer<WriterContext>,
}

impl KafkaWriter {
    /// Enqueue one record, waiting for room in librdkafka's queue until `deadline`.
    fn send(&self, topic: &CString, partition: i32, value: &[u8], key: Option<&[u8]>, headers: &HeaderTemplate, deadline: Instant) -> Result<(), KafkaError> {
        let (key_ptr, key_len) = key.map_or((std::ptr::null_mut(), 0), |k| (k.as_ptr() as *mut c_void, k.len()));
        loop {
            let copy = headers.copy();
            // SAFETY: the handle is alive; librdkafka copies the value and key (MSG_F_COPY) and takes
            // the header copy on success; on failure the copy is destroyed here.
            let err = unsafe {
                rdsys::rd_kafka_producev(
                    self.producer.client().native_ptr(),
                    RD_KAFKA_VTYPE_TOPIC, topic.as_ptr(),
                    RD_KAFKA_VTYPE_PARTITION, partition,
                    RD_KAFKA_VTYPE_MSGFLAGS, rdsys::RD_KAFKA_MSG_F_COPY,
                    RD_KAFKA_VTYPE_VALUE, value.as_ptr() as *mut c_void, value.len(),
                    RD_KAFKA_VTYPE_KEY, key_ptr, key_len,
                    RD_KAFKA_VTYPE_HEADERS, copy,
                    RD_KAFKA_VTYPE_END,
                )
            };
            if err == rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
                return Ok(());
            }
            // SAFETY: not taken by librdkafka.
            unsafe { rdsys::rd_kafka_headers_destroy(copy) };
            if err != rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR__QUEUE_FULL || Instant::now() >= deadline {
                return Err(KafkaError::MessageProduction(err.into()));
            }
            self.producer.poll(ROOM_WAIT);
        }
    }

    fn raise_fatal(&self) -> PyResult<()> {
        match self.producer.context().reports.fatal() {
            Some(text) => Err(KafkaCallError::new_err((format!("fatal producer error: {text}"), "Fatal", true, false, false))),
            None => Ok(()),
        }
    }
}

#[pymethods]
impl KafkaWriter {
    /// A producer with librdkafka properties `config` (strings); `transactional.id` among them
    /// makes it transactional (call `init_transactions` before the first transaction).
    #[new]
    fn new(config: &Bound<'_, PyDict>) -> PyResult<Self> {
        let mut client = ClientConfig::new();
        for (key, value) in config.iter() {
            client.set(key.extract::<String>()?, value.str()?.to_string());
        }
        client.set_log_level(log_level(&client));
        let context = WriterContext {
            reports: Reported::default(),
            delivered: AtomicU64::new(0),
            purged: AtomicU64::new(0),
            first_failure: Mutex::new(None),
        };
        let producer = client.create_with_context(context).map_err(|e| PyValueError::new_err(format!("producer: {e}")))?;
        Ok(Self { producer })
    }

    /// Fence earlier producers of the transactional id and get its producer id and epoch.
    fn init_transactions(&self, py: Python<'_>, timeout_s: f64) -> PyResult<()> {
        let producer = &self.producer;
        py.detach(move || producer.init_transactions(timeout(timeout_s))).map_err(|e| call_error("init_transactions", &e))
    }

    /// Start a transaction.
    fn begin(&self) -> PyResult<()> {
        self.producer.begin_transaction().map_err(|e| call_error("begin_transaction", &e))
    }

    /// Enqueue the rows of one chunk to `topic`: row `i`'s value is `prefix` followed by
    /// `values[offsets[i]:offsets[i + 1]]`; its key comes from `keys` (a tuple `(key_buf, key_ends,
    /// key_null, rows)`: the packed key column of the raw records read at row positions; or a list
    /// of bytes or None, one per row; or None); its partition is `partitions[i]` (-1, or no
    /// `partitions`: where the key hashes to); every row carries `headers`. Waits up to `timeout_s`
    /// for room in librdkafka's queue. Returns how many rows were enqueued.
    #[pyo3(signature = (topic, values, offsets, prefix, keys, partitions, headers, timeout_s))]
    #[allow(clippy::too_many_arguments)]
    fn produce_rows(
        &self,
        py: Python<'_>,
        topic: &str,
        values: PyBuffer<u8>,
        offsets: PyBuffer<i64>,
        prefix: &[u8],
        keys: &Bound<'_, PyAny>,
        partitions: Option<PyBuffer<i64>>,
        headers: Vec<(String, Option<Vec<u8>>)>,
        timeout_s: f64,
    ) -> PyResult<usize> {
        let buf = view(&values, "values")?;
        let ends = view(&offsets, "offsets")?;
        let n = ends.len().saturating_sub(1);
        check_ends(ends, buf.len(), "offsets").map_err(PyValueError::new_err)?;
        let parts = partitions.as_ref().map(|p| view(p, "partitions")).transpose()?;
        if parts.is_some_and(|p| p.len() != n) {
            return Err(PyValueError::new_err("one partition per row"));
        }
        let held: Vec<PyBuffer<u8>>;
        let held_ints: Vec<PyBuffer<i64>>;
        let key_source = if keys.is_none() {
            Keys::None
        } else if let Ok(list) = keys.cast::<PyList>() {
            if list.len() != n {
                return Err(PyValueError::new_err("one key per row"));
            }
            let mut found = Vec::with_capacity(n);
            for item in list.iter() {
                found.push(if item.is_none() { None } else { Some(item.cast_into::<pyo3::types::PyBytes>()?.unbind()) });
            }
            // The list holds the keys alive for the call; the slices are read without the GIL.
            let slices = found.iter().map(|k| k.as_ref().map(|b| b.as_bytes(py))).collect();
            return self.produce_all(py, topic, buf, ends, prefix, Keys::Listed(slices), parts, &headers, timeout_s);
        } else {
            let tuple = keys.cast::<PyTuple>()?;
            held = vec![PyBuffer::get(&tuple.get_item(0)?)?, PyBuffer::get(&tuple.get_item(2)?)?];
            held_ints = vec![PyBuffer::get(&tuple.get_item(1)?)?, PyBuffer::get(&tuple.get_item(3)?)?];
            let (kbuf, null) = (view(&held[0], "key_buf")?, view(&held[1], "key_null")?);
            let (kends, rows) = (view(&held_ints[0], "key_ends")?, view(&held_ints[1], "rows")?);
            let last = kends.len();
            check_ends(kends, kbuf.len(), "packed keys").map_err(PyValueError::new_err)?;
            if rows.len() != n || null.len() != last || rows.iter().any(|&r| r < 0 || r as usize >= last) {
                return Err(PyValueError::new_err("packed keys: one row position per row, inside the key columns"));
            }
            Keys::Packed { buf: kbuf, ends: kends, null, rows }
        };
        self.produce_all(py, topic, buf, ends, prefix, key_source, parts, &headers, timeout_s)
    }

    /// Enqueue one record (partition -1: where its key hashes to), waiting up to `timeout_s` for room.
    #[pyo3(signature = (topic, value, key, partition, headers, timeout_s))]
    fn produce(&self, py: Python<'_>, topic: &str, value: Option<&[u8]>, key: Option<&[u8]>, partition: i32, headers: Vec<(String, Option<Vec<u8>>)>, timeout_s: f64) -> PyResult<()> {
        let value = value.unwrap_or(&[]);
        let ends = [0, value.len() as i64];
        let parts = [i64::from(partition)];
        self.produce_all(py, topic, value, &ends, &[], Keys::Listed(vec![key]), Some(&parts), &headers, timeout_s)?;
        Ok(())
    }

    /// Add a consumer's next offsets (topic, partition, offset) to the open transaction, with its
    /// group metadata as librdkafka serializes it.
    fn send_offsets(&self, py: Python<'_>, offsets: Vec<(String, i32, i64)>, group_metadata: &[u8], timeout_s: f64) -> PyResult<()> {
        let list = partition_list(&offsets)?;
        let rk = self.producer.client().native_ptr() as usize;
        let metadata = group_metadata.to_vec();
        let outcome = py.detach(move || {
            // SAFETY: the handle outlives the call; the metadata read here is destroyed here, and the
            // error librdkafka returns is owned by `RDKafkaError`.
            unsafe {
                let mut md: *mut rdsys::rd_kafka_consumer_group_metadata_t = std::ptr::null_mut();
                let read = rdsys::rd_kafka_consumer_group_metadata_read(&mut md, metadata.as_ptr() as *const c_void, metadata.len());
                if !read.is_null() {
                    return Err(failure_of_ptr(read));
                }
                let ms = timeout(timeout_s).as_millis().min(i32::MAX as u128) as i32;
                let err = rdsys::rd_kafka_send_offsets_to_transaction(rk as *mut rdsys::rd_kafka_t, list.ptr(), md, ms);
                rdsys::rd_kafka_consumer_group_metadata_destroy(md);
                if err.is_null() { Ok(()) } else { Err(failure_of_ptr(err)) }
            }
        });
        outcome.map_err(|f| raised("send_offsets_to_transaction", f))
    }

    /// Commit the open transaction (every record of it delivered first).
    fn commit(&self, py: Python<'_>, timeout_s: f64) -> PyResult<()> {
        let producer = &self.producer;
        py.detach(move || producer.commit_transaction(timeout(timeout_s))).map_err(|e| call_error("commit_transaction", &e))
    }

    /// Abort the open transaction.
    fn abort(&self, py: Python<'_>, timeout_s: f64) -> PyResult<()> {
        let producer = &self.producer;
        py.detach(move || producer.abort_transaction(timeout(timeout_s))).map_err(|e| call_error("abort_transaction", &e))
    }

    /// Wait up to `timeout_s` for every enqueued record; returns how many are still undelivered.
    fn flush(&self, py: Python<'_>, timeout_s: f64) -> PyResult<i32> {
        let producer = &self.producer;
        let _ = py.detach(move || producer.flush(timeout(timeout_s)));
        self.raise_fatal()?;
        Ok(self.producer.in_flight_count())
    }

    /// Serve delivery reports for up to `timeout_s`.
    fn poll(&self, py: Python<'_>, timeout_s: f64) -> PyResult<()> {
        let producer = &self.producer;
        py.detach(move || producer.poll(timeout(timeout_s)));
        self.raise_fatal()
    }

    /// Records enqueued and not yet delivered (or failed).
    fn in_flight(&self) -> i32 {
        self.producer.in_flight_count()
    }

    /// (delivered, purged) records so far.
    fn counts(&self) -> (u64, u64) {
        let context = self.producer.context();
        (context.delivered.load(Ordering::Relaxed), context.purged.load(Ordering::Relaxed))
    }

    /// The first failed delivery since the last call, if any.
    fn take_failure(&self) -> Option<String> {
        self.producer.context().first_failure.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// The log lines librdkafka reported since the last call, and how many were dropped.
    fn take_logs(&self) -> (Vec<(i32, String, String)>, usize) {
        self.producer.context().reports.take()
    }
}

impl KafkaWriter {
    #[allow(clippy::too_many_arguments)]
    fn produce_all(
        &self,
        py: Python<'_>,
        topic: &str,
        buf: &[u8],
        ends: &[i64],
        prefix: &[u8],
        keys: Keys<'_>,
        partitions: Option<&[i64]>,
        headers: &[(String, Option<Vec<u8>>)],
        timeout_s: f64,
    ) -> PyResult<usize> {
        let name = CString::new(topic).map_err(|_| PyValueError::new_err("a topic name holds a NUL"))?;
        let template = HeaderTemplate::of(headers);
        let deadline = Instant::now() + timeout(timeout_s);
        let n = ends.len().saturating_sub(1);
        let sent = py.detach(|| {
            let mut framed = Vec::new();
            for i in 0..n {
                let datum = &buf[ends[i] as usize..ends[i + 1] as usize];
                let value = if prefix.is_empty() {
                    datum
                } else {
                    framed.clear();
                    framed.extend_from_slice(prefix);
                    framed.extend_from_slice(datum);
                    &framed[..]
                };
                let partition = partitions.map_or(-1, |p| p[i] as i32);
                if let Err(e) = self.send(&name, partition, value, keys.key(i), &template, deadline) {
                    return Err((i, e));
                }
            }
            self.producer.poll(Duration::ZERO);
            Ok(n)
        });
        let sent = sent.map_err(|(i, e)| call_error(&format!("produce to {topic} (row {i})"), &e))?;
        self.raise_fatal()?;
        Ok(sent)
    }
}
