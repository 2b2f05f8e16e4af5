#!/usr/bin/env bash
# gpu-table.sh — the committed tuning table of GPU 0, as the daemon finds it
# by name (config/tuning/<name>.json, e.g. h100-80gb-hbm3.json), else
# h200.json: the pool lends H100s too, and a run on one should score the
# table its daemons use. (A Hopper with no table of its name: its daemons
# take the nearest, daemon/tablepick.h; this prints h200.json.) Prints the
# path (relative to the repository root) on stdout and "device: NAME; table
# PATH" on stderr. From the repository root.
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 2>/dev/null | head -1)
slug=$(printf '%s' "$gpu" | tr 'A-Z' 'a-z' | tr -c 'a-z0-9' '-')
table=config/tuning/h200.json
for t in "config/tuning/$slug.json" "config/tuning/${slug#nvidia-}.json"; do
    [ -n "$slug" ] && [ -f "$t" ] && table=$t && break
done
echo "device: ${gpu:-unknown}; table $table" >&2
echo "$table"
