#!/usr/bin/env bash
# Session 58, visit 3: the window choice that avoids heavy exception blocks
# (kernels/zfmt.c, pj_z12_choose_base), A/B on the 8B-shaped decoder layer
# of visit 2. The same weights, two builds in the same run: the old rule
# (the fewest exceptions; projd-bench of main 3ed7f3a, carried as
# projd-bench-old) and the new one. Each tunes its own table at m = 1 and 8
# and benchmarks it against cuBLAS, measured in the same run. projctl
# inspect says, for each build, each layer's window and its heaviest block.
. bench/visit-common.sh
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 | head -1)"
t0=$(date +%s)
pj_l8_model || exit 1
echo "model ready ($(($(date +%s) - t0)) s)"
cat >"$F/l8ab.json" <<'JSON'
{"model": {"path": "/tmp/l8/l8.safetensors",
  "layers": [
    {"name": "qkv_proj", "tensor": "qkv_proj.weight"},
    {"name": "o_proj", "tensor": "o_proj.weight"},
    {"name": "gate_up_proj", "tensor": "gate_up_proj.weight"},
    {"name": "down_proj", "tensor": "down_proj.weight"}]},
 "shapes": {"m": [1, 8]}}
JSON
for v in old new; do
    pb=$B/bin/projd-bench
    pc=$B/bin/projctl
    [ $v = old ] && pb=$B/bin/projd-bench-old && pc=$B/bin/projctl-old
    "$pc" inspect --config "$F/l8ab.json" >"$F/inspect-$v.txt" 2>&1
    echo "== $v: $(grep -c . "$F/inspect-$v.txt") lines of inspect"
    grep -E '^[a-z_]+ +[a-z_]+\.weight ' "$F/inspect-$v.txt" | awk '{print "  " $1, $12 " exceptions", $16 $17}'
    grep 'at most' "$F/inspect-$v.txt" | cut -c1-110 | sed 's/^/  /'
    timeout 200 "$pb" --config "$F/l8ab.json" --tune "$F/l8-$v.json" --tune-budget 110 \
        --out "$F/l8-$v" --reps 200 >"$F/l8-$v.log" 2>&1
    echo "  projd-bench $v rc=$? ($(($(date +%s) - t0)) s)"
    grep -E "^(m |SCORE)" "$F/l8-$v.log" | sed 's/^/  /'
done
mkdir -p "$OUT/old" "$OUT/new"
for v in old new; do
    cp "$F/l8-$v/bench.json" "$F/l8-$v.json" "$OUT/$v/" 2>/dev/null
    cat "$F/inspect-$v.txt" >>"$OUT/$v/bench.log"
    grep -v 'candidates' "$F/l8-$v.log" | tail -30 >>"$OUT/$v/bench.log"
done
