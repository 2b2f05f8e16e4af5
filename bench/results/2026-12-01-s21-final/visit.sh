#!/usr/bin/env bash
# Final check of session 21's main (the SGLang method's PackedOps path,
# libprojd's waiting thread taking its own ring reply; kernels and table as
# round 34): bench/final-check.sh (GPU suites, among them python_torch, and
# the fatal-error test with the committed table, the latency tables, the
# benchmark twice); then apply() end to end, the session's start (3386156:
# old/ module and libprojd) against its end, three runs each alternating,
# after 0-500 µs of host work, reference model under MPS.
set -u
OUT=${OUT:-/tmp/pj-out}; mkdir -p /tmp/v "$OUT" /tmp/f
[ -d /tmp/v/.devrun-v ] || tar xJf .devrun-pack/v.tar.xz -C /tmp/v
B=/tmp/v/.devrun-v
bash bench/final-check.sh "$B" /tmp/f "${COMMIT:-final}"
cp /tmp/backend/latency.json /tmp/backend/latency.log /tmp/f/ 2>/dev/null
grep -h "PING round trip" /tmp/backend/*.log
export LD_LIBRARY_PATH=$B/lib
mkdir -p "$B/old/bin"; for f in "$B"/bin/*; do ln -sf "$f" "$B/old/bin/"; done
for r in 1 2 3; do
    for side in old new; do
        if [ $side = old ]; then build=$B/old mod=bench/results/2026-12-01-s21-apply/old; else build=$B mod=client/python; fi
        MPS=1 PRESET=reference timeout 120 bash bench/sglang-apply.sh "$build" "$mod" \
            -- --ring A --reps 300 --breakdown --no-table --gaps 0,100,200,500 \
            --json /tmp/f/apply-$side-$r.json >/tmp/f/apply-$side-$r.log 2>&1
        echo "apply $side $r rc=$?"
    done
done
gzip -f /tmp/f/backend.log
tar czf "$OUT/final.tgz" -C /tmp/f .
for f in /tmp/f/apply-*.log; do echo "== $f"; grep -E '^apply\(\)' "$f"; done
