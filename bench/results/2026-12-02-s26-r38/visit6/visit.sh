#!/usr/bin/env bash
# Round 38, visit 6: a named configuration serves its entry's own m only
# (visit 5's probe: o's m = 256 configuration 19 % slower at m = 140, the
# unpooler's 10-27 % at m = 140 / 192); the other m run the entry's algo,
# kept from round 26's table. test_engines full with the committed table
# (the dispatcher's choice at m = 128 / 100 / 33 of a one-entry table),
# then the benchmark once. Also the checkers' two answer caches as one
# template (LtMemo).
. bench/visit-common.sh
export PJ_TUNE_TABLE=$PWD/config/tuning/h200.json
timeout 120 "$B/tests/gpu/test_engines" >"$OUT/test_engines.log" 2>&1
echo "test_engines rc=$? $(grep -E '^test_engines:' "$OUT/test_engines.log")"
grep -h 'FAIL\|dispatcher gave' "$OUT/test_engines.log" | head -5
timeout 60 "$B/bin/projd-bench" --out "$OUT/bench" --reps 300 --table config/tuning/h200.json \
    >"$OUT/bench.log" 2>&1
echo "bench rc=$? $(grep -E '^SCORE' "$OUT/bench.log")"
grep -E '^bench (qkv_gate|o|unpooler) +m=(128|256) ' "$OUT/bench.log" | cut -c1-150
