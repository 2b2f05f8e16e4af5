#!/usr/bin/env bash
# Session 52, visit 1: the m between the table's entries, timed. The
# committed table has entries at m = 1, 8, 16, 32, 128, 256 only; the
# dispatcher serves every other m with the entry of the next m up
# (kernels/dispatch.h, pj_dispatch_choose), and no run so far timed those
# m against their baseline (session 50's loader review). projd-bench with
# a configuration whose shapes.m are 16 such m runs exactly what the
# daemon would run for them and times it against cuBLAS as SGLang runs it.
# Three tables: the GPU's committed one, and the same with every cublas entry
# running algo = 0 (cublasGemmEx's default) or algo = 1 (cuBLASLt's
# heuristic first), which is what a routed m would run if an entry's
# place in cuBLASLt's list (algo >= 2) did not carry over from its own m.
. bench/visit-common.sh
V=bench/results/2026-12-05-s52/visit1
pj_served_config || { echo "visit: no served config"; exit 1; }
python3 - "$F/ref.json" "$F/between.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["shapes"] = {"m": [2, 3, 4, 6, 12, 20, 24, 33, 48, 64, 96, 136, 160, 192, 224, 255], "max_m": 256}
json.dump(c, open(sys.argv[2], "w"))
PY
# The GPU's own table, as bench/final-check.sh finds it (the pool lends
# H100s too), and its two variants made here.
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 2>/dev/null | head -1)
slug=$(printf '%s' "$gpu" | tr 'A-Z' 'a-z' | tr -c 'a-z0-9' '-')
table=config/tuning/h200.json
for t in "config/tuning/$slug.json" "config/tuning/${slug#nvidia-}.json"; do
    [ -n "$slug" ] && [ -f "$t" ] && table=$t && break
done
echo "device: ${gpu:-unknown}; table $table"
python3 - "$table" "$F" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
for a in (0, 1):
    u = json.loads(json.dumps(t))
    for e in u["entries"]:
        if e["engine"] == "cublas":
            e["knobs"] = {"algo": a}
    json.dump(u, open("%s/table-algo%d.json" % (sys.argv[2], a), "w"), indent=1)
PY
for t in committed algo0 algo1; do
    case $t in
    committed) tf=$table ;;
    *) tf=$F/table-$t.json ;;
    esac
    timeout 150 "$B/bin/projd-bench" --config "$F/between.json" --table "$tf" --reps 100 \
        --out "$F/b-$t" --commit "$(cat .devrun-pack/commit)" >"$F/b-$t.log" 2>&1
    echo "between $t rc=$? $(grep -E '^SCORE' "$F/b-$t.log")"
    cp "$F/b-$t.log" "$OUT/between-$t.log"
done
tar czf "$OUT/between-json.tgz" -C "$F" b-committed b-algo0 b-algo1 2>/dev/null
# The table, one row per (layer, m): the entry's engine and the speedup
# under each of the three tables.
python3 - "$F" <<'PY'
import re, sys
rows = {}
for t in ("committed", "algo0", "algo1"):
    try:
        txt = open("%s/b-%s.log" % (sys.argv[1], t)).read()
    except OSError:
        continue
    for L in txt.splitlines():
        m = re.match(r"bench (\S+)\s+m=(\d+)\s+(\S+)\s+(\S*)\s+base\s+([\d.]+) \((\w+)\)\s+ours\s+([\d.]+)\s+x([\d.]+)", L)
        if m:
            k = (m.group(1), int(m.group(2)))
            rows.setdefault(k, {})[t] = (m.group(3), float(m.group(5)), float(m.group(7)), float(m.group(8)))
print("%-9s %4s %-7s %8s %8s %7s %7s %7s" % ("layer", "m", "engine", "base", "ours", "x", "x_a0", "x_a1"))
for (l, mm), d in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    c = d.get("committed", ("-", 0, 0, 0))
    print("%-9s %4d %-7s %8.2f %8.2f %7.3f %7s %7s" % (l, mm, c[0], c[1], c[2], c[3],
          "%.3f" % d["algo0"][3] if "algo0" in d else "-", "%.3f" % d["algo1"][3] if "algo1" in d else "-"))
PY
