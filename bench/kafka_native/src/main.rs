//! The consume and produce halves of the worker's Kafka traffic through librdkafka directly, with
//! no Python object per record, for `python -m bench.kafka_client_cost`.
//!
//! `consume BOOTSTRAP TOPIC RECORDS BATCH`: read `RECORDS` committed records of every partition of
//! `TOPIC` from the start into packed columns (the layout of `gpu_stage.transform.packed`), cleared
//! every `BATCH` records. `produce BOOTSTRAP TOPIC RECORDS BATCH PARTITIONS VALUES`: write
//! `RECORDS` records (values cycled from the file `VALUES`: each a `u32` LE length and its bytes),
//! keys `req-%09d`, one header, in transactions of `BATCH` records. Each prints one JSON line:
//! records, process CPU seconds (every thread), wall seconds, and what it read or wrote.

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use std::process::ExitCode;
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(60);

/// Process CPU seconds (user + system, every thread), from `/proc/self/stat`.
fn cpu_s() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat[stat.rfind(')').map_or(0, |i| i + 2)..]
        .split(' ')
        .collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

/// One batch's records as columns, the way `gpu_stage.transform.packed.PackedBatch` lays them out.
#[derive(Default)]
struct Packed {
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

impl Packed {
    fn push<M: Message>(&mut self, m: &M) -> usize {
        self.values.extend_from_slice(m.payload().unwrap_or(&[]));
        self.value_ends.push(self.values.len() as i64);
        self.keys.extend_from_slice(m.key().unwrap_or(&[]));
        self.key_ends.push(self.keys.len() as i64);
        self.key_null.push(u8::from(m.key().is_none()));
        let mut count = 0;
        if let Some(headers) = m.headers() {
            for h in headers.iter() {
                self.headers
                    .extend_from_slice(&(h.key.len() as u32).to_le_bytes());
                self.headers.extend_from_slice(h.key.as_bytes());
                let value = h.value.unwrap_or(&[]);
                let len = if h.value.is_some() {
                    value.len() as i32
                } else {
                    -1
                };
                self.headers.extend_from_slice(&len.to_le_bytes());
                self.headers.extend_from_slice(value);
                count += 1;
            }
        }
        self.header_ends.push(self.headers.len() as i64);
        self.partitions.push(i64::from(m.partition()));
        self.offsets.push(m.offset());
        self.timestamps_ms
            .push(m.timestamp().to_millis().unwrap_or(-1));
        count
    }
}

fn consume(bootstrap: &str, topic: &str, records: usize, batch: usize) -> Result<String, String> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "kafka-native-cost")
        .set("isolation.level", "read_committed")
        .set("enable.auto.commit", "false")
        .set("fetch.max.bytes", (64 << 20).to_string())
        .set("fetch.queue.backoff.ms", "10")
        .create()
        .map_err(|e| format!("consumer: {e}"))?;
    let meta = consumer
        .fetch_metadata(Some(topic), TIMEOUT)
        .map_err(|e| format!("metadata: {e}"))?;
    let partitions = meta.topics().first().map_or(0, |t| t.partitions().len());
    let mut assignment = TopicPartitionList::new();
    for p in 0..partitions as i32 {
        assignment
            .add_partition_offset(topic, p, Offset::Beginning)
            .map_err(|e| e.to_string())?;
    }
    consumer
        .assign(&assignment)
        .map_err(|e| format!("assign: {e}"))?;
    let (mut packed, mut got, mut value_bytes, mut headers) =
        (Packed::default(), 0usize, 0usize, 0usize);
    let (mut started, mut cpu_at_start) = (None, 0.0);
    let deadline = Instant::now() + TIMEOUT * 5;
    while got < records {
        if Instant::now() > deadline {
            return Err(format!(
                "read {got} of {records} records before the deadline"
            ));
        }
        match consumer.poll(Duration::from_millis(500)) {
            Some(Ok(m)) => {
                if started.is_none() {
                    (started, cpu_at_start) = (Some(Instant::now()), cpu_s());
                }
                value_bytes += m.payload().map_or(0, <[u8]>::len);
                headers += packed.push(&m);
                got += 1;
                if packed.value_ends.len() >= batch {
                    packed = Packed::default();
                }
            }
            Some(Err(e)) => return Err(format!("consume: {e}")),
            None => {}
        }
    }
    let wall = started.map_or(0.0, |t| t.elapsed().as_secs_f64());
    Ok(format!(
        "{{\"records\": {got}, \"cpu_s\": {:.3}, \"wall_s\": {wall:.3}, \"value_bytes\": {value_bytes}, \"headers\": {headers}}}",
        cpu_s() - cpu_at_start
    ))
}

fn read_values(path: &str) -> Result<Vec<Vec<u8>>, String> {
    let raw = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
    let (mut values, mut at) = (Vec::new(), 0usize);
    while at + 4 <= raw.len() {
        let len = u32::from_le_bytes(raw[at..at + 4].try_into().unwrap()) as usize;
        let end = (at + 4 + len).min(raw.len());
        values.push(raw[at + 4..end].to_vec());
        at = end;
    }
    if values.is_empty() {
        return Err(format!("{path}: no values"));
    }
    Ok(values)
}

fn produce(
    bootstrap: &str,
    topic: &str,
    records: usize,
    batch: usize,
    partitions: i32,
    path: &str,
) -> Result<String, String> {
    let values = read_values(path)?;
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set(
            "transactional.id",
            format!("kafka-native-cost-{}", std::process::id()),
        )
        .set("compression.type", "lz4")
        .set("linger.ms", "50")
        .set("batch.size", (1 << 20).to_string())
        .set("queue.buffering.max.messages", "1000000")
        .set("queue.buffering.max.kbytes", (1 << 20).to_string())
        .create()
        .map_err(|e| format!("producer: {e}"))?;
    producer
        .init_transactions(TIMEOUT)
        .map_err(|e| format!("init_transactions: {e}"))?;
    let (started, cpu_at_start) = (Instant::now(), cpu_s());
    let mut value_bytes = 0usize;
    for first in (0..records).step_by(batch.max(1)) {
        producer
            .begin_transaction()
            .map_err(|e| format!("begin_transaction: {e}"))?;
        for i in first..(first + batch).min(records) {
            let (value, key) = (&values[i % values.len()], format!("req-{i:09}"));
            let headers = OwnedHeaders::new().insert(Header {
                key: "llm.schema.fingerprint",
                value: Some(b"0123456789abcdef"),
            });
            let mut record = BaseRecord::to(topic)
                .payload(value)
                .key(&key)
                .partition(i as i32 % partitions)
                .headers(headers);
            loop {
                match producer.send(record) {
                    Ok(()) => break,
                    Err((e, back))
                        if e.rdkafka_error_code()
                            == Some(rdkafka::types::RDKafkaErrorCode::QueueFull) =>
                    {
                        producer.poll(Duration::from_millis(5));
                        record = back;
                    }
                    Err((e, _)) => return Err(format!("produce: {e}")),
                }
            }
            value_bytes += value.len();
        }
        producer
            .commit_transaction(TIMEOUT)
            .map_err(|e| format!("commit_transaction: {e}"))?;
    }
    Ok(format!(
        "{{\"records\": {records}, \"cpu_s\": {:.3}, \"wall_s\": {:.3}, \"value_bytes\": {value_bytes}}}",
        cpu_s() - cpu_at_start,
        started.elapsed().as_secs_f64()
    ))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let number = |i: usize| args.get(i).and_then(|a| a.parse::<usize>().ok());
    let outcome = match (args.first().map(String::as_str), number(3), number(4)) {
        (Some("consume"), Some(records), Some(batch)) if args.len() == 5 => consume(&args[1], &args[2], records, batch),
        (Some("produce"), Some(records), Some(batch)) if args.len() == 7 => match number(5) {
            Some(partitions) if partitions > 0 => produce(&args[1], &args[2], records, batch, partitions as i32, &args[6]),
            _ => Err("PARTITIONS must be a positive number".into()),
        },
        _ => Err("usage: consume BOOTSTRAP TOPIC RECORDS BATCH | produce BOOTSTRAP TOPIC RECORDS BATCH PARTITIONS VALUES".into()),
    };
    match outcome {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("kafka-native-cost: {e}");
            ExitCode::from(1)
        }
    }
}
