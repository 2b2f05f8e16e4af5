#!/usr/bin/env bash
# Session 24: projd-bench --config (a projd configuration's model, layers,
# shapes.m and max_m instead of the built-in reference shapes), on the H200:
# 1. tune the small preset model (projctl mkmodel --preset small) from its
#    config, then serve it with projd (cuda) using that table and check
#    projections at several m against the CPU reference;
# 2. the reference model through --config (unpooler max_n 1024, as the
#    built-in run) with the committed table: the score should read as the
#    built-in benchmark's (~1.26);
# 3. --tune-new of m = 1 with PJ_BENCH_VET_BREAK=o:20 (the vet pass in its
#    committed form: a drop re-checks only its own layer).
. bench/visit-common.sh
export PROJD_TUNING_DIR=$PWD/config/tuning
R=$PWD/bench/results/2026-12-02-s24-config
"$B/bin/projctl" mkmodel --preset small --out "$F/small.safetensors" >/dev/null
"$B/bin/projctl" mkmodel --out "$F/ref.safetensors" >/dev/null
sed "s|@MODEL@|$F/small.safetensors|" "$R/small.json" >"$F/small.json"
sed "s|@MODEL@|$F/ref.safetensors|" "$R/ref.json" >"$F/ref.json"
mkdir -p "$OUT/small" "$OUT/ref" "$OUT/break"
/usr/bin/time -f "wall %e s" timeout 300 "$B/bin/projd-bench" --config "$F/small.json" --out "$OUT/small" \
    --tune "$OUT/small/tuned.json" --tune-budget 60 --reps 60 >"$OUT/small/tune.log" 2>&1
echo "small tune rc=$?"
grep -E 'config|tuner|dropped|wall|SCORE|entries accepted' "$OUT/small/tune.log" | head
sd=$(mktemp -d /tmp/pjs.XXXXXX)
python3 - "$F/small.json" "$OUT/small/tuned.json" >"$F/small-serve.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["tuning"] = {"table": sys.argv[2]}; print(json.dumps(c))
PY
pj_daemon_start small "$sd/s.sock" --config "$F/small-serve.json" --backend cuda || true
for L in qkv_gate o pooler unpooler router; do
    for m in 1 5 16 40 64; do
        timeout 60 "$B/bin/projctl" --socket "ipc://$sd/s.sock" project --layer "$L" --m "$m" --check \
            --model "$F/small.safetensors" >>"$OUT/small/checks.txt" 2>&1
        echo "$L m=$m rc=$?" >>"$OUT/small/checks.txt"
    done
done
pj_daemon_stop
cp "$F/small.log" "$OUT/small/projd.log"
echo "checks ok: $(grep -c 'rc=0' "$OUT/small/checks.txt") of 25"
grep -E 'tuning table|cuda: engine' "$OUT/small/projd.log" | head -3
timeout 200 "$B/bin/projd-bench" --config "$F/ref.json" --out "$OUT/ref" --table config/tuning/h200.json \
    --reps 100 >"$OUT/ref/bench.log" 2>&1
echo "ref rc=$? $(grep -E '^SCORE' "$OUT/ref/bench.log")"
PJ_BENCH_VET_BREAK=o:20 timeout 200 "$B/bin/projd-bench" --out "$OUT/break" --table config/tuning/h200.json \
    --tune "$OUT/break/new.json" --tune-new --tune-m 1-1 --reps 30 >"$OUT/break/tune.log" 2>&1
echo "break rc=$?"
grep -E 'tuner' "$OUT/break/tune.log" | head -9
for d in small ref break; do gzip -f "$OUT/$d/tune_log.csv" 2>/dev/null; done
tar czf "$OUT/config.tgz" -C "$OUT" small ref break && rm -rf "$OUT/small" "$OUT/ref" "$OUT/break"
