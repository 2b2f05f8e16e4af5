#!/usr/bin/env bash
# Session 24: projd's start-up before (projd-old: main 7fa5205's daemon)
# and after (the model loader's conversion on model.load_threads threads,
# the bf16 copies unpacked on as many, the lanes captured, validated and
# warmed side by side), alternating, on the reference model; each start's
# report lines and its time to answering `projctl status`; then checked
# projections on the new daemon, and bench/final-check.sh of the new build.
. bench/visit-common.sh
export PROJD_TUNING_DIR=$PWD/config/tuning
nproc >"$OUT/nproc.txt"
timeout 60 "$B/bin/projctl" mkmodel --out "$F/m.safetensors" >"$F/mkmodel.log" 2>&1 || {
    echo "mkmodel failed"; tail -3 "$F/mkmodel.log"; }
sd=$(mktemp -d /tmp/pjs.XXXXXX)
start_one() { # TAG BIN
    local tag=$1 bin=$2 t0 t1
    t0=$(date +%s%N)
    "$bin" --socket "ipc://$sd/s.sock" --model "$F/m.safetensors" --backend cuda >"$F/$tag.log" 2>&1 &
    local pid=$!
    for _ in $(seq 3000); do
        timeout 5 "$B/bin/projctl" --socket "ipc://$sd/s.sock" status >/dev/null 2>&1 && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.02
    done
    t1=$(date +%s%N)
    echo "$tag serving_after_ms $(((t1 - t0) / 1000000))" | tee -a "$OUT/startup.txt"
    grep -E 'model loaded|cuda: startup:|rebindable|tuning table' "$F/$tag.log" >>"$OUT/startup.txt"
    if [ "${tag#new}" != "$tag" ]; then
        for L in qkv_gate o pooler unpooler router; do
            for m in 1 16 77 128 200; do
                timeout 60 "$B/bin/projctl" --socket "ipc://$sd/s.sock" project --layer "$L" --m "$m" --check --model "$F/m.safetensors" \
                    >>"$OUT/checks-$tag.txt" 2>&1
                echo "$L m=$m rc=$?" >>"$OUT/checks-$tag.txt"
            done
        done
    fi
    kill -TERM "$pid"; timeout 30 tail --pid="$pid" -f /dev/null
    cp "$F/$tag.log" "$OUT/"
}
start_one warm-new "$B/bin/projd"
for r in 1 2 3; do
    start_one "old-$r" "$B/bin/projd-old"
    start_one "new-$r" "$B/bin/projd"
done
PROJD_CUDA_LANES=1 start_one new-1lane "$B/bin/projd"
grep -c 'rc=0' "$OUT"/checks-new-*.txt
grep -h 'rc=[1-9]' "$OUT"/checks-new-*.txt | head
timeout 420 bash bench/final-check.sh "$B" "$OUT/final" "$(cat .devrun-pack/commit 2>/dev/null || echo work)" 2>&1 | tail -12
echo "== start-up (ms)"
grep -E 'serving_after' "$OUT/startup.txt"
grep -E 'cuda: startup' "$OUT/startup.txt" | sed -E 's/.*startup: //' | cut -c1-300
