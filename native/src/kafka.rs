//! A Kafka group consumer that writes what it reads into packed columns (the layout of
//! `gpu_stage.transform.packed`), with no Python object per record.
//!
//! Through the broker, reading a record through confluent-kafka costs a `Message` object, a bytes
//! object per field and, for the connector's seven headers, a list of seven tuples: about as much
//! CPU as librdkafka's own work. Here librdkafka (the `rdkafka` crate) is polled with the GIL
//! released and each record is appended to ten columns. Rebalances reach Python through one
//! callable, `on_rebalance(kind, [(topic, partition), ...])` with kind `assign` or `revoke`, called
//! inside `consume` as confluent-kafka does; librdkafka's log lines are queued and handed to Python
//! at the next call, never from librdkafka's own threads.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::KafkaError;
use rdkafka::message::{Headers, Message};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientContext, Offset, TopicPartitionList};

/// Log lines kept between two calls; older ones are counted, not kept.
const LOG_LINES: usize = 1000;

/// Info, or Debug where the configuration names `debug` contexts: librdkafka writes their lines at
/// level 7, which the Info level would drop.
pub(crate) fn log_level(config: &ClientConfig) -> RDKafkaLogLevel {
    if config.get("debug").is_some_and(|contexts| !contexts.is_empty()) {
        RDKafkaLogLevel::Debug
    } else {
        RDKafkaLogLevel::Info
    }
}

/// What librdkafka reports from its own threads, kept for the thread that calls in.
#[derive(Default)]
struct Reports {
    /// (syslog level, facility, text).
    logs: VecDeque<(i32, String, String)>,
    dropped: usize,
    fatal: Option<String>,
}

/// [`Reports`] shared between librdkafka's threads and the caller's.
#[derive(Default)]
pub(crate) struct Reported(Mutex<Reports>);

impl Reported {
    fn lock(&self) -> std::sync::MutexGuard<'_, Reports> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keep a log line (the oldest is dropped, and counted, once `LOG_LINES` are kept).
    pub(crate) fn report(&self, level: i32, facility: &str, text: &str) {
        let mut reports = self.lock();
        if reports.logs.len() >= LOG_LINES {
            reports.logs.pop_front();
            reports.dropped += 1;
        }
        reports.logs.push_back((level, facility.to_owned(), text.to_owned()));
    }

    /// A client error: fatal ones are kept for [`Reported::fatal`], the others become log lines.
    pub(crate) fn error(&self, error: &KafkaError, reason: &str) {
        if error.rdkafka_error_code() == Some(RDKafkaErrorCode::Fatal) {
            self.lock().fatal = Some(format!("{error}: {reason}"));
        } else {
            self.report(4, "ERROR", &format!("{error}: {reason}"));
        }
    }

    /// The log lines since the last call and how many were dropped for want of room.
    pub(crate) fn take(&self) -> (Vec<(i32, String, String)>, usize) {
        let mut reports = self.lock();
        let dropped = std::mem::take(&mut reports.dropped);
        (reports.logs.drain(..).collect(), dropped)
    }

    /// The fatal error librdkafka raised, if any.
    pub(crate) fn fatal(&self) -> Option<String> {
        self.lock().fatal.clone()
    }
}

struct ReaderContext {
    on_rebalance: Py<PyAny>,
    reports: Reported,
}

impl ReaderContext {
    fn report(&self, level: i32, facility: &str, text: &str) {
        self.reports.report(level, facility, text);
    }

    fn call_python(&self, kind: &str, parts: &TopicPartitionList) {
        let pairs: Vec<(String, i32)> = parts.elements().iter().map(|e| (e.topic().to_owned(), e.partition())).collect();
        Python::attach(|py| {
            if let Err(err) = self.on_rebalance.call1(py, (kind, pairs)) {
                err.restore(py);
                // Kept for the caller: a rebalance callback that fails is the caller's error.
                let raised = PyErr::take(py).map(|e| e.to_string()).unwrap_or_default();
                self.report(3, "REBALANCE", &format!("on_rebalance({kind}) raised: {raised}"));
            }
        });
    }
}

impl ClientContext for ReaderContext {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, text: &str) {
        self.report(level as i32, facility, text);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        self.reports.error(&error, reason);
    }
}

impl ConsumerContext for ReaderContext {
    fn pre_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(parts) = rebalance {
            self.call_python("revoke", parts);
        }
    }

    fn post_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(parts) = rebalance {
            self.call_python("assign", parts);
        }
    }
}

/// How much the last consume call's columns held.
#[derive(Clone, Copy, Default)]
struct Sizes {
    records: usize,
    values: usize,
    keys: usize,
    headers: usize,
}

/// One consume call's records as columns (see the module docstring).
struct Columns {
    values: Vec<u8>,
    value_ends: Vec<i64>,
    keys: Vec<u8>,
    key_ends: Vec<i64>,
    key_null: Vec<u8>,
    headers: Vec<u8>,
    header_ends: Vec<i64>,
    partitions: Vec<i64>,
    offsets: Vec<i64>,
    timestamps_ms: Vec<i64>,
}

impl Columns {
    /// Empty columns with room for about what `last` held: a call's columns are filled record by record,
    /// and growing them by doubling copied each one again and touched fresh pages on the way.
    fn sized_like(last: &Sizes) -> Self {
        let room = |n: usize| n + n / 4;
        let records = room(last.records);
        Self {
            values: Vec::with_capacity(room(last.values)),
            value_ends: Vec::with_capacity(records),
            keys: Vec::with_capacity(room(last.keys)),
            key_ends: Vec::with_capacity(records),
            key_null: Vec::with_capacity(records),
            headers: Vec::with_capacity(room(last.headers)),
            header_ends: Vec::with_capacity(records),
            partitions: Vec::with_capacity(records),
            offsets: Vec::with_capacity(records),
            timestamps_ms: Vec::with_capacity(records),
        }
    }

    fn sizes(&self) -> Sizes {
        Sizes { records: self.value_ends.len(), values: self.values.len(), keys: self.keys.len(), headers: self.headers.len() }
    }

    fn push<M: Message>(&mut self, m: &M) {
        self.values.extend_from_slice(m.payload().unwrap_or(&[]));
        self.value_ends.push(self.values.len() as i64);
        self.keys.extend_from_slice(m.key().unwrap_or(&[]));
        self.key_ends.push(self.keys.len() as i64);
        self.key_null.push(u8::from(m.key().is_none()));
        if let Some(headers) = m.headers() {
            for h in headers.iter() {
                self.headers.extend_from_slice(&(h.key.len() as u32).to_le_bytes());
                self.headers.extend_from_slice(h.key.as_bytes());
                match h.value {
                    Some(v) => {
                        self.headers.extend_from_slice(&(v.len() as i32).to_le_bytes());
                        self.headers.extend_from_slice(v);
                    }
                    None => self.headers.extend_from_slice(&(-1i32).to_le_bytes()),
                }
            }
        }
        self.header_ends.push(self.headers.len() as i64);
        self.partitions.push(i64::from(m.partition()));
        self.offsets.push(m.offset());
        self.timestamps_ms.push(m.timestamp().to_millis().unwrap_or(-1));
    }

    fn into_py<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let ints = |v: &[i64]| PyBytes::new(py, &v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>());
        PyList::new(
            py,
            [
                PyBytes::new(py, &self.values),
                ints(&self.value_ends),
                PyBytes::new(py, &self.keys),
                ints(&self.key_ends),
                PyBytes::new(py, &self.key_null),
                PyBytes::new(py, &self.headers),
                ints(&self.header_ends),
                ints(&self.partitions),
                ints(&self.offsets),
                ints(&self.timestamps_ms),
            ],
        )
    }
}

pub(crate) fn timeout(seconds: f64) -> Duration {
    Duration::from_secs_f64(seconds.max(0.0))
}

pub(crate) fn kafka_error(what: &str, err: KafkaError) -> PyErr {
    PyRuntimeError::new_err(format!("{what}: {err}"))
}

pub(crate) fn partition_list(parts: &[(String, i32, i64)]) -> PyResult<TopicPartitionList> {
    let mut list = TopicPartitionList::new();
    for (topic, partition, offset) in parts {
        let at = if *offset >= 0 { Offset::Offset(*offset) } else { Offset::Invalid };
        list.add_partition_offset(topic, *partition, at).map_err(|e| kafka_error("partition list", e))?;
    }
    Ok(list)
}

fn triples(list: &TopicPartitionList) -> Vec<(String, i32, i64)> {
    list.elements()
        .iter()
        .map(|e| (e.topic().to_owned(), e.partition(), e.offset().to_raw().unwrap_or(-1001)))
        .collect()
}

/// A subscribed group member whose `consume` returns packed columns.
#[pyclass(name = "KafkaReader", module = "llmpipe_native")]
pub struct KafkaReader {
    consumer: BaseConsumer<ReaderContext>,
    last: Mutex<Sizes>,
}

#[pymethods]
impl KafkaReader {
    /// A consumer with librdkafka properties `config` (strings), subscribed to `topics`.
    #[new]
    fn new(config: &Bound<'_, PyDict>, topics: Vec<String>, on_rebalance: Py<PyAny>) -> PyResult<Self> {
        let mut client = ClientConfig::new();
        for (key, value) in config.iter() {
            client.set(key.extract::<String>()?, value.str()?.to_string());
        }
        client.set_log_level(log_level(&client));
        let context = ReaderContext { on_rebalance, reports: Reported::default() };
        let consumer: BaseConsumer<ReaderContext> =
            client.create_with_context(context).map_err(|e| PyValueError::new_err(format!("consumer: {e}")))?;
        let names: Vec<&str> = topics.iter().map(String::as_str).collect();
        consumer.subscribe(&names).map_err(|e| kafka_error("subscribe", e))?;
        Ok(Self { consumer, last: Mutex::new(Sizes::default()) })
    }

    /// Up to `max_records` records (or `max_bytes` of values), waiting at most `timeout_s` for the
    /// first: the ten packed columns, or None when none came. Partition ends are skipped; a fatal
    /// error raises, any other is reported as a log line.
    fn consume<'py>(&self, py: Python<'py>, max_records: usize, max_bytes: usize, timeout_s: f64) -> PyResult<Option<Bound<'py, PyList>>> {
        let consumer = &self.consumer;
        let last = *self.last.lock().unwrap_or_else(|e| e.into_inner());
        let (columns, error) = py.detach(move || {
            let deadline = Instant::now() + timeout(timeout_s);
            let mut columns = Columns::sized_like(&last);
            let mut error = None;
            while columns.value_ends.len() < max_records && columns.values.len() < max_bytes {
                let wait = if columns.value_ends.is_empty() { deadline.saturating_duration_since(Instant::now()) } else { Duration::ZERO };
                match consumer.poll(wait) {
                    Some(Ok(m)) => columns.push(&m),
                    Some(Err(KafkaError::PartitionEOF(_))) => {}
                    Some(Err(e)) => {
                        error = Some(e);
                        break;
                    }
                    None if columns.value_ends.is_empty() && Instant::now() < deadline => {}
                    None => break,
                }
            }
            (columns, error)
        });
        self.raise_fatal()?;
        if let Some(e) = error {
            self.consumer.context().report(4, "CONSUME", &e.to_string());
        }
        if columns.value_ends.is_empty() {
            return Ok(None);
        }
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = columns.sizes();
        columns.into_py(py).map(Some)
    }

    /// The log lines librdkafka reported since the last call, as (syslog level, facility, text),
    /// and how many were dropped for want of room.
    fn take_logs(&self) -> (Vec<(i32, String, String)>, usize) {
        self.consumer.context().reports.take()
    }

    /// The partitions this member owns, as (topic, partition).
    fn assignment(&self) -> PyResult<Vec<(String, i32)>> {
        let list = self.consumer.assignment().map_err(|e| kafka_error("assignment", e))?;
        Ok(list.elements().iter().map(|e| (e.topic().to_owned(), e.partition())).collect())
    }

    /// The group's committed offsets of `parts` (offset -1001 where none is).
    fn committed(&self, py: Python<'_>, parts: Vec<(String, i32)>, timeout_s: f64) -> PyResult<Vec<(String, i32, i64)>> {
        let list = partition_list(&parts.into_iter().map(|(t, p)| (t, p, -1)).collect::<Vec<_>>())?;
        let consumer = &self.consumer;
        let found = py.detach(move || consumer.committed_offsets(list, timeout(timeout_s)));
        Ok(triples(&found.map_err(|e| kafka_error("committed", e))?))
    }

    /// The next offset this member reads of each partition it owns (-1001 where none is known).
    fn positions(&self) -> PyResult<Vec<(String, i32, i64)>> {
        Ok(triples(&self.consumer.position().map_err(|e| kafka_error("position", e))?))
    }

    /// Read each (topic, partition) from `offset` next (-2: its start, under `auto.offset.reset`).
    fn seek(&self, py: Python<'_>, parts: Vec<(String, i32, i64)>, timeout_s: f64) -> PyResult<()> {
        let consumer = &self.consumer;
        py.detach(move || {
            for (topic, partition, offset) in &parts {
                let at = if *offset >= 0 { Offset::Offset(*offset) } else { Offset::Beginning };
                consumer.seek(topic, *partition, at, timeout(timeout_s)).map_err(|e| kafka_error("seek", e))?;
            }
            Ok(())
        })
    }

    /// The low and high watermarks of one partition.
    fn watermarks(&self, py: Python<'_>, topic: String, partition: i32, timeout_s: f64, cached: bool) -> PyResult<(i64, i64)> {
        let consumer = &self.consumer;
        let found = py.detach(move || {
            if cached {
                cached_watermarks(consumer, &topic, partition)
            } else {
                consumer.fetch_watermarks(&topic, partition, timeout(timeout_s))
            }
        });
        found.map_err(|e| kafka_error("watermarks", e))
    }

    /// How many partitions `topic` has; None where it does not exist.
    fn partition_count(&self, py: Python<'_>, topic: String, timeout_s: f64) -> PyResult<Option<usize>> {
        let consumer = &self.consumer;
        let meta = py.detach(move || consumer.fetch_metadata(Some(&topic), timeout(timeout_s)));
        let meta = meta.map_err(|e| kafka_error("metadata", e))?;
        Ok(meta.topics().first().filter(|t| t.error().is_none()).map(|t| t.partitions().len()))
    }

    /// This member's group metadata, serialized as librdkafka writes it: what a transactional
    /// producer's `send_offsets_to_transaction` takes, so the offsets commit with the member's epoch.
    fn group_metadata<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        // SAFETY: the handle is alive for `self`'s lifetime; the metadata and the buffer librdkafka
        // writes are freed here, each by its own librdkafka call.
        unsafe {
            let md = rdkafka_sys::rd_kafka_consumer_group_metadata(self.consumer.client().native_ptr());
            if md.is_null() {
                return Err(PyRuntimeError::new_err("group metadata: not a group member"));
            }
            let mut buf: *mut std::ffi::c_void = std::ptr::null_mut();
            let mut size: usize = 0;
            let err = rdkafka_sys::rd_kafka_consumer_group_metadata_write(md, &mut buf, &mut size);
            rdkafka_sys::rd_kafka_consumer_group_metadata_destroy(md);
            if !err.is_null() {
                let text = std::ffi::CStr::from_ptr(rdkafka_sys::rd_kafka_error_string(err)).to_string_lossy().into_owned();
                rdkafka_sys::rd_kafka_error_destroy(err);
                return Err(PyRuntimeError::new_err(format!("group metadata: {text}")));
            }
            let bytes = PyBytes::new(py, std::slice::from_raw_parts(buf as *const u8, size));
            rdkafka_sys::rd_kafka_mem_free(std::ptr::null_mut(), buf);
            Ok(bytes)
        }
    }

    /// Leave the group (revoking what this member owns, through `on_rebalance`).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let consumer = &self.consumer;
        py.detach(move || {
            consumer.unsubscribe();
            // Serve the revocation and the leave request before the handle goes.
            let until = Instant::now() + Duration::from_secs(5);
            while consumer.assignment().map(|a| a.count() > 0).unwrap_or(false) && Instant::now() < until {
                let _ = consumer.poll(Duration::from_millis(50));
            }
        });
        self.raise_fatal()
    }
}

/// The watermarks librdkafka last learnt of, without asking the broker (its fetch responses carry them).
fn cached_watermarks(consumer: &BaseConsumer<ReaderContext>, topic: &str, partition: i32) -> Result<(i64, i64), KafkaError> {
    let name = std::ffi::CString::new(topic).map_err(|_| KafkaError::MetadataFetch(RDKafkaErrorCode::InvalidArgument))?;
    let (mut low, mut high) = (0i64, 0i64);
    // SAFETY: the handle is alive for the borrow; librdkafka writes the two offsets it is given.
    let err = unsafe {
        rdkafka_sys::rd_kafka_get_watermark_offsets(consumer.client().native_ptr(), name.as_ptr(), partition, &mut low, &mut high)
    };
    if err == rdkafka_sys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
        Ok((low, high))
    } else {
        Err(KafkaError::MetadataFetch(err.into()))
    }
}

impl KafkaReader {
    fn raise_fatal(&self) -> PyResult<()> {
        let fatal = self.consumer.context().reports.fatal();
        fatal.map_or(Ok(()), |text| Err(PyRuntimeError::new_err(format!("fatal consumer error: {text}"))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_contexts_raise_the_log_level_to_debug() {
        let mut config = ClientConfig::new();
        assert_eq!(log_level(&config) as i32, RDKafkaLogLevel::Info as i32);
        config.set("debug", "");
        assert_eq!(log_level(&config) as i32, RDKafkaLogLevel::Info as i32);
        config.set("debug", "protocol,msg");
        assert_eq!(log_level(&config) as i32, RDKafkaLogLevel::Debug as i32);
    }
}
