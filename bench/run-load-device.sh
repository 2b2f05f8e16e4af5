#!/usr/bin/env bash
# run-load-device.sh — one visit to the GPU host for projload (issue 6):
# a concurrency sweep (1, 2, 4, 8, 16 clients, closed loop, CUDA IPC client
# buffers, 5 % of requests checked against the CPU reference) over a decode
# trace and a verify trace of the reference model, then compare mode on both
# traces (in-process cuBLAS, in-process tuned engines, through projd), all
# against one projd (cuda backend, tuned table) under the MPS control daemon.
#
# Usage (on the GPU host):
#   bench/run-load-device.sh            binaries from $BIN, else ./bin next to
#                                       this script, else ../build/bin
# Environment: OUT (results; default /tmp/pj-load-out), TABLE (tuning table;
# default h200.json next to this script, else ../config/tuning/h200.json),
# COUNT / WARMUP / DURATION per sweep step (default 600 / 30 / 4 s),
# TRANSPORTS (projload --transport of the sweeps, e.g. "nng ring" for one
# sweep each; default auto: the ring), KINDS (default "decode verify"),
# COMPARE=0 skips compare mode, RING_SPIN_US sets the daemon's
# ring.spin_us (50 by default), BUFFERS=host gives the clients host
# shared memory instead of CUDA IPC buffers.
# SOAK=S runs a soak instead of the sweeps and compare mode: for S seconds,
# projload runs of STEP seconds each (default 15), cycling the trace
# (decode, verify), the transport (ring, nng) and the clients (1, 4, 16:
# every run connects, registers and drops its connections anew), and after
# each run the daemon's STATS and the GPU's memory are sampled
# (soak.jsonl). The summary says whether the daemon's RSS, device memory,
# buffers or connections grew from the second run to the last.
# A dry run of the script itself on a machine without a GPU: BACKEND=cpu
# PRESET=small GEN_EXTRA="--max-batch 8 --unpooler-n 128" COUNT=40 (host
# buffers, no compare mode).
# Writes to $OUT/files (packed into $OUT/load-results.tgz unless PACK=0): the traces, sweep-{decode,verify}.json (+ .txt), the plot
# data and gnuplot scripts under plots-{decode,verify}/ (gnuplot is not on
# the GPU host: draw them afterwards with `cd OUT/plots-x/.. && gnuplot
# plots-x/*.gp`), compare-{decode,verify}.json (+ .txt), projd.log, and
# summary.md, which is also printed last. Every step is under `timeout`.
set -u
here=$(cd "$(dirname "$0")" && pwd)
if [ -n "${BIN:-}" ]; then
    bin=$BIN
elif [ -x "$here/bin/projd" ]; then
    bin=$here/bin
else
    bin=$here/../build/bin
fi
bin=$(cd "$bin" && pwd)
table=${TABLE:-}
[ -n "$table" ] || { [ -f "$here/h200.json" ] && table=$here/h200.json; }
[ -n "$table" ] || table=$here/../config/tuning/h200.json
table=$(cd "$(dirname "$table")" && pwd)/$(basename "$table")
top=${OUT:-/tmp/pj-load-out}
mkdir -p "$top/files"
top=$(cd "$top" && pwd)
out=$top/files
count=${COUNT:-600}
warmup=${WARMUP:-30}
duration=${DURATION:-4}
backend=${BACKEND:-cuda}
preset=${PRESET:-reference}
gen_extra=${GEN_EXTRA:-}
# BUFFERS=host keeps the clients off the GPU (a projload built with CUDA=0
# can then run against the cuda backend, e.g. an A/B of the client library).
buffers=${BUFFERS:-cuda}
[ "$backend" = cuda ] || buffers=host
[ -d "$here/lib" ] && export LD_LIBRARY_PATH=$here/lib:${LD_LIBRARY_PATH:-}
log() { echo "[$(date +%H:%M:%S)] $*"; }
t_start=$(date +%s)

log "host: $(hostname), $(nproc) cores; binaries $bin; table $table"
timeout 20 nvidia-smi --query-gpu=name,uuid,driver_version,memory.used,memory.total --format=csv 2>&1

work=$(mktemp -d /tmp/pj-load.XXXXXX)
model=$work/reference.safetensors
sock=ipc://$work/projd.sock
daemon_pid=
mps=0
cleanup() {
    if [ -n "$daemon_pid" ] && kill -0 "$daemon_pid" 2>/dev/null; then
        kill -TERM "$daemon_pid" 2>/dev/null
        for _ in $(seq 100); do kill -0 "$daemon_pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$daemon_pid" 2>/dev/null
    fi
    if [ "$mps" = 1 ]; then
        echo quit | timeout 20 nvidia-cuda-mps-control >/dev/null 2>&1
        log "MPS control daemon stopped"
    fi
    rm -rf "$work"
}
trap cleanup EXIT

# 1. The reference model (generated, seed 1).
log "mkmodel"
timeout 60 "$bin/projctl" mkmodel --preset "$preset" --seed 1 --out "$model" || {
    log "mkmodel failed"
    exit 1
}

# 2. MPS: projd and projload both launch kernels (projload's compare mode);
# without it they time-slice the GPU.
export CUDA_MPS_PIPE_DIRECTORY=$work/mps CUDA_MPS_LOG_DIRECTORY=$work/mpslog
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
if timeout 20 nvidia-cuda-mps-control -d; then
    mps=1
    log "MPS control daemon started"
else
    log "MPS control daemon did not start; running without it"
    unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
fi

# 3. projd, cuda backend, the tuned table, a temporary socket.
ring=
if [ -n "${RING_SPIN_US:-}" ]; then
    case $RING_SPIN_US in
        *[!0-9]*) log "RING_SPIN_US must be a number of µs"; exit 2 ;;
    esac
    ring=", \"ring\": { \"spin_us\": $RING_SPIN_US }"
fi
cat >"$work/projd.json" <<EOF
{ "device": { "backend": "$backend" }, "tuning": { "table": "$table" }, "log": { "level": "info" }$ring }
EOF
log "starting projd"
timeout 600 "$bin/projd" --config "$work/projd.json" --model "$model" --socket "$sock" \
    2>"$out/projd.log" &
daemon_pid=$!
ready=0
for _ in $(seq 600); do
    if timeout 5 "$bin/projload" info --socket "$sock" >"$out/info.txt" 2>/dev/null; then
        ready=1
        break
    fi
    kill -0 "$daemon_pid" 2>/dev/null || break
    sleep 0.1
done
if [ "$ready" != 1 ]; then
    log "projd did not come up within 60 s"
    tail -30 "$out/projd.log"
    exit 1
fi
log "projd up: $(head -1 "$out/info.txt")"
grep -q "backend $backend" "$out/info.txt" || { log "projd is not on the $backend backend"; exit 1; }

# 4. Traces (16 clients' worth of drift; m up to 256).
cd "$out" || exit 1
timeout 30 "$bin/projload" gen --kind decode --seed 1 --count 4000 --clients 16 $gen_extra \
    --out decode.jsonl || exit 1
timeout 30 "$bin/projload" gen --kind verify --seed 1 --count 4000 --clients 16 --draft 4 \
    $gen_extra --out verify.jsonl || exit 1

# Checker threads compete for cores with the daemon's spinning completion
# threads and the clients: a quarter of the cores (the first visit, with
# nproc - 2 of them, saw multi-ms p99 tails at one client).
checkers=${CHECKERS:-$(($(nproc) >= 8 ? $(nproc) / 4 : 2))}
rcs=""
soak=${SOAK:-0}
case $soak in *[!0-9]*) log "SOAK must be a number of seconds"; exit 2 ;; esac
# 5a. Soak: runs until SOAK seconds are spent, a sample after each.
soak_sample() { # run number, its exit code, its tag
    local stats gpu
    stats=$(timeout 10 "$bin/projctl" --socket "$sock" stats --json 2>/dev/null | tr -d '\n')
    gpu=$(timeout 10 nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null |
        head -1 | tr -dc 0-9)
    printf '{"run": %d, "t_s": %d, "rc": %d, "tag": "%s", "gpu_mib": %s, "stats": %s}\n' "$1" \
        $(($(date +%s) - t_start)) "$2" "$3" "${gpu:-null}" "${stats:-null}" >>soak.jsonl
}
if [ "$soak" -gt 0 ]; then
    step=${STEP:-15}
    t_end=$(($(date +%s) + soak))
    run=0
    soak_sample 0 0 start
    log "soak: ${soak} s of ${step} s runs"
    while [ "$(date +%s)" -lt "$t_end" ]; do
        kinds=(decode verify) transports=(ring nng) clients=(1 4 16)
        kind=${kinds[run % 2]} transport=${transports[run / 2 % 2]} n=${clients[run % 3]}
        run=$((run + 1))
        tag=$kind-$transport-$n
        timeout $((step + 60)) "$bin/projload" --trace $kind.jsonl --socket "$sock" \
            --buffers $buffers --transport $transport --concurrency "$n" --duration "$step" \
            --model "$model" --check-fraction 0.02 --check-threads "$checkers" --no-progress \
            --seed "$run" --json "soak-$run.json" >"soak-$run.txt" 2>&1
        rc=$?
        [ "$rc" = 0 ] || rcs="$rcs soak-$run($tag)=$rc"
        soak_sample "$run" "$rc" "$tag"
        log "soak run $run ($tag): exit $rc, $(grep -E '^checked:' "soak-$run.txt" | head -1)"
    done
fi
# 5. Sweeps: closed loop at 1, 2, 4, 8, 16 clients, CUDA IPC buffers, per
# transport (files of a transport other than auto carry its name).
[ "$soak" -gt 0 ] && TRANSPORTS=none
for transport in ${TRANSPORTS:-auto}; do
    [ "$transport" = none ] && break
    for kind in ${KINDS:-decode verify}; do
        tag=$kind; [ "$transport" = auto ] || tag=$kind-$transport
        log "sweep: $kind, transport $transport"
        timeout 150 "$bin/projload" --trace $kind.jsonl --socket "$sock" --buffers $buffers \
            --transport "$transport" --sweep 1,2,4,8,16 --warmup "$warmup" --count "$count" \
            --duration "$duration" --model "$model" --check-fraction 0.05 \
            --check-threads "$checkers" --no-progress \
            --json "sweep-$tag.json" --plot "plots-$tag" >"sweep-$tag.txt" 2>&1
        rc=$?
        rcs="$rcs sweep-$tag=$rc"
        sed -n "/^throughput vs concurrency/,\$p" "sweep-$tag.txt"
        grep -E "^checked:|MISMATCH|error:" "sweep-$tag.txt" | sort | uniq -c | head -12
    done
done

# 6. Compare mode: the same requests in-process (cuBLAS, tuned) and through
# projd, one at a time.
for kind in decode verify; do
    [ "$soak" -gt 0 ] && break
    [ "$backend" = cuda ] || { log "compare: skipped (backend $backend)"; break; }
    [ "${COMPARE:-1}" = 1 ] || { log "compare: skipped (COMPARE=0)"; break; }
    log "compare: $kind"
    timeout 100 "$bin/projload" --trace $kind.jsonl --socket "$sock" --buffers cuda --compare \
        --table "$table" --warmup 50 --count 1000 --model "$model" --check-fraction 0.05 \
        --check-threads "$checkers" --no-progress --json compare-$kind.json \
        >compare-$kind.txt 2>&1
    rc=$?
    rcs="$rcs compare-$kind=$rc"
    sed -n '/^compare (/,$p' compare-$kind.txt
    grep -E "^checked:|MISMATCH|error:" compare-$kind.txt | head -6
done

# 7. projd stops on SIGTERM and exits 0.
log "stopping projd"
kill -TERM "$daemon_pid"
timeout 30 tail --pid="$daemon_pid" -f /dev/null
wait "$daemon_pid"
projd_rc=$?
daemon_pid=
rcs="$rcs projd=$projd_rc"
grep -E "error|fatal" "$out/projd.log" | head -5

# 8. Summary (markdown, printed last).
timeout 30 python3 - "$out" "$rcs" "$(($(date +%s) - t_start))" >"$out/summary.md" <<'EOF'
import json, os, sys
out, rcs, secs = sys.argv[1], sys.argv[2], sys.argv[3]
def load(name):
    try:
        return json.load(open(os.path.join(out, name)))
    except Exception as e:
        print("(%s: %s)" % (name, e))
        return None
soaked = os.path.exists(os.path.join(out, "soak.jsonl"))
print("# projload on the H200: %s (%s s on the host; exit codes:%s)\n" % (
    "soak" if soaked else "sweep and compare", secs, rcs))
import glob
for path in sorted(glob.glob(os.path.join(out, "sweep-*.json"))):
    kind = os.path.basename(path)[len("sweep-"):-len(".json")]  # decode, decode-nng, ...
    j = load(os.path.basename(path))
    if not j:
        continue
    print("## %s trace, closed loop, %s buffers, transport %s\n" % (kind.split("-")[0], j.get("buffers"), j.get("transport")))
    print("| clients | req/s | ops/s | p50 µs | p99 µs | p99.9 µs | daemon exec p50 µs | errors | checked | mismatches | max rel err |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    # a step that measured nothing has null percentiles
    us = lambda v: "-" if v is None else "%.1f" % v
    for s in j.get("sweep", []):
        o, t = s["results"]["overall"], s["totals"]
        print("| %d | %.0f | %.0f | %s | %s | %s | %s | %d | %d | %d | %.2e |" % (
            s["concurrency"], o["req_per_s"], o["ops_per_s"], us(o["latency_us"]["p50"]),
            us(o["latency_us"]["p99"]), us(o["latency_us"]["p99_9"]), us(o["daemon_us"]["exec_p50"]),
            t["errors"], t["checked"], t["mismatches"], t.get("max_rel_err", -1)))
    print()
for kind in () if soaked else ("decode", "verify"):
    j = load("compare-%s.json" % kind)
    if not j or "compare" not in j:
        continue
    c = j["compare"]
    print("## compare, %s trace (µs; %s)\n" % (kind, c["inprocess"]))
    print("| request shape | n | cuBLAS p50 | p99 | tuned p50 | p99 | projd p50 | p99 | projd/cuBLAS | tuned/cuBLAS | projd/tuned |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for s in c["shapes"]:
        r = s["p50_ratios"]
        print("| %s | %d | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.2f | %.2f | %.2f |" % (
            s["key"], s["count"], s["cublas"]["p50_us"], s["cublas"]["p99_us"],
            s["tuned"]["p50_us"], s["tuned"]["p99_us"], s["projd"]["p50_us"], s["projd"]["p99_us"],
            r["projd_over_cublas"], r["tuned_over_cublas"], r["projd_over_tuned"]))
    t = j["totals"]
    print("\nchecked %d, mismatches %d, max rel err %.2e\n" % (t["checked"], t["mismatches"], t.get("max_rel_err", -1)))
samples = []
try:
    samples = [json.loads(l) for l in open(os.path.join(out, "soak.jsonl"))]
except Exception:
    pass
def st(smp, *path):
    v = smp.get("stats") or {}
    for k in path:
        v = v.get(k) if isinstance(v, dict) else None
    return v
if samples:
    print("## soak: one projload run per row, the daemon sampled after it\n")
    print("| run | s | run's load | exit | req/s | errors | checked | mismatches | RSS MiB | GPU MiB | buffers | connections | requests | daemon errors |")
    print("| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for smp in samples:
        r = None
        if smp["run"]:
            try:
                r = json.load(open(os.path.join(out, "soak-%d.json" % smp["run"])))
            except Exception:
                r = None
        o = r["results"]["overall"] if r else {}
        t = r["totals"] if r else {}
        rss = st(smp, "memory", "rss_bytes")
        print("| %d | %d | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            smp["run"], smp["t_s"], smp["tag"], smp["rc"],
            "%.0f" % o["req_per_s"] if o else "-", t.get("errors", "-"), t.get("checked", "-"),
            t.get("mismatches", "-"), "%.1f" % (rss / 2**20) if rss is not None else "-",
            "-" if smp.get("gpu_mib") is None else smp["gpu_mib"], st(smp, "buffers", "current"), st(smp, "connections", "current"),
            st(smp, "requests", "total"), st(smp, "errors", "total")))
    runs = [x for x in samples if x["run"] >= 2]
    if len(runs) >= 2:
        a, b = runs[0], runs[-1]
        x, y = st(a, "memory", "rss_bytes"), st(b, "memory", "rss_bytes")
        gx, gy = a.get("gpu_mib"), b.get("gpu_mib")
        print("\nfrom run %d to run %d: daemon RSS %s, GPU memory %s; buffers left %s, connections left %s (the sampling one included)\n" % (
            a["run"], b["run"], "-" if x is None or y is None else "%+.1f MiB" % ((y - x) / 2**20),
            "-" if gx is None or gy is None else "%+d MiB" % (gy - gx),
            st(b, "buffers", "current"), st(b, "connections", "current")))
EOF
# The device tool brings back a few files only: one archive + the summary.
cp "$out/summary.md" "$top/summary.md"
if [ "${PACK:-1}" = 1 ]; then
    cd "$top" && tar czf load-results.tgz files && rm -rf "$out"
fi
log "summary"
cat "$top/summary.md"
case "$rcs" in
*=[1-9]*) exit 1 ;;
esac
exit 0
