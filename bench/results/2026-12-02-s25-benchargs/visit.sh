#!/usr/bin/env bash
# Session 25: projd-bench after it reads its table and lists before the
# device and probes the device as the daemon does (f0c3586). On the H200:
# the benchmark with the committed table (it must run as before), the same
# with a missing table (refused before the device), and the new suite
# e2e_bench_args over this build (CUDA_VISIBLE_DEVICES emptied: the device
# is hidden, so "no usable GPU" must name CUDA_VISIBLE_DEVICES).
. bench/visit-common.sh
timeout 120 "$B/bin/projd-bench" --out "$F/bench" --table config/tuning/h200.json --reps 300 \
    --commit "$(cat .devrun-pack/commit)" >"$F/bench.log" 2>&1
echo "bench rc=$? $(grep -E '^SCORE' "$F/bench.log")"
t0=$(date +%s%N)
timeout 60 "$B/bin/projd-bench" --out "$F/missing" --table /nonexistent.json >"$F/missing.log" 2>&1
rc=$?
echo "missing table rc=$rc in $((($(date +%s%N) - t0) / 1000000)) ms: $(cat "$F/missing.log")"
CUDA_VISIBLE_DEVICES='' timeout 60 "$B/bin/projd-bench" --out "$F/hidden" >"$F/hidden.log" 2>&1
echo "hidden device rc=$?: $(cat "$F/hidden.log")"
timeout 120 bash tests/e2e_bench_args.sh "$B" >"$F/e2e_bench_args.log" 2>&1
echo "e2e_bench_args rc=$? $(tail -1 "$F/e2e_bench_args.log")"
grep FAIL "$F/e2e_bench_args.log" | head -5
tar czf "$OUT/out.tgz" -C "$F" bench bench.log missing.log hidden.log e2e_bench_args.log
