#!/usr/bin/env bash
# Session 58, visit 1: the final check of main 3ed7f3a (kernels and tables
# unchanged since session 45's score of record; the reaper watch as session
# 57 left it, and projload's --spin-us): the GPU suites and the fatal-error
# test with the committed table, the benchmark of this GPU's table twice, a
# daemon whose reaper is blocked on purpose (it must drain and exit 1), and
# projload's own sending lateness against a cuda daemon, --spin-us 0 and the
# default 100 alternated in the same run.
. bench/visit-common.sh
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 | head -1)"
t0=$(date +%s)
pj_final_check
echo "final check done ($(($(date +%s) - t0)) s)"
mkdir -p "$OUT/reaper" "$OUT/spin"
"$B/bin/projctl" mkmodel --force --out "$F/rw.safetensors" >/dev/null
s=$(date +%s%N)
PROJD_REAPWATCH_MS=100,1500 PROJD_REAPWATCH_BLOCK=3 timeout 60 "$B/bin/projd" \
    --socket "ipc://$F/rw.sock" --model "$F/rw.safetensors" >"$OUT/reaper/projd.log" 2>&1
rc=$?
echo "reaper blocked on the GPU: exit $rc after $((($(date +%s%N) - s) / 1000000)) ms;" \
    "$(grep -c 'nng has not retired a closed pipe' "$OUT/reaper/projd.log") error line(s)"
# projload's lateness: a decode trace at 2000 requests/s over 2 clients,
# nng and the ring, each --spin-us value twice in turn.
"$B/bin/projload" gen --kind decode --count 4000 --out "$F/d.jsonl" >/dev/null
if pj_daemon_start spin "$F/spin.sock" --model "$F/rw.safetensors"; then
    for rep in 1 2; do
        for tr in nng ring; do
            for sp in 0 100; do
                timeout 60 "$B/bin/projload" run --trace "$F/d.jsonl" --socket "ipc://$F/spin.sock" \
                    --rate 2000 --concurrency 2 --count 3000 --warmup 200 --transport $tr \
                    --spin-us $sp --check-fraction 0 --no-progress \
                    --json "$OUT/spin/$tr-$sp-$rep.json" >"$OUT/spin/$tr-$sp-$rep.out" 2>&1
                echo "projload $tr --spin-us $sp (run $rep): exit $?;" \
                    "$(grep -m1 '^all ' "$OUT/spin/$tr-$sp-$rep.out" | awk '{print "p50 " $8 " p99 " $10 " us;"}')" \
                    "$(grep -o 'lateness.*requests' "$OUT/spin/$tr-$sp-$rep.out")"
            done
        done
    done
    pj_daemon_stop
fi
echo "--- table (bench 1)"
grep -E "^(decode|verify)|^SCORE" "$OUT/final/bench-1.log" | head -10
