#!/usr/bin/env bash
# Session 50, visit 1, second call: the nearest-table fallback on a real
# Hopper of another model, and what it keeps. On this H200, a daemon whose
# tuning folder holds only the H100's table must take it as the nearest
# (and say so); one whose folder holds both shipped tables must take its
# own by name. Each is checked on every layer at the loads' m against the
# CPU reference. Then projd-bench scores the H100's table on this H200
# against the H200's own, alternating, the baseline in each run.
. bench/visit-common.sh
pj_served_config || exit 1
mkdir -p -m 0755 /tmp/v1
run_one() { # TAG DIR
    PROJD_TUNING_DIR=$2 timeout 90 "$B/bin/projd" --config "$F/ref.json" --backend cuda \
        --socket ipc:///tmp/v1/$1.sock >"$OUT/daemon-$1.log" 2>&1 &
    local pd=$! L m r
    for _ in $(seq 300); do
        timeout 5 "$B/bin/projctl" --socket ipc:///tmp/v1/$1.sock status >/dev/null 2>&1 && break
        sleep 0.1
    done
    for L in qkv_gate o pooler unpooler router; do
        for m in 1 8 16 32 128 256; do
            r=$(timeout 20 "$B/bin/projctl" --socket ipc:///tmp/v1/$1.sock project --layer $L --m $m \
                --check --model "$F/ref.safetensors" 2>&1 | tail -2 | tr '\n' ' ')
            echo "check $L m=$m: $r"
        done
    done >"$OUT/checks-$1.txt"
    timeout 5 "$B/bin/projctl" --socket ipc:///tmp/v1/$1.sock stats 2>&1 | grep -i '"table"' >"$OUT/table-$1.txt"
    kill -TERM $pd 2>/dev/null
    timeout 20 tail --pid=$pd -f /dev/null
    echo "$1: $(grep -c 'mismatches 0 *OK' "$OUT/checks-$1.txt") of 30 exact; STATS $(cut -c1-160 "$OUT/table-$1.txt")"
    grep -E "tuning table|nearest installed|rejected|not used" "$OUT/daemon-$1.log" | cut -c25-330
}
# The other shipped table: on an H100 the H200's, on an H200 the H100's.
other=h100-80gb-hbm3.json
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H100 && other=h200.json
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader); the folder holds only $other"
mkdir -p /tmp/onlyother && cp config/tuning/$other /tmp/onlyother/
run_one onlyother /tmp/onlyother
run_one shipped "$PWD/config/tuning"
for i in 1 2; do
    for t in h200 h100-80gb-hbm3; do
        timeout 100 "$B/bin/projd-bench" --out "$F/b-$t-$i" --reps 300 --table config/tuning/$t.json \
            --commit "$(cat .devrun-pack/commit)" >"$OUT/bench-$t-$i.log" 2>&1
        echo "bench $t $i rc=$? $(grep -E '^SCORE' "$OUT/bench-$t-$i.log") fell back: $(grep -c 'falling back' "$OUT/bench-$t-$i.log")"
    done
done
grep -hE '^(decode|verify)' "$OUT"/bench-h100-80gb-hbm3-1.log "$OUT"/bench-h200-1.log
cd "$OUT" && tar czf logs.tgz daemon-*.log checks-*.txt table-*.txt && rm -f daemon-*.log checks-*.txt table-*.txt
