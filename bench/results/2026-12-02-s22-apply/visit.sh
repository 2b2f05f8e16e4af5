#!/usr/bin/env bash
# Session 22: apply() of the SGLang method, the session's start (f48fc31's
# libprojd and Python module, in $B/old) against main 8a8d58e, with more
# runs than the final checks' three (whose cells spread 0.5-1.9x between
# runs of one build): eight runs each, alternating, after 0, 200 and
# 1000 µs of host work; qkv_gate of the reference model under MPS.
. bench/visit-common.sh
mkdir -p "$B/old/bin"
for f in "$B"/bin/*; do ln -sf "$f" "$B/old/bin/"; done
for r in 1 2 3 4 5 6 7 8; do
    for side in old new; do
        if [ $side = old ]; then build=$B/old mod=$B/old/python; else build=$B mod=client/python; fi
        MPS=1 PRESET=reference timeout 100 bash bench/sglang-apply.sh "$build" "$mod" \
            -- --ring A --reps 300 --breakdown --no-table --gaps 0,200,1000 \
            --json "$F/apply-$side-$r.json" >"$F/apply-$side-$r.log" 2>&1
        echo "apply $side $r rc=$?"
    done
done
tar czf "$OUT/apply.tgz" -C "$F" .
python3 - "$F" <<'PY'
import glob, os, re, statistics, sys
d = {}
for f in glob.glob(os.path.join(sys.argv[1], "apply-*-*.log")):
    side = os.path.basename(f).split("-")[1]
    for line in open(f):
        m = re.match(r"apply\(\), gap (\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)", line)
        if m:
            for i, v in enumerate(m.groups()[1:]):
                d.setdefault((side, int(m.group(1)), i), []).append(float(v))
print("gap  m   old median (runs)            new median (runs)            old/new")
for g in (0, 200, 1000):
    for i, mm in enumerate((1, 8, 64)):
        o, n = sorted(d.get(("old", g, i), [0])), sorted(d.get(("new", g, i), [0]))
        print("%4d %3d  %6.1f (%s)  %6.1f (%s)  %.2f" % (g, mm, statistics.median(o),
              "/".join("%.0f" % x for x in o), statistics.median(n),
              "/".join("%.0f" % x for x in n), statistics.median(o) / statistics.median(n)))
PY
