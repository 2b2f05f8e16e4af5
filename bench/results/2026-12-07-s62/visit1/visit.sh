#!/usr/bin/env bash
# Session 62, visit 1: session 61's visit 2 (which found no machine), run on
# main 125d93a, the code it was written for plus alloc_layers' change (row
# classes worked out once). What follows is that script as written.
# Session 61, visit 2: visit 1's decode trace again, each configuration
# twice in alternating orders, to see how much of the 8 us between the
# default layers (row classes) and max_n 1024 in visit 1 was the start
# (thread placement) and not the configuration: round a (maxn1024,
# default, noclass), round b (noclass, default, maxn1024); then round c,
# the default layers and max_n 1024 with the completion threads' spin at
# 200 us (PROJD_CUDA_SPIN_US; default 100), against visit 1's guess that
# requests whose exec nears the spin window pay a blocking wake-up. First,
# test_cuda_backend's section G (T and K at the end) on the reviewed code (ab94852: its
# STATS lookup one helper, G with direct m, the messages naming a class).
. bench/visit-common.sh
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 | head -1)"
export PROJD_TUNING_DIR=$PWD/config/tuning
mkdir -p "$OUT/g"
PJ_BUILD=$B timeout 60 "$B/tests/gpu/test_cuda_backend" --g >"$OUT/g/g.log" 2>&1
echo "section G rc=$?"
grep -E "checks passed|^G:" "$OUT/g/g.log" | cut -c1-160
pj_served_config || exit 1
"$B/bin/projload" gen --kind decode --seed 3 --count 3000 --unpooler-n 1024 \
    --out "$F/dec.jsonl" >/dev/null || exit 1
mkdir -p "$OUT/rows"
runs="a-maxn1024 a-default a-noclass b-noclass b-default b-maxn1024 c-default c-maxn1024"
for r in $runs; do
    c=${r#*-}
    if [ "$c" = maxn1024 ]; then set -- --config "$F/ref.json"; else set -- --model "$F/ref.safetensors"; fi
    [ "$c" = noclass ] && export PROJD_CUDA_ROW_CLASSES=0
    case $r in c-*) export PROJD_CUDA_SPIN_US=200 ;; esac
    pj_daemon_start "d-$r" "/tmp/pjs-$r/d.sock" "$@"
    up=$?
    unset PROJD_CUDA_ROW_CLASSES PROJD_CUDA_SPIN_US
    [ $up = 0 ] || continue
    timeout 60 "$B/bin/projload" --trace "$F/dec.jsonl" --socket "ipc:///tmp/pjs-$r/d.sock" \
        --warmup 300 --count 2500 --json "$F/pl-$r.json" >"$F/pl-$r.txt" 2>&1
    echo "projload $r rc=$?"
    pj_daemon_stop
done
files=()
for r in $runs; do files+=("pl-$r.txt" "pl-$r.json" "d-$r.log"); done
tar czf "$OUT/rows/runs.tgz" -C "$F" "${files[@]}" 2>/dev/null
echo "run          client p50  exec p50   client m=1  exec m=1   client m=129-256  exec m=129-256"
for r in $runs; do
    f=$F/pl-$r.txt
    [ -s "$f" ] || { echo "$r: no report"; continue; }
    # client p50 is column 8 of "all" in "overall"; exec p50 column 4 of the daemon side's "all"
    cl=$(awk '/^overall:/{o=1} o && $1=="all"{print $8; exit}' "$f")
    ex=$(awk '/^daemon side/{d=1} d && $1=="all"{print $4; exit}' "$f")
    c1=$(awk '/^by request shape/{s=1} s && / m=1 /{print $9; exit}' "$f")
    e1=$(awk '/^daemon side/{d=1} d && / m=1 /{print $5; exit}' "$f")
    c2=$(awk '/^by request shape/{s=1} s && / m=129-256 /{print $9; exit}' "$f")
    e2=$(awk '/^daemon side/{d=1} d && / m=129-256 /{print $5; exit}' "$f")
    printf "%-12s %10s %9s %12s %9s %17s %15s\n" "$r" "$cl" "$ex" "$c1" "$e1" "$c2" "$e2"
done
# Sections T and K last, in what time is left (they use the STATS lookup
# that G uses).
PJ_BUILD=$B timeout 60 "$B/tests/gpu/test_cuda_backend" --t >"$OUT/g/tk.log" 2>&1
echo "sections T, K rc=$?"
grep -E "checks passed" "$OUT/g/tk.log" | cut -c1-160
