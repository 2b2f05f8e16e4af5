#!/usr/bin/env bash
# Session 42, visit 5: the most layers a daemon takes (1024), on the cuda
# backend. test_cuda_backend --n 1024 (every layer run at a graph m and a
# direct m, checked); then projd on 1024 layers of the small model (each
# of its five tensors again): time to ready, device memory, and what a
# STATS costs (bytes, and its round trip as projctl sees it, five times).
. bench/visit-common.sh
export PROJD_TUNING_DIR=$PWD/config/tuning PJ_BUILD=$B
timeout 300 "$B/tests/gpu/test_cuda_backend" --n 1024 >"$OUT/backend-n1024.log" 2>&1
echo "N1024 rc=$?"; grep -E "^N:|FAIL|checks|also serve" "$OUT/backend-n1024.log" | cut -c1-300 | head -20
"$B/bin/projctl" mkmodel --preset small --out /tmp/small.safetensors >/dev/null || exit 1
python3 - <<'PY'
import json
t = ["qkv_gate", "o", "pooler", "unpooler", "router"]
layers = [{"name": "model.layers.%d.proj%d" % (i // 5, i % 5), "tensor": t[i % 5] + ".weight",
           "format": "split" if t[i % 5] == "router" else "auto"} for i in range(1024)]
json.dump({"device": {"backend": "cuda"}, "model": {"path": "/tmp/small.safetensors", "layers": layers}},
          open("/tmp/l1024.json", "w"))
PY
s0=$SECONDS
if pj_daemon_start l1024 /tmp/l1024.sock --config /tmp/l1024.json; then
    echo "ready in about $((SECONDS - s0)) s"
    grep -E "cuda: (startup|device memory)|also serve" "$F/l1024.log" | cut -c1-300 | head -8
    for i in 1 2 3 4 5; do
        t0=$(date +%s%N)
        timeout 30 "$B/bin/projctl" --socket ipc:///tmp/l1024.sock stats --json >/tmp/stats.json
        echo "stats round trip $(( ($(date +%s%N) - t0) / 1000000 )) ms (projctl's start included)"
    done
    ls -l /tmp/stats.json | awk '{print "stats bytes", $5}'
    python3 -c "
import json; s = json.load(open('/tmp/stats.json')); b = s['backend_stats']
print('layers', len(s['model']['layers']), 'engines rows', len(b['engines']),
      'memory MiB', {k: round(v / 2**20) for k, v in b['memory'].items()})"
    timeout 60 "$B/bin/projctl" --socket ipc:///tmp/l1024.sock project --layer model.layers.204.proj4 \
        --m 16 --repeat 200 2>&1 | tail -1
    pj_daemon_stop
fi
