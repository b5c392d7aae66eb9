//! The produce half of the worker's Kafka traffic through librdkafka directly, with no Python
//! object per record, for `python -m bench.kafka_client_cost` (its consume half is the native core's
//! `KafkaReader`).
//!
//! `produce BOOTSTRAP TOPIC RECORDS BATCH PARTITIONS VALUES`: write `RECORDS` records (values cycled
//! from the file `VALUES`: each a `u32` LE length and its bytes), keys `req-%09d`, one header, in
//! transactions of `BATCH` records. Prints one JSON line: records, process CPU seconds (every
//! thread), wall seconds and the value bytes written.

use rdkafka::config::ClientConfig;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
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
        (Some("produce"), Some(records), Some(batch)) if args.len() == 7 => match number(5) {
            Some(partitions) if partitions > 0 => produce(
                &args[1],
                &args[2],
                records,
                batch,
                partitions as i32,
                &args[6],
            ),
            _ => Err("PARTITIONS must be a positive number".into()),
        },
        _ => Err("usage: produce BOOTSTRAP TOPIC RECORDS BATCH PARTITIONS VALUES".into()),
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
