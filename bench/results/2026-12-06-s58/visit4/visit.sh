#!/usr/bin/env bash
# Session 58, visit 4: the window choice's bound widened (a base may also add
# up to 1 % to the tiles' bytes), A/B/C on visit 3's 8B-shaped decoder layer
# in the same run: the fewest exceptions (main 3ed7f3a, projd-bench-old),
# visit 3's rule (within 2x the fewest plus one a block; main 1686fb8,
# projd-bench-mid) and the widened one (this build). Each tunes its own table
# at m = 1 and 8 and benchmarks it against cuBLAS, measured in the same run;
# projctl inspect says each layer's window and heaviest block.
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
for v in old mid new; do
    pb=$B/bin/projd-bench
    pc=$B/bin/projctl
    [ $v != new ] && pb=$B/bin/projd-bench-$v && pc=$B/bin/projctl-$v
    "$pc" inspect --config "$F/l8ab.json" >"$F/inspect-$v.txt" 2>&1
    echo "== $v"
    grep -E '^[a-z_]+ +[a-z_]+\.weight ' "$F/inspect-$v.txt" | awk '{print "  " $1, $12 " exceptions", $16 $17}'
    grep 'at most' "$F/inspect-$v.txt" | cut -c1-90 | sed 's/^/  /'
    timeout 150 "$pb" --config "$F/l8ab.json" --tune "$F/l8-$v.json" --tune-budget 100 \
        --out "$F/l8-$v" --reps 200 >"$F/l8-$v.log" 2>&1
    echo "  projd-bench $v rc=$? ($(($(date +%s) - t0)) s)"
    grep -E "^(m |SCORE)" "$F/l8-$v.log" | sed 's/^/  /'
    mkdir -p "$OUT/$v"
    cp "$F/l8-$v/bench.json" "$OUT/$v/" 2>/dev/null
    { cat "$F/inspect-$v.txt"; grep -v 'candidates' "$F/l8-$v.log" | tail -30; } >"$OUT/$v/bench.log"
done
