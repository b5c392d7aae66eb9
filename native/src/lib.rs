//! The gpu_stage transform in native code: a batch of raw vLLM bodies becomes Avro datums of typed
//! rows plus dead letters, with exactly the semantics of the Python reference backend
//! (`gpu_stage/transform/contract/semantics.md`). Besides the transform, `kafka` and `writer` are the worker's
//! Kafka clients that read and write those bytes without a Python object per record.

pub mod avro;
pub mod content;
pub mod created;
pub mod dump;
pub mod extract;
pub mod json;
pub mod pack;
pub mod packed;
pub mod kafka;
pub mod writer;
mod py;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use avro::{attribute_entries, MetaRow, Plan};
use content::Validator;
use extract::{extract, BadBody, INVALID_JSON, INVALID_UTF8, NOT_AN_OBJECT, TOO_LARGE};
use json::{parse, Value};

/// A compiled transform: the content validator and the Avro write plan.
pub struct Transform {
    validator: Validator,
    plan: Plan,
    max_record_bytes: usize,
}

/// Below this many records per thread, [`Transform::run_split`] starts no more threads.
pub const MIN_RECORDS_PER_THREAD: usize = 512;

/// One raw record as the transform sees it.
#[derive(Clone)]
pub struct RawRecord<'r> {
    pub value: &'r [u8],
    pub key: Option<&'r [u8]>,
    pub latency: Option<&'r [u8]>,
    pub attributes: Option<&'r [u8]>,
    pub partition: i64,
    pub offset: i64,
    pub timestamp_ms: i64,
}

/// The encoded good rows and the dead letters of a batch.
#[derive(Default)]
pub struct Output {
    pub buf: Vec<u8>,
    /// `ends[i]` is where good row `i` ends in `buf` (it starts where row `i - 1` ends).
    pub ends: Vec<i64>,
    /// Batch position of each good row.
    pub positions: Vec<i64>,
    /// `(batch position, reason, text)` of each dead letter.
    pub bad: Vec<(usize, &'static str, String)>,
}

impl Transform {
    /// Compile the content JSON Schema and bind the Avro record schema's fields.
    pub fn new(avro_schema: &str, content_schema: &str, max_record_bytes: usize) -> Result<Transform, String> {
        let validator = Validator::compile(content_schema)?;
        let plan = Plan::new(avro_schema, &validator)?;
        Ok(Transform { validator, plan, max_record_bytes })
    }

    /// Transform records in batch order.
    /// `buf` is a scratch buffer the caller may keep between batches (it is cleared first), so a
    /// long-running worker does not fault in fresh pages for every batch.
    pub fn run<'r>(
        &self,
        records: impl ExactSizeIterator<Item = RawRecord<'r>>,
        input_bytes: usize,
        buf: Vec<u8>,
    ) -> Output {
        let mut out = Output { buf, ..Output::default() };
        out.buf.clear();
        // Rows are mostly the body's strings re-framed: reserving the input size avoids regrowth.
        out.buf.reserve(input_bytes + input_bytes / 4);
        out.ends.reserve(records.len());
        out.positions.reserve(records.len());
        let mut attributes = AttributeCache::default();
        for (i, record) in records.enumerate() {
            let obj = match self.body(record.value) {
                Ok(obj) => obj,
                Err(bad) => {
                    out.bad.push((i, bad.reason, bad.text));
                    continue;
                }
            };
            match extract(&obj, &self.validator) {
                Err(bad) => out.bad.push((i, bad.reason, bad.text)),
                Ok(row) => {
                    let request_id = record.key.map(String::from_utf8_lossy);
                    let meta = MetaRow {
                        request_id: request_id.as_deref(),
                        latency_ms: latency_ms(record.latency),
                        attributes: attributes.get(record.attributes),
                        raw_partition: record.partition,
                        raw_offset: record.offset,
                        ingest_ts: (record.timestamp_ms >= 0).then_some(record.timestamp_ms),
                    };
                    self.plan.write(&mut out.buf, &row, &meta);
                    out.ends.push(out.buf.len() as i64);
                    out.positions.push(i as i64);
                }
            }
        }
        out
    }

    /// [`Transform::run`] over `records` split into up to `threads` runs of consecutive records,
    /// each on a thread of its own, joined in order: the same output as one run. Batches too small
    /// to be worth a thread run on the calling thread.
    pub fn run_split<'r>(&self, records: &[RawRecord<'r>], threads: usize, buf: Vec<u8>) -> Output {
        let chunks = threads.min(records.len() / MIN_RECORDS_PER_THREAD).max(1);
        let size = records.len().div_ceil(chunks).max(1);
        if chunks == 1 {
            return self.run_slice(records, buf);
        }
        let parts: Vec<Output> = std::thread::scope(|scope| {
            let handles: Vec<_> = records[size..]
                .chunks(size)
                .map(|chunk| scope.spawn(move || self.run_slice(chunk, Vec::new())))
                .collect();
            let first = self.run_slice(&records[..size], buf);
            let rest = handles.into_iter().map(|h| h.join().expect("a transform thread panicked"));
            std::iter::once(first).chain(rest).collect()
        });
        join_parts(parts, size)
    }

    /// [`Transform::run`] over `records`.
    pub fn run_slice<'r>(&self, records: &[RawRecord<'r>], buf: Vec<u8>) -> Output {
        let input_bytes = records.iter().map(|r| r.value.len()).sum();
        self.run(records.iter().map(RawRecord::clone), input_bytes, buf)
    }

    /// Record-level checks 1–3 of semantics §1 (size, strict JSON, top-level object).
    fn body<'r>(&self, value: &'r [u8]) -> Result<json::Obj<'r>, BadBody> {
        if value.len() > self.max_record_bytes {
            return Err(BadBody::new(TOO_LARGE, "body larger than max_record_bytes"));
        }
        let Ok(text) = std::str::from_utf8(value) else {
            return Err(BadBody::new(INVALID_UTF8, "body is not valid UTF-8"));
        };
        match parse(text) {
            Err(_) => Err(BadBody::new(INVALID_JSON, "body is not valid JSON")),
            Ok(Value::Obj(obj)) => Ok(obj),
            Ok(_) => Err(BadBody::new(NOT_AN_OBJECT, "top-level JSON value is not an object")),
        }
    }
}

/// The outputs of consecutive runs of `size` records each (the last may be shorter), joined in
/// order: what one run over all of them gives.
fn join_parts(parts: Vec<Output>, size: usize) -> Output {
    let mut parts = parts.into_iter();
    let mut out = parts.next().unwrap_or_default();
    for (k, part) in parts.enumerate() {
        let (shift, first) = (out.buf.len() as i64, (k + 1) * size);
        out.buf.extend_from_slice(&part.buf);
        out.ends.extend(part.ends.iter().map(|e| e + shift));
        out.positions.extend(part.positions.iter().map(|p| p + first as i64));
        out.bad.extend(part.bad.into_iter().map(|(i, reason, text)| (i + first, reason, text)));
    }
    out
}

/// Records handed out in runs of `chunk` to whichever thread asks next: a run started on a thread
/// of its own that the thread which later needs its result helps finish, so that thread's wait is
/// shared work rather than idle time. The joined result is the same as one run's.
pub struct Chunked<'r> {
    records: Vec<RawRecord<'r>>,
    chunk: usize,
    next: AtomicUsize,
    parts: Mutex<Vec<Option<Output>>>,
    /// The output buffer kept between batches, for the thread that takes the first chunk.
    scratch: Mutex<Vec<u8>>,
}

impl<'r> Chunked<'r> {
    pub fn new(records: Vec<RawRecord<'r>>, chunk: usize, scratch: Vec<u8>) -> Self {
        let chunk = chunk.max(1);
        let count = records.len().div_ceil(chunk);
        Chunked { records, chunk, next: AtomicUsize::new(0), parts: Mutex::new((0..count).map(|_| None).collect()), scratch: Mutex::new(scratch) }
    }

    /// Transform chunks until none is left to take; returns how many this call did.
    pub fn work(&self, transform: &Transform) -> usize {
        let mut done = 0;
        loop {
            let k = self.next.fetch_add(1, Ordering::Relaxed);
            let lo = k.saturating_mul(self.chunk);
            if lo >= self.records.len() {
                return done;
            }
            let hi = (lo + self.chunk).min(self.records.len());
            let buf = if k == 0 { std::mem::take(&mut *lock(&self.scratch)) } else { Vec::new() };
            let out = transform.run_slice(&self.records[lo..hi], buf);
            lock(&self.parts)[k] = Some(out);
            done += 1;
        }
    }

    /// The chunks' outputs joined in order; None while a chunk is not done.
    pub fn finish(self) -> Option<Output> {
        let parts: Option<Vec<Output>> = self.parts.into_inner().unwrap_or_else(|e| e.into_inner()).into_iter().collect();
        parts.map(|parts| join_parts(parts, self.chunk))
    }
}

/// `m` locked, also after a thread panicked while holding it (its data stays usable here).
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// `latency.ms`: ASCII decimal digits, at most 18 of them, else null.
fn latency_ms(value: Option<&[u8]>) -> Option<i64> {
    let v = value?;
    if v.is_empty() || v.len() > 18 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(v.iter().fold(0i64, |acc, d| acc * 10 + i64::from(d - b'0')))
}

/// Header values repeat across a batch (one connector, few experiments): parse each distinct one once.
#[derive(Default)]
struct AttributeCache {
    last: Option<(Vec<u8>, Option<Vec<(String, String)>>)>,
}

impl AttributeCache {
    fn get(&mut self, value: Option<&[u8]>) -> Option<&[(String, String)]> {
        let value = value?;
        let hit = matches!(&self.last, Some((raw, _)) if raw.as_slice() == value);
        if !hit {
            self.last = Some((value.to_vec(), attribute_entries(value)));
        }
        self.last.as_ref().and_then(|(_, entries)| entries.as_deref())
    }
}
