#!/usr/bin/env bash
# Round 38, visit 5: the checker's answers for named configurations kept
# per shape like the plans (a 32-entry cache before, which a verify load's
# many m would have thrashed); test_engines full with the committed table;
# what the four configurations do at the m between the benchmark's that
# the ladder routes to them (--probe: the entry each replaced against the
# configuration, each beside the GemmEx baseline); the benchmark once.
. bench/visit-common.sh
export PJ_TUNE_TABLE=$PWD/config/tuning/h200.json
timeout 200 "$B/tests/gpu/test_engines" >"$OUT/test_engines.log" 2>&1
echo "test_engines rc=$? $(grep -E '^test_engines:' "$OUT/test_engines.log")"
grep -h 'lt configurations\|cuBLASLt conf' "$OUT/test_engines.log"
timeout 200 "$B/bin/projd-bench" --out "$OUT/probe" --table config/tuning/h200.json \
    --probe bench/results/2026-12-02-s26-r38/visit5/probe.txt >"$OUT/probe.log" 2>&1
echo "probe rc=$?"
sed -n '/^probe:/,$p' "$OUT/probe.log" | cut -c1-130
timeout 100 "$B/bin/projd-bench" --out "$OUT/bench" --reps 300 --table config/tuning/h200.json \
    >"$OUT/bench.log" 2>&1
echo "bench rc=$? $(grep -E '^SCORE' "$OUT/bench.log")"
grep -c 'falling back' "$OUT/bench.log"
