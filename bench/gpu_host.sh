#!/usr/bin/env bash
# Every figure of the GPU host in one run: GPU parity against the reference and the native core, the
# unit tests of the CPU backends on that host's Python, transform rates of every backend on the same
# bodies (the GPU ones on at most 2 CPU cores), and the peer table with its batch-size sweep.
# Needs cuDF importable (and the native core installed).
# Packed batches (contiguous buffers, as a fetch delivers them) streamed through the device lane: `packed`.
# Usage: bench/gpu_host.sh OUTDIR [tests|lane-tests|transform|packed|headroom|timeline|threads|registers|caps|bodies|packed-peers|peers-1k|real|warp-prep|warp|warp-1k|warp-tests|longest|trees|source|warp-source|stalls|outline|candidates|peers|all]   (logs, JSON and the PNG land in OUTDIR)
set -uo pipefail
out=${1:?usage: bench/gpu_host.sh OUTDIR [MODE] (the modes: the Usage line at the top of the script)}
what=${2:-all}
mkdir -p "$out"
status=0
step() { echo "== $*" >&2; "$@" || status=1; }
two_cores() { taskset -c 0,1 "$@"; }
cap_of() { [ "$1" = - ] && echo 0 || echo "$1"; }  # a REGISTER_CAPS entry as --measure-registers takes it ("-": 0)
{ nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv; nproc; python --version; } > "$out/gpu-host-h200.txt" 2>&1
if [ "$what" = tests ] || [ "$what" = all ]; then
    step python -m tests.gpu.selfcheck > "$out/gpu-selfcheck-h200.log" 2>&1
    # test_gpu_stage_content checks the validator against jsonschema, a dev dependency GPU hosts may lack.
    step env GPU_PARITY_OUT="$out/gpu-parity-h200.json" python -m pytest -q -p no:cacheprovider --durations 20 tests/gpu \
        tests/unit/gpu_stage --ignore=tests/unit/gpu_stage/test_gpu_stage_content.py > "$out/gpu-tests-h200.log" 2>&1
fi
if [ "$what" = lane-tests ]; then  # the device lane's own GPU tests (part of tests)
    step python -m pytest -q -p no:cacheprovider tests/gpu/test_gpu_lane.py > "$out/gpu-tests-lane-h200.log" 2>&1
fi
if [ "$what" = transform ] || [ "$what" = all ]; then
    # The transform on at most 2 CPU cores: large batches, 1 M-record batches, 10 k-record batches.
    step two_cores python -m bench.transform --records 500000 --batch-size 100000 --backends gpu,cpu \
        --out "$out/transform-h200.json" > "$out/gpu-bench-h200.log" 2>&1
    step two_cores python -m bench.transform --records 2000000 --batch-size 1000000 --backends gpu \
        --out "$out/transform-1m-h200.json" >> "$out/gpu-bench-h200.log" 2>&1
    step two_cores python -m bench.transform --records 200000 --batch-size 10000 --backends gpu,cpu \
        --out "$out/transform-10k-h200.json" >> "$out/gpu-bench-h200.log" 2>&1
fi
if [ "$what" = packed ] || [ "$what" = all ]; then
    # The device lane over packed batches, two in flight, against itself with nothing overlapped and
    # against the native core on the same packed batches; at most 2 CPU cores. 1 M-record batches hold
    # about 4.3 GiB on the device, so their pool is 32 GiB. Then where the main thread spends a
    # stream (cProfile, own time; its rates are not figures). packed-peers: the harness with packed input.
    step two_cores python -m bench.transform --records 2000000 --batch-size 100000 --backends gpu,cpu \
        --input packed --serial --out "$out/transform-packed-h200.json" > "$out/gpu-packed-h200.log" 2>&1
    step two_cores python -m bench.transform --records 2000000 --batch-size 1000000 --backends gpu \
        --input packed --serial --gpu-pool-bytes $((32 << 30)) --out "$out/transform-packed-1m-h200.json" \
        > "$out/gpu-packed-1m-h200.log" 2>&1
    step two_cores python -m bench.transform --records 300000 --batch-size 10000 --backends gpu,cpu \
        --input packed --serial --out "$out/transform-packed-10k-h200.json" > "$out/gpu-packed-10k-h200.log" 2>&1
    step two_cores python -m bench.transform --records 1000000 --batch-size 100000 --backends gpu \
        --input pinned --profile "$out/lane-profile-h200.txt" > "$out/gpu-packed-profile-h200.log" 2>&1
fi
if [ "$what" = headroom ]; then
    # The device lane's byte buffers sized exactly against with their headroom, two pairs in one call,
    # 100 k batches in place, at most 2 CPU cores.
    for round in 1 2; do
        for parts in 0 64; do
            label=$([ "$parts" = 0 ] && echo exact || echo headroom)
            step two_cores python -m bench.transform --records 2000000 --batch-size 100000 --backends gpu \
                --input pinned --headroom-parts "$parts" --out "$out/transform-headroom-$label-$round-h200.json" \
                > "$out/gpu-headroom-$label-$round-h200.log" 2>&1
        done
    done
fi
if [ "$what" = timeline ]; then
    # When the device runs each step of the packed stream (CUDA events), overlapped and serial, 100 k batches
    # in place, at most 2 CPU cores; the rates printed are not figures.
    step two_cores python -m bench.lane_timeline --out "$out/lane-timeline-h200.json" > "$out/lane-timeline-h200.log" 2>&1
    step two_cores python -m bench.lane_timeline --serial --records 600000 --out "$out/lane-timeline-serial-h200.json" \
        > "$out/lane-timeline-serial-h200.log" 2>&1
fi
corpus_file=${CORPUS_FILE:-/tmp/bench-corpus-1k.bin}
lane_only=(--backends gpu --peers "" --input packed --batch-size 100000 --native-threads 1)  # the device lane alone
outline_label() {  # a run's name for the functions $1 keeps out of line: inlined, or outlined-<how many>
    [ -n "$1" ] && echo "outlined-$(echo "$1" | tr -cd , | wc -c | awk '{print $1 + 1}')" || echo inlined
}
real_file_of() { echo "${REAL_CORPUS_FILE:-/tmp/bench-corpus-real-$1.bin}"; }
real_corpus() {  # the real-shaped corpus of $1 bodies in real_file, named by its count, made once per host
    real_file=$(real_file_of "$1")
    [ -s "$real_file" ] || step python -c "import sys; from pathlib import Path; from bench import corpus, real_corpus
corpus.write(real_corpus.generate(int(sys.argv[1])), Path(sys.argv[2]))" "$1" "$real_file"
}
harness_corpus() {  # the harness's ~1 KB corpus (800 k bodies) for the device timeline, made once per host
    [ -s "$corpus_file" ] || step python -c "import sys; from pathlib import Path; from bench import corpus
corpus.write(corpus.generate(corpus.CorpusConfig(records=800000, sizes=corpus.parse_sizes('1024:1'))), Path(sys.argv[1]))" \
        "$corpus_file"
}
if [ "$what" = threads ]; then
    # Threads per block of each pass against the lane's 128, on the device timeline over the harness's
    # ~1 KB corpus (pass 1 is its long step there), at most 2 CPU cores; each JSON holds the kernels'
    # registers per thread and blocks resident per SM at its block size. 128 runs first and last.
    harness_corpus
    run=0
    for knobs in "128 128" "64 128" "256 128" "32 128" "128 64" "128 256" "128 128"; do
        run=$((run + 1))
        set -- $knobs
        step two_cores python -m bench.lane_timeline --corpus-in "$corpus_file" --records 800000 \
            --measure-threads "$1" --write-threads "$2" --out "$out/lane-timeline-threads-$run-m$1-w$2-h200.json" \
            >> "$out/lane-timeline-threads-h200.log" 2>&1
    done
fi
if [ "$what" = registers ]; then
    # Pass 1's kernel capped at fewer registers per thread (more warps resident per SM, some spilled)
    # against the compiler's choice ("-", the cap 0), on the same timeline as threads; REGISTER_CAPS names the runs.
    harness_corpus
    run=0
    for cap in ${REGISTER_CAPS:-- 64 48 -}; do
        run=$((run + 1))
        step two_cores python -m bench.lane_timeline --corpus-in "$corpus_file" --records 800000 \
            --measure-registers "$(cap_of "$cap")" \
            --out "$out/lane-timeline-registers-$run-${cap/-/auto}-h200.json" >> "$out/lane-timeline-registers-h200.log" 2>&1
    done
fi
if [ "$what" = caps ]; then
    # Whether a register cap on pass 1 (--lane-registers) pays on this host: the device lane alone on
    # RECORDS real-shaped bodies, then on as many of the timeline's generated ~1 KB ones, each run a
    # process of its own, capped (REGISTER_CAPS) and the compiler's choice ("-", the cap 0) in turn. Each cap's
    # build is cached; both corpora are made once per host.
    records=${RECORDS:-500000}  # at most 800 k: the generated corpus is the device timeline's, made once
    real_corpus "$records"
    harness_corpus
    run=0
    for corpus in real generated; do
        source_args=$([ "$corpus" = real ] && echo "--corpus-in $real_file" || echo "--corpus-in $corpus_file")
        for cap in ${REGISTER_CAPS:-- 96 - 96}; do
            run=$((run + 1))
            # shellcheck disable=SC2086  # source_args is an option and its value
            step python -m bench --records "$records" $source_args --backends gpu --peers "" --input packed \
                --batch-size 100000 --native-threads 1 --measure-registers "$(cap_of "$cap")" \
                --out "$out/bench-caps-$run-$corpus-${cap/-/none}-h200.json" >> "$out/bench-caps-h200.log" 2>&1
        done
    done
fi
if [ "$what" = bodies ]; then
    # How a batch's time grows with its bodies' length (one thread walks one body), 10 k batches in place.
    for bytes in 1024 4096 16384; do
        records=$(( 160000 * 1024 / bytes > 40000 ? 160000 * 1024 / bytes : 40000 ))
        step two_cores python -m bench.transform --records "$records" --batch-size 10000 --body-bytes "$bytes" \
            --backends gpu --input pinned --out "$out/long-bodies-$bytes-h200.json" >> "$out/long-bodies-h200.log" 2>&1
    done
fi
if [ "$what" = packed-peers ] || [ "$what" = all ]; then
    step python -m bench --records 300000 --backends gpu,cpu --input packed --batch-size 100000 \
        --sweep 10000,100000 --sweep-min-records 1000000 --out "$out/bench-packed-h200.json" \
        > "$out/gpu-peers-packed-h200.log" 2>&1
fi
if [ "$what" = peers-1k ]; then
    # The transform target's comparison in one run: ~1 KB generated bodies only, gpu_stage held to one
    # thread besides the one that feeds the device, the peers on every core.
    step python -m bench --records 1000000 --corpus generated --sizes 1024:1 --backends gpu,cpu --input packed \
        --batch-size 100000 --native-threads 1 --out "$out/bench-1k-h200.json" > "$out/gpu-peers-1k-h200.log" 2>&1
fi
if [ "$what" = real ]; then
    # The device lane's target on the real-shaped corpus (the harness's default) and, in its own run, on
    # the generated ~1 KB bodies: 1 M bodies, 100 k packed batches, gpu_stage's native core on one thread,
    # every peer on all cores; the lane in each of REAL_LANE_ORDERS (default: arrival, the baseline, and
    # balanced, the default) in the same run.
    orders=${REAL_LANE_ORDERS:-arrival,balanced}
    step python -m bench --records 1000000 --corpus real --backends gpu,cpu --input packed --lane-orders "$orders" \
        --batch-size 100000 --native-threads 1 --out "$out/bench-real-orders-h200.json" > "$out/gpu-peers-real-h200.log" 2>&1
    step python -m bench --records 1000000 --corpus generated --sizes 1024:1 --backends gpu,cpu --input packed \
        --lane-orders "$orders" --batch-size 100000 --native-threads 1 --out "$out/bench-1k-orders-h200.json" \
        > "$out/gpu-peers-1k-h200.log" 2>&1
fi
if [ "$what" = warp-prep ]; then
    # What the warp modes need, made once per host so that each of them fits one call: the real-shaped
    # corpus, and the kernels of the three lane orders (each pass a thread or a warp per row; rows by
    # length) compiled into the kernel cache by a small batch through each.
    real_corpus 1000000 > "$out/gpu-warp-prep-h200.log" 2>&1
    step python -c "from gpu_stage import synth; from gpu_stage.transform import TransformSettings
from gpu_stage.transform.gpu import GpuBackend
for order, write_warp in (('arrival', 0), ('length', 0), ('warp', 1)):
    backend = GpuBackend(TransformSettings(lane_order=order))
    backend.lane.executor.write_warp = write_warp
    backend.parse(synth.batch(synth.bodies(256)))" >> "$out/gpu-warp-prep-h200.log" 2>&1
fi
if [ "$what" = warp ] || [ "$what" = warp-1k ]; then
    # A warp per body in pass 1 (`--lane-order warp`) against a thread per body, the rows as they came
    # (`arrival`) and sorted by body length (`length`: a warp's bodies end together), in one run, then
    # pass 2 a warp per body too (`--write-warp 1`): 1 M real-shaped bodies (warp), or 1 M generated ~1 KB
    # bodies (warp-1k); the device lane alone, 100 k packed batches. warp also runs the warp build capped
    # at 128 registers per thread (it takes 142 by ptxas 12.9 for sm_90, the one-thread build 125), so that
    # 16 warps stay resident per SM as with a thread per body. Mode warp-tests: the warp's GPU tests.
    if [ "$what" = warp ]; then
        real_corpus 1000000 > "$out/gpu-warp-h200.log" 2>&1
        input=(--corpus-in "$real_file") name=real
    else
        input=(--corpus generated --sizes 1024:1) name=1k
    fi
    step python -m bench --records 1000000 "${input[@]}" --lane-orders arrival,length,warp "${lane_only[@]}" \
        --out "$out/bench-$name-warp-h200.json" >> "$out/gpu-warp-h200.log" 2>&1
    step python -m bench --records 1000000 "${input[@]}" --lane-orders warp --write-warp 1 "${lane_only[@]}" \
        --out "$out/bench-$name-warp-write-h200.json" >> "$out/gpu-warp-h200.log" 2>&1
    if [ "$what" = warp ]; then
        step python -m bench --records 1000000 "${input[@]}" --lane-orders warp --measure-registers 128 \
            "${lane_only[@]}" --out "$out/bench-real-warp-regs-128-h200.json" >> "$out/gpu-warp-h200.log" 2>&1
    fi
fi
if [ "$what" = warp-tests ]; then
    step python -m pytest -q -p no:cacheprovider tests/gpu/test_gpu_lane.py -k warp > "$out/gpu-warp-tests-h200.log" 2>&1
fi
if [ "$what" = longest ]; then
    # What a batch's longest bodies cost the device lane: the real-shaped corpus whole, then without its
    # bodies over 4, 2 and 1 KB (fewer bodies each time); device lane alone, 100 k packed batches. Then
    # the device timeline of the whole corpus, overlapped and serial (each pass's device time per batch).
    real_corpus 1000000 > "$out/gpu-longest-h200.log" 2>&1
    step python -m bench --records 1000000 --corpus-in "$real_file" "${lane_only[@]}" \
        --out "$out/bench-real-longest-all-h200.json" >> "$out/gpu-longest-h200.log" 2>&1
    for cap in 4096 2048 1024; do
        step python -m bench --records 1000000 --corpus-in "$real_file" --longest "$cap" "${lane_only[@]}" \
            --out "$out/bench-real-longest-$cap-h200.json" >> "$out/gpu-longest-h200.log" 2>&1
    done
    step python -m bench.lane_timeline --corpus-in "$real_file" --records 800000 \
        --out "$out/lane-timeline-real-h200.json" >> "$out/gpu-longest-h200.log" 2>&1
    step python -m bench.lane_timeline --corpus-in "$real_file" --records 400000 --serial \
        --out "$out/lane-timeline-real-serial-h200.json" >> "$out/gpu-longest-h200.log" 2>&1
fi
if [ "$what" = trees ]; then
    # The device lane alone on the real-shaped corpus from each of several source trees, one after the
    # other on one host: LANE_TREES lists NAME=DIR pairs, each DIR holding a revision's gpu_stage/
    # (e.g. from `git archive REV gpu_stage | tar -x -C DIR`); the rest comes from this checkout.
    # `python -m` puts the current folder first on sys.path, so each run starts from inside its DIR.
    # TREE_LANE_ORDERS (default: the lane's own) is each run's --lane-orders, e.g. warp.
    real_corpus 1000000 > "$out/gpu-trees-h200.log" 2>&1
    orders=(); [ -n "${TREE_LANE_ORDERS:-}" ] && orders=(--lane-orders "$TREE_LANE_ORDERS")
    here=$(pwd)
    for tree in ${LANE_TREES:?LANE_TREES=NAME=DIR ... names the trees}; do
        name=${tree%%=*} dir=$(cd "${tree#*=}" && pwd)
        echo "== $name: the device lane from $dir" >&2
        (cd "$dir" && PYTHONPATH="$dir:$here:${PYTHONPATH:-}" python -m bench --records 1000000 \
            --corpus-in "$real_file" "${lane_only[@]}" "${orders[@]}" --out "$out/bench-real-tree-$name-h200.json") \
            >> "$out/gpu-trees-h200.log" 2>&1 || status=1
    done
fi
if [ "$what" = source ] || [ "$what" = warp-source ]; then
    # Where pass 1's instructions and stalls are, by source line (kernels built with line information),
    # on one 100 k batch of the real-shaped corpus; the report's source page as CSV, CUDA lines and SASS.
    # source: a thread per body; warp-source: a warp per body (`--lane-order warp`), its files named -warp.
    order=$([ "$what" = source ] && echo arrival || echo warp)
    tag=$([ "$order" = arrival ] && echo source || echo source-warp)
    real_corpus 300000 > "$out/ncu-$tag-h200.log" 2>&1
    step env GPU_STAGE_LANE_LINEINFO=1 ncu --clock-control none --kernel-name regex:measure --launch-skip 2 \
        --launch-count 1 --section SourceCounters --section WarpStateStats --section InstructionStats \
        --import-source yes -f -o "$out/ncu-pass1-$tag" python -m bench.lane_timeline --corpus-in "$real_file" \
        --records 300000 --serial --lane-order "$order" --out "$out/lane-timeline-$tag-h200.json" \
        >> "$out/ncu-$tag-h200.log" 2>&1
    step ncu --import "$out/ncu-pass1-$tag.ncu-rep" --page source --csv --print-source cuda,sass \
        > "$out/ncu-pass1-$tag-h200.csv" 2>> "$out/ncu-$tag-h200.log"
    gzip -f "$out/ncu-pass1-$tag-h200.csv"
    step python -m bench.ncu_source "$out/ncu-pass1-$tag-h200.csv.gz" --out "$out/ncu-pass1-$tag-h200.json" \
        >> "$out/ncu-$tag-h200.log" 2>&1
fi
if [ "$what" = stalls ]; then
    # Why pass 1's warps wait (Nsight Compute: warp states, instruction and memory statistics), on one
    # 100 k batch of the real-shaped corpus and one of ~1 KB generated bodies, after two launches each;
    # the clocks are left as they are.
    real_corpus 300000 > "$out/ncu-pass1-h200.log" 2>&1
    sections=(--section LaunchStats --section Occupancy --section WarpStateStats --section InstructionStats
        --section MemoryWorkloadAnalysis --section SchedulerStats)
    for corpus in real generated; do
        input=(); [ "$corpus" = real ] && input=(--corpus-in "$real_file")
        step ncu --clock-control none --kernel-name regex:measure --launch-skip 2 --launch-count 1 "${sections[@]}" --csv --page details \
            python -m bench.lane_timeline "${input[@]}" --records 300000 --serial \
            --out "$out/lane-timeline-ncu-$corpus-h200.json" > "$out/ncu-pass1-$corpus-h200.csv" 2>> "$out/ncu-pass1-h200.log"
    done
fi
if [ "$what" = outline ]; then
    # The lane's heavy device functions called instead of inlined (GPU_STAGE_LANE_OUTLINE: smaller kernels,
    # calls and a stack frame instead) against all inlined, one process each, inlined first and last:
    # 1 M real-shaped bodies, the device lane alone, 100 k packed batches; the timelines' JSON hold the
    # kernels' code bytes, registers and local bytes per thread. OUTLINES lists the sets of names (each a
    # comma list). Compiled for sm_90, pass 1 is 2.26 MB of code with 125 registers inlined; 1.10 MB
    # and 116 with the first default set; 0.72 MB and 142 with the second. OUTLINE_REGISTERS caps pass 1's
    # registers per thread in the outlined runs (e.g. 128, so that 4 blocks of 128 threads stay resident).
    real_corpus 1000000 > "$out/gpu-outline-h200.log" 2>&1
    sets=${OUTLINES:-scan_string,skip_value scan_string,skip_value,scan_number,escape_code,member}
    cap=(); [ -n "${OUTLINE_REGISTERS:-}" ] && cap=(--measure-registers "$OUTLINE_REGISTERS")
    run=0
    for names in "" $sets ""; do
        run=$((run + 1))
        knobs=(); [ -n "$names" ] && knobs=("${cap[@]}")
        label=$(outline_label "$names")
        step env GPU_STAGE_LANE_OUTLINE="$names" python -m bench --records 1000000 --corpus-in "$real_file" \
            "${lane_only[@]}" "${knobs[@]}" --out "$out/bench-real-outline-$run-$label-h200.json" \
            >> "$out/gpu-outline-h200.log" 2>&1
        step env GPU_STAGE_LANE_OUTLINE="$names" python -m bench.lane_timeline --corpus-in "$real_file" \
            --records 300000 "${knobs[@]}" --out "$out/lane-timeline-outline-$run-$label-h200.json" \
            >> "$out/gpu-outline-h200.log" 2>&1
    done
fi
if [ "$what" = candidates ]; then
    # Every candidate build of the device lane in one call: CANDIDATES lists ORDER:NAMES pairs (a lane
    # order, then the device functions kept out of line, GPU_STAGE_LANE_OUTLINE; none for the inlined
    # build). Each distinct build is compiled into the kernel cache first, all in parallel with the
    # corpus (a cold build takes 1-3 min, mostly one core each); then each pair runs in turn on
    # RECORDS real-shaped bodies, the device lane alone, 100 k packed batches. The first pair is the
    # baseline and comes back last, so that a drift of the host shows. Each run writes its JSON as it ends.
    cands=${CANDIDATES:-arrival: warp: arrival:scan_string,skip_value \
arrival:scan_string,skip_value,scan_number,escape_code,member warp:scan_string,skip_value,scan_number,escape_code,member}
    first=${cands%% *}
    log="$out/gpu-candidates-h200.log" records=${RECORDS:-1000000}
    real_corpus "$records" > "$log" 2>&1 &  # in a subshell: real_file is named here too
    real_file=$(real_file_of "$records")
    builds=0
    for cand in $(printf '%s\n' $cands | sort -u); do
        builds=$((builds + 1))
        GPU_STAGE_LANE_OUTLINE="${cand#*:}" python -c "import sys, time
from gpu_stage import synth
from gpu_stage.transform import TransformSettings
from gpu_stage.transform.gpu import GpuBackend
started = time.perf_counter()
GpuBackend(TransformSettings(lane_order=sys.argv[1])).parse(synth.batch(synth.bodies(256)))
print(f'built {sys.argv[1]}:{sys.argv[2]} in {time.perf_counter() - started:.0f} s')" "${cand%%:*}" "${cand#*:}" \
            > "$out/gpu-candidates-build-$builds-h200.log" 2>&1 &
    done
    wait
    cat "$out"/gpu-candidates-build-*-h200.log >> "$log"
    [ -s "$real_file" ] || { echo "no corpus in $real_file" >> "$log"; exit 1; }
    run=0
    for cand in $cands $first; do
        run=$((run + 1)) order=${cand%%:*} names=${cand#*:}
        label=$order-$(outline_label "$names")
        step env GPU_STAGE_LANE_OUTLINE="$names" python -m bench --records "$records" \
            --corpus-in "$real_file" --lane-orders "$order" "${lane_only[@]}" \
            --out "$out/bench-real-candidate-$run-$label-h200.json" >> "$log" 2>&1
    done
fi
if [ "$what" = peers ] || [ "$what" = all ]; then
    # Every backend, both GPU paths included, on the same bodies; then the harness on the real-shaped corpus.
    step python -m bench.transform --records 100000 --batch-size 50000 \
        --backends gpu,gpu-cudf,cpu,reference --out "$out/transform-all-h200.json" > "$out/gpu-peers-h200.log" 2>&1
    step python -m bench --records 100000 --backends gpu,cpu --sweep 1000,10000,100000,1000000 \
        --sweep-min-records 1000000 --out "$out/bench-h200.json" >> "$out/gpu-peers-h200.log" 2>&1
fi
exit $status
