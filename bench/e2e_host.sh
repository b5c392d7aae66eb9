#!/usr/bin/env bash
# raw -> typed through a broker on this host: the native CPU backend and the GPU backend, each with
# several worker processes in one group (python -m bench.e2e_worker), keys checked exactly once.
# Usage: bench/e2e_host.sh OUTDIR [RECORDS]   (Java 17+ via JAVA_HOME or PATH; jars fetched or cached)
# CPU_WORKERS and GPU_WORKERS (default 12 and 8) set the worker processes; 0 skips that backend.
# LATENCY_RATE (default 200000 records/s, 0 skips it) is the offered load of the latency run, for
# LATENCY_SECONDS (default 10), after LATENCY_WARMUP_S (default 5) for the paced producers to start.
# LATENCY_WORKERS (a list, e.g. "4 12"; default: the backend's workers) runs it once per worker count,
# each result named with -wN.
# THROUGHPUT=0 skips the throughput runs (latency only).
# BACKOFF_PAIRS (default 0) adds that many pairs of GPU runs (throughput, and latency when LATENCY_RATE
# is not 0; with LATENCY_WORKERS, its first count), the transactions' retry backoff at librdkafka's
# 100 ms then at the worker's default.
# WARM_UP_PAIRS (default 0) adds that many pairs of GPU latency runs (with LATENCY_WORKERS, its first
# count), the workers not warmed up (--warm-up-records 0) then warmed up as by default.
# OVERLAP_PAIRS (default 0) adds that many pairs of CPU runs (throughput, and latency when LATENCY_RATE is
# not 0), --commit-overlap off then on.
# BROKER_WARM_UP (default 1): before the GPU runs, one GPU throughput run on the fresh broker, kept as
# e2e-$host-gpu-cold.json (its JVM compiles the fetch and transaction paths during it), of
# BROKER_WARM_UP_RECORDS records (default: RECORDS); 0 skips it.
# PARTITION_PAIRS (default 0) adds that many pairs of GPU runs (throughput, and latency when LATENCY_RATE is
# not 0), the workers' --partition-by key then source; COMPRESSION_PAIRS (default 0) pairs of GPU
# throughput runs, --compression lz4 then none; FETCH_PAIRS (default 0) pairs of GPU throughput runs, the
# workers' --fetch-backoff-ms at librdkafka's 1000 then at the worker's default.
# LANE_PAIRS (default 0) adds that many pairs of GPU throughput runs, the workers' --lane-order arrival then
# balanced; WAIT_PAIRS (default 0) pairs of GPU throughput runs, their --device-wait driver then block;
# READER_PAIRS (default 0) pairs of GPU throughput runs, the workers' --kafka-reader objects then packed;
# WRITER_PAIRS (default 0) pairs of GPU throughput runs, the workers' --kafka-writer objects then packed.
# WRITE_BACK_PAIRS (default 0) pairs of GPU throughput runs, the load released to the workers as it is then
# after writing the host's dirty pages back to disk (--load-write-back off then on; every other run: off).
# TREE_PAIRS (default 0) pairs of GPU throughput runs, the workers run from BASE_TREE (another checkout of
# this repository) then from this one.
# PRODUCER_PAIRS (default 0) pairs of GPU throughput runs, the workers' producers with PRODUCER_BASE (librdkafka
# properties, default none) then with PRODUCER_NEW added too (e.g. PRODUCER_BASE=delivery.report.only.error=false
# PRODUCER_NEW=delivery.report.only.error=true: a report per record, the default, then failed ones only).
# KAFKA_READER and KAFKA_WRITER (default: the worker's) are every run's --kafka-reader and --kafka-writer (a
# --compare-kafka-reader or --compare-kafka-writer pair sets its own). The GPU
# workers take any other gpu_stage setting from its environment variable (GPU_STAGE_LANE_ORDER=warp ...).
# MPS=1 runs every GPU worker under CUDA MPS: a control daemon started here (pipe and log folders under
# MPS_DIR, default /tmp/llmpipe-mps) and stopped at the end, so that the workers' kernels share the device
# at once instead of taking turns on it.
# E2E_CORPUS (default real) is the throughput and latency runs' --corpus (synth: the ~1 KB bodies they
# loaded before the real-shaped corpus).
# GPU_MIN_BATCH (default: the worker's) is the GPU latency workers' --gpu-min-batch. KEEP_BROKER=1 leaves the broker
# running at the end (a later call on the same host reuses it, warm).
# PARTITIONS (default 24) is the raw and typed topics' partition count of every run (e.g. 32 for 16 workers).
# The broker takes the stack's settings from its environment too: STACK_KAFKA_NETWORK_THREADS and
# STACK_KAFKA_IO_THREADS (Kafka's defaults 3 and 8) size its request threads, when it starts (a kept
# broker keeps its own); e2e.log names the broker's values.
# PERF_WORKER (a Linux perf executable, default none) records worker 0 of every throughput run with call graphs
# (bench.e2e_worker --perf-worker): the data and a text report by thread and symbol in the run's log folder.
# Every run reports the host's busy cores and the broker's CPU per record (--broker-pid).
set -uo pipefail
out=${1:?usage: bench/e2e_host.sh OUTDIR [RECORDS]}
records=${2:-2000000}
mkdir -p "$out"
stack_dir=${E2E_STACK_DIR:-$out/stack}  # outside OUTDIR for a broker kept between calls (KEEP_BROKER)
python -m stack up --dir "$stack_dir" --port 29092 --heap-mb 4096 --full-jit --rebalance-delay-ms 3000 --topics "" >> "$out/e2e.log" 2>&1 || {
    tail -20 "$out/e2e.log"; exit 1; }
status=0
broker_pid=$(cat "$stack_dir/broker.pid")
grep -E '^num\.(network|io)\.threads=' "$stack_dir/server.properties" >> "$out/e2e.log"
if [ "${MPS:-0}" = 1 ]; then
    export CUDA_MPS_PIPE_DIRECTORY=${MPS_DIR:-/tmp/llmpipe-mps}/pipe CUDA_MPS_LOG_DIRECTORY=${MPS_DIR:-/tmp/llmpipe-mps}/log
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    nvidia-cuda-mps-control -d >> "$out/e2e.log" 2>&1 || { echo "MPS control daemon did not start" >&2; exit 1; }
    trap 'echo quit | nvidia-cuda-mps-control >> "$out/e2e.log" 2>&1' EXIT
fi
run() {
    [ "${THROUGHPUT:-1}" = 0 ] && return
    python -m bench.e2e_worker --bootstrap 127.0.0.1:29092 --records "$records" --logs "$out/logs" \
        --corpus "${E2E_CORPUS:-real}" --broker-pid "$broker_pid" ${KAFKA_READER:+--kafka-reader "$KAFKA_READER"} ${KAFKA_WRITER:+--kafka-writer "$KAFKA_WRITER"} \
        ${PERF_WORKER:+--perf-worker "$PERF_WORKER"} \
        "$@" >> "$out/e2e.log" 2>&1 || status=1
}
host=${E2E_HOST_NAME:-h200}
if [ "${CPU_WORKERS:-12}" -gt 0 ]; then
    run --backend cpu --workers "${CPU_WORKERS:-12}" --partitions "${PARTITIONS:-24}" --out "$out/e2e-$host-cpu.json"
fi
if [ "${OVERLAP_PAIRS:-0}" -gt 0 ] && [ "${CPU_WORKERS:-12}" -gt 0 ]; then
    run --backend cpu --workers "${CPU_WORKERS:-12}" --partitions "${PARTITIONS:-24}" --compare-commit-overlap "$OVERLAP_PAIRS" \
        --out "$out/e2e-commit-overlap-$host-cpu.json"
fi
# Per-record latency at a fixed offered load (due time -> visible to a read_committed consumer).
# Batches close after 5 ms: a batch's transaction (send offsets + commit, ~20-40 ms on a busy broker)
# dominates the cycle, so waiting 20 ms more for records to batch up only adds latency.
rate=${LATENCY_RATE:-200000}
share() {  # WORKERS: each worker's share of the cores, at least 1
    echo $(( $(nproc) / $1 > 0 ? $(nproc) / $1 : 1 ))
}
latency_once() {  # BACKEND WORKERS NAME [OPTIONS...]; a later --out wins
    local backend=$1 workers=$2 name=$3
    shift 3
    # Each GPU worker's native core (the rows the device lane leaves) gets its share of the cores.
    [ "$backend" = gpu ] && set -- --native-threads "$(share "$workers")" "$@"
    python -m bench.e2e_latency --bootstrap 127.0.0.1:29092 --records $((rate * ${LATENCY_SECONDS:-10})) \
        --rate "$rate" --producers 4 --warmup-s "${LATENCY_WARMUP_S:-5}" --backend "$backend" --workers "$workers" \
        --partitions "${PARTITIONS:-24}" --batch-records 5000 --batch-wait-ms 5 --logs "$out/logs" --broker-pid "$broker_pid" \
        --corpus "${E2E_CORPUS:-real}" --out "$out/$name.json" "$@" \
        >> "$out/e2e.log" 2>&1 || status=1
}
latency() {  # BACKEND WORKERS [OPTIONS...]: once, or once per LATENCY_WORKERS
    local backend=$1 workers=$2
    shift 2
    if [ -z "${LATENCY_WORKERS:-}" ]; then
        latency_once "$backend" "$workers" "latency-$host-$backend" "$@"
        return
    fi
    for n in $LATENCY_WORKERS; do
        latency_once "$backend" "$n" "latency-$host-$backend-w$n" "$@"
    done
}
if [ "$rate" -gt 0 ] && [ "${CPU_WORKERS:-12}" -gt 0 ]; then
    latency cpu "${CPU_WORKERS:-12}"
    if [ "${OVERLAP_PAIRS:-0}" -gt 0 ]; then
        latency cpu "${CPU_WORKERS:-12}" --compare-commit-overlap "$OVERLAP_PAIRS" \
            --out "$out/latency-commit-overlap-$host-cpu.json"
    fi
fi
if [ "${GPU_WORKERS:-8}" -gt 0 ]; then
    # One start compiles the kernels into the cache the workers load them from (else each compiles them):
    # the workers' lane order (GPU_STAGE_LANE_ORDER, else the lane's default), or both orders for LANE_PAIRS.
    orders=${GPU_STAGE_LANE_ORDER:-$(python -c "from gpu_stage.transform import TransformSettings as T; print(T.lane_order)")}
    [ "${LANE_PAIRS:-0}" -gt 0 ] && orders=$(python -c "from bench.e2e_worker import COST_PAIRS; print(*COST_PAIRS['lane_order'])")
    python -c "import sys; from gpu_stage import synth; from gpu_stage.transform import TransformSettings
from gpu_stage.transform.gpu import GpuBackend
for order in sys.argv[1:]: GpuBackend(TransformSettings(lane_order=order)).parse(synth.batch(synth.bodies(64)))" \
        $orders >> "$out/e2e.log" 2>&1 || status=1
    gpu_run() {  # NAME [OPTIONS...]: a GPU throughput run
        local name=$1
        shift
        run --backend gpu --workers "${GPU_WORKERS:-8}" --partitions "${PARTITIONS:-24}" \
            --native-threads "$(share "${GPU_WORKERS:-8}")" --out "$out/$name.json" "$@"
    }
    if [ "${BROKER_WARM_UP:-1}" = 1 ]; then
        gpu_run "e2e-$host-gpu-cold" --records "${BROKER_WARM_UP_RECORDS:-$records}"
    fi
    gpu_run "e2e-$host-gpu"
    if [ "${PARTITION_PAIRS:-0}" -gt 0 ]; then
        gpu_run "e2e-partition-by-$host-gpu" --compare-partition-by "$PARTITION_PAIRS"
    fi
    if [ "${COMPRESSION_PAIRS:-0}" -gt 0 ]; then
        gpu_run "e2e-compression-$host-gpu" --compare-compression "$COMPRESSION_PAIRS"
    fi
    if [ "${FETCH_PAIRS:-0}" -gt 0 ]; then
        gpu_run "e2e-fetch-backoff-$host-gpu" --compare-fetch-backoff "$FETCH_PAIRS"
    fi
    if [ "${LANE_PAIRS:-0}" -gt 0 ]; then
        gpu_run "e2e-lane-order-$host-gpu" --compare-lane-order "$LANE_PAIRS"
    fi
    if [ "${WAIT_PAIRS:-0}" -gt 0 ]; then
        gpu_run "e2e-device-wait-$host-gpu" --compare-device-wait "$WAIT_PAIRS"
    fi
    if [ "${READER_PAIRS:-0}" -gt 0 ]; then
        gpu_run "e2e-kafka-reader-$host-gpu" --compare-kafka-reader "$READER_PAIRS"
    fi
    if [ "${WRITER_PAIRS:-0}" -gt 0 ]; then
        gpu_run "e2e-kafka-writer-$host-gpu" --compare-kafka-writer "$WRITER_PAIRS"
    fi
    if [ "${WRITE_BACK_PAIRS:-0}" -gt 0 ]; then
        gpu_run "e2e-load-write-back-$host-gpu" --compare-load-write-back "$WRITE_BACK_PAIRS"
    fi
    if [ "${PRODUCER_PAIRS:-0}" -gt 0 ]; then
        gpu_run "e2e-producer-config-$host-gpu" --producer-config "${PRODUCER_BASE:-}" \
            --compare-producer-config "${PRODUCER_NEW:?PRODUCER_NEW: the properties to add}" --rounds "$PRODUCER_PAIRS"
    fi
    if [ "${TREE_PAIRS:-0}" -gt 0 ]; then
        gpu_run "e2e-worker-tree-$host-gpu" --compare-worker-tree "${BASE_TREE:?BASE_TREE: the checkout to compare}" \
            --rounds "$TREE_PAIRS"
    fi
    min_batch=()
    [ -n "${GPU_MIN_BATCH:-}" ] && min_batch=(--gpu-min-batch "$GPU_MIN_BATCH")
    if [ "$rate" -gt 0 ]; then
        latency gpu "${GPU_WORKERS:-8}" "${min_batch[@]}"
    fi
    if [ "$rate" -gt 0 ] && [ "${PARTITION_PAIRS:-0}" -gt 0 ]; then
        n=${LATENCY_WORKERS:-${GPU_WORKERS:-8}}
        n=${n%% *}
        latency_once gpu "$n" "latency-partition-by-$host-gpu-w$n" --compare-partition-by "$PARTITION_PAIRS" \
            "${min_batch[@]}"
    fi
    if [ "${BACKOFF_PAIRS:-0}" -gt 0 ]; then
        run --backend gpu --workers "${GPU_WORKERS:-8}" --partitions "${PARTITIONS:-24}" --native-threads "$(share "${GPU_WORKERS:-8}")" \
            --compare-txn-backoff "$BACKOFF_PAIRS" --out "$out/e2e-txn-backoff-$host-gpu.json"
    fi
    if [ "$rate" -gt 0 ] && [ "${WARM_UP_PAIRS:-0}" -gt 0 ]; then  # workers not warmed up (baseline), then warmed
        n=${LATENCY_WORKERS:-${GPU_WORKERS:-8}}
        n=${n%% *}
        latency_once gpu "$n" "latency-warm-up-$host-gpu-w$n" --compare-warm-up "$WARM_UP_PAIRS"
    fi
    if [ "$rate" -gt 0 ] && [ "${BACKOFF_PAIRS:-0}" -gt 0 ]; then
        n=${LATENCY_WORKERS:-${GPU_WORKERS:-8}}
        n=${n%% *}
        latency_once gpu "$n" "latency-txn-backoff-$host-gpu-w$n" --compare-txn-backoff "$BACKOFF_PAIRS"
    fi
fi
[ "${KEEP_BROKER:-0}" = 1 ] || python -m stack down --dir "$stack_dir" >> "$out/e2e.log" 2>&1
grep -h "records/s\|latency ms\|/ key\|/ lz4" "$out/e2e.log"
exit $status
