#!/usr/bin/env bash
# Session 49, visit 2: a tuning table for the H100 80GB HBM3, the GPU the
# pool lends now and the one many nodes have. Without a table of its own a
# daemon on it runs the untuned ladder (the H200's table names its device
# and is not used on another). The tuner's table is written under $OUT,
# then benchmarked against the H200's table alternately (two runs each),
# then found by a cuda daemon (PROJD_TUNING_DIR) and checked bit-exact
# against the CPU reference on every layer at the benchmark's loads.
. bench/visit-common.sh
T=/tmp/tn
NEW=$OUT/nvidia-h100-80gb-hbm3.json
commit=$(cat .devrun-pack/commit)
rm -rf "$T" && mkdir -p "$T"
t0=$(date +%s)
el() { echo $(($(date +%s) - t0)); }

timeout --kill-after=5 80 "$B/bin/projd-bench" --out "$T/untuned" --reps 300 --commit "$commit" \
    >"$OUT/untuned.log" 2>&1
echo "untuned rc=$? $(grep -E '^SCORE' "$OUT/untuned.log") ($(el) s)"

timeout --kill-after=5 380 "$B/bin/projd-bench" --out "$T/tune" --reps 300 --commit "$commit" \
    --tune "$NEW" --tune-budget 170 >"$OUT/tune.log" 2>&1
echo "tune rc=$? $(grep -E '^SCORE' "$OUT/tune.log") ($(el) s)"
gzip -c "$T/tune/tune_log.csv" >"$OUT/tune_log.csv.gz" 2>/dev/null
[ -s "$NEW" ] || { echo "no table written"; tail -20 "$OUT/tune.log"; exit 1; }

# A/B against the H200's table, alternately, while time is left
for i in 1 2; do
    for t in h200 h100; do
        [ "$(el)" -gt 500 ] && break 2
        tab=config/tuning/h200.json
        [ $t = h100 ] && tab=$NEW
        timeout --kill-after=5 60 "$B/bin/projd-bench" --out "$T/ab-$t-$i" --reps 300 \
            --table "$tab" --commit "$commit" >"$OUT/ab-$t-$i.log" 2>&1
        echo "ab $t $i rc=$? $(grep -E '^SCORE' "$OUT/ab-$t-$i.log") fell back: $(grep -c 'falling back' "$OUT/ab-$t-$i.log") ($(el) s)"
    done
done
cp "$T/ab-h100-1/bench.json" "$OUT/bench-h100.json" 2>/dev/null
cp "$T/ab-h200-1/bench.json" "$OUT/bench-h200.json" 2>/dev/null
cp "$T/untuned/bench.json" "$OUT/bench-untuned.json" 2>/dev/null

# The daemon finds the table by its device's name and serves bit-exact.
if [ "$(el)" -lt 540 ] && pj_served_config; then
    mkdir -p /tmp/tdir && cp "$NEW" /tmp/tdir/
    PROJD_TUNING_DIR=/tmp/tdir timeout 40 "$B/bin/projd" --config "$F/ref.json" --backend cuda \
        --socket ipc:///tmp/tn/d.sock >"$OUT/daemon.log" 2>&1 &
    pd=$!
    for _ in $(seq 200); do
        timeout 5 "$B/bin/projctl" --socket ipc:///tmp/tn/d.sock status >/dev/null 2>&1 && break
        sleep 0.1
    done
    for L in qkv_gate o pooler unpooler router; do
        for m in 1 8 16 32 128 256; do
            r=$(timeout 20 "$B/bin/projctl" --socket ipc:///tmp/tn/d.sock project --layer $L --m $m \
                --check --model "$F/ref.safetensors" 2>&1 | tail -2 | tr '\n' ' ')
            echo "check $L m=$m: $r"
        done
    done >"$OUT/checks.txt"
    kill -TERM $pd 2>/dev/null
    timeout 20 tail --pid=$pd -f /dev/null
    grep -E "tuning table|falling back|rejected" "$OUT/daemon.log" | cut -c1-200 | head -8
    echo "checks: $(grep -c 'mismatches 0 *OK' "$OUT/checks.txt") of 30 with 0 mismatches, OK"
    grep -v 'mismatches 0 *OK' "$OUT/checks.txt" | head -8
fi
echo "--- per shape, new table (ab-h100-1)"
sed -n '/^layer/,/^SCORE/p' "$OUT/ab-h100-1.log" 2>/dev/null | tail -45
