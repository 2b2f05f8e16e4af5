#!/usr/bin/env bash
# Session 49, visit 4 (H100 80GB HBM3): the tuner's table (t-tuned.json,
# visit 2) against it with the H200 table's cuBLASLt entries for o and
# unpooler at m = 128 / 256 (t-merged.json), which beat the tuner's picks
# on the H100 in visit 2's A/B. Alternately, three runs each; then a cuda
# daemon finds t-merged.json by its device's name and every layer is
# checked against the CPU reference at the loads' m and at m between them
# (the entries serve m = 33..128 and 129..256). One tar comes back.
. bench/visit-common.sh
V=bench/results/2026-12-05-s49/visit4
W=/tmp/v4
rm -rf "$W" && mkdir -p "$W/tdir"
commit=$(cat .devrun-pack/commit)
for i in 1 2 3; do
    for t in tuned merged; do
        timeout --kill-after=5 60 "$B/bin/projd-bench" --out "$W/ab-$t-$i" --reps 300 \
            --table "$V/t-$t.json" --commit "$commit" >"$W/ab-$t-$i.log" 2>&1
        echo "ab $t $i rc=$? $(grep -E '^SCORE' "$W/ab-$t-$i.log") fell back: $(grep -c 'falling back' "$W/ab-$t-$i.log")"
    done
done
if pj_served_config; then
    cp "$V/t-merged.json" "$W/tdir/h100-80gb-hbm3.json"
    PROJD_TUNING_DIR=$W/tdir timeout 60 "$B/bin/projd" --config "$F/ref.json" --backend cuda \
        --socket ipc://$W/d.sock >"$W/daemon.log" 2>&1 &
    pd=$!
    for _ in $(seq 200); do
        timeout 5 "$B/bin/projctl" --socket ipc://$W/d.sock status >/dev/null 2>&1 && break
        sleep 0.1
    done
    for L in qkv_gate o pooler unpooler router; do
        for m in 1 8 16 32 33 100 128 129 200 256; do
            r=$(timeout 20 "$B/bin/projctl" --socket ipc://$W/d.sock project --layer $L --m $m \
                --check --model "$F/ref.safetensors" 2>&1 | tail -2 | tr '\n' ' ')
            echo "check $L m=$m: $r"
        done
    done >"$W/checks.txt"
    kill -TERM $pd 2>/dev/null
    timeout 20 tail --pid=$pd -f /dev/null
    grep -E "tuning table|falling back|rejected|not used" "$W/daemon.log" | cut -c1-200 | head -8
    echo "checks: $(grep -c 'mismatches 0 *OK' "$W/checks.txt") of 50 with 0 mismatches, OK"
    grep -v 'mismatches 0 *OK' "$W/checks.txt" | head -8
fi
tar czf "$OUT/v4.tgz" -C /tmp v4
for f in "$W"/ab-*-1.log; do echo "== $f"; sed -n '/^load/,/^SCORE/p' "$f"; done
