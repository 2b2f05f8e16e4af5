#!/usr/bin/env bash
# Session 44, visit 1: projctl metrics against projd on the cuda backend
# (the command was written and unit-tested on an H200's STATS without a
# GPU), with the reference model checked against the CPU reference first.
# Keeps: metrics.prom (projd_up 1), metrics-down.prom (projd stopped),
# checks.txt (the projections' checks, the text's families and a strict
# reading of the format by Python).
. bench/visit-common.sh
export PROJD_TUNING_DIR=$PWD/config/tuning
pj_served_config || { echo "visit: no reference model"; exit 1; }
pj_daemon_start ref /tmp/pjref/ref.sock --config "$F/ref.json" || exit 1
for lm in "qkv_gate 16" "o 1" "pooler 256" "unpooler 8" "router 128"; do
    set -- $lm
    printf 'check %s m=%s: %s\n' "$1" "$2" "$(timeout 60 "$B/bin/projctl" --socket ipc:///tmp/pjref/ref.sock \
        project --layer "$1" --m "$2" --check --model "$F/ref.safetensors" 2>&1 | tail -2 | tr '\n' ' ')" |
        tee -a "$OUT/checks.txt"
done
timeout 20 "$B/bin/projctl" --socket ipc:///tmp/pjref/ref.sock metrics --label gpu=0 \
    --out "$OUT/metrics.prom"
echo "metrics rc=$? (0 expected)" | tee -a "$OUT/checks.txt"
pj_daemon_stop
timeout 20 "$B/bin/projctl" --socket ipc:///tmp/pjref/ref.sock --timeout 2000 metrics --label gpu=0 \
    >"$OUT/metrics-down.prom" 2>"$F/down.err"
echo "metrics with projd stopped rc=$? (1 expected): $(cat "$OUT/metrics-down.prom" | grep -v '^#')" |
    tee -a "$OUT/checks.txt"
python3 - "$OUT/metrics.prom" <<'PY' | tee -a "$OUT/checks.txt"
import re, sys
text = open(sys.argv[1], encoding="utf-8").read()
fams, types, cur, series, errs = [], {}, None, set(), []
name = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
for n, line in enumerate(text.splitlines(), 1):
    if line.startswith("# HELP "):
        continue
    m = re.match(r"# TYPE (%s) (counter|gauge|summary|untyped)$" % name, line)
    if m:
        if m.group(1) in types: errs.append("line %d: %s typed twice" % (n, m.group(1)))
        types[m.group(1)] = m.group(2); cur = m.group(1); fams.append(cur); continue
    m = re.match(r"(%s)(\{.*\})? (\S+)$" % name, line)
    if not m: errs.append("line %d: not a sample: %r" % (n, line)); continue
    base = m.group(1)
    if base != cur and not (types.get(cur) == "summary" and base in (cur + "_sum", cur + "_count")):
        errs.append("line %d: %s outside its family" % (n, base))
    key = (base, m.group(2))
    if key in series: errs.append("line %d: series twice" % n)
    series.add(key)
    if 'gpu="0"' not in (m.group(2) or ""): errs.append("line %d: no gpu label" % n)
    float(m.group(3).replace("+Inf", "inf").replace("-Inf", "-inf"))
up = re.search(r'^projd_up\{gpu="0"\} (\S+)$', text, re.M)
lanes = len(re.findall(r'^projd_backend_lane_jobs\{', text, re.M))
steps = re.findall(r'^projd_backend_startup_seconds\{step="([a-z_]+)"', text, re.M)
print("metrics.prom: %d families, %d series, projd_up %s, %d lanes, startup steps %s; %d problems %s"
      % (len(fams), len(series), up.group(1) if up else "?", lanes, ",".join(steps), len(errs), errs[:5]))
PY
