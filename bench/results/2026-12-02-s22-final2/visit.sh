#!/usr/bin/env bash
# The last final check of session 22 (after the fixes from reviews of the
# cuda backend, projload and the SGLang method, on top of s22-final's: peer groups,
# the ring's taken-back tail, the header's checks, forced engines, libprojd's
# close and callbacks; kernels and table as round 34): bench/final-check.sh
# (GPU suites, among them python_torch, and the fatal-error test with the
# committed table, the latency tables, the benchmark twice); then apply()
# end to end, the session's start (f48fc31's libprojd and Python module, in
# $B/old) against this build, three runs each alternating, after 0-1000 µs
# of host work, reference model under MPS.
. bench/visit-common.sh
bash bench/final-check.sh "$B" "$F" "${COMMIT:-final}"
cp /tmp/backend/latency.json /tmp/backend/latency.log "$F"/ 2>/dev/null
grep -h "PING round trip" /tmp/backend/*.log
mkdir -p "$B/old/bin"
for f in "$B"/bin/*; do ln -sf "$f" "$B/old/bin/"; done
for r in 1 2 3; do
    for side in old new; do
        if [ $side = old ]; then build=$B/old mod=$B/old/python; else build=$B mod=client/python; fi
        MPS=1 PRESET=reference timeout 150 bash bench/sglang-apply.sh "$build" "$mod" \
            -- --ring A --reps 300 --breakdown --no-table --gaps 0,100,200,500,1000 \
            --json "$F/apply-$side-$r.json" >"$F/apply-$side-$r.log" 2>&1
        echo "apply $side $r rc=$?"
    done
done
gzip -f "$F/backend.log"
tar czf "$OUT/final.tgz" -C "$F" .
# visit2.sh: the load A/B (a second call: one call may run 10 minutes)
for f in "$F"/apply-*.log; do echo "== ${f##*/}"; grep -E '^apply\(\)' "$f"; done
