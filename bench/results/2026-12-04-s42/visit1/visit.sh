#!/usr/bin/env bash
# Session 42, visit 1: a whole model's layers on one projd.
#  1. A Llama-3-8B-shaped model (one decoder layer's fused tensors:
#     qkv_proj 6144 x 4096, o_proj 4096 x 4096, gate_up_proj 28672 x 4096,
#     down_proj 4096 x 14336, bf16), served as 8 decoder layers (32 layers)
#     by the previous main (projd-old: a workspace per layer and lane) and
#     by this build (one workspace per lane): start time and device memory,
#     same run. Then this build with all 32 decoder layers (128 layers):
#     start time, memory, --check of four layers (one of each kind) at
#     m = 1 / 16 / 200 against the CPU reference.
#  2. test_cuda_backend --n 200 (section N). The whole suite: visit 2.
. bench/visit-common.sh
export PROJD_TUNING_DIR=$PWD/config/tuning PJ_BUILD=$B
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv | tee "$OUT/gpu.txt"
mkdir -p /tmp/l8
timeout 200 python3 - <<'PY' >"$OUT/mkmodel.log" 2>&1
import json, struct, torch, time
t0 = time.time()
g = torch.Generator().manual_seed(1)
shapes = {"qkv_proj.weight": (6144, 4096), "o_proj.weight": (4096, 4096),
          "gate_up_proj.weight": (28672, 4096), "down_proj.weight": (4096, 14336)}
hdr, blobs, off = {}, [], 0
for name, (n, k) in shapes.items():
    # per-row log-normal scales as trained weights have
    w = torch.randn(n, k, generator=g) * 0.02 * torch.exp(0.3 * torch.randn(n, 1, generator=g))
    b = w.to(torch.bfloat16).view(torch.int16).numpy().tobytes()
    hdr[name] = {"dtype": "BF16", "shape": [n, k], "data_offsets": [off, off + len(b)]}
    off += len(b)
    blobs.append(b)
h = json.dumps(hdr).encode()
h += b" " * (-len(h) % 8)
with open("/tmp/l8/l8.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h)
    for b in blobs:
        f.write(b)
kinds = [("self_attn.qkv_proj", "qkv_proj.weight"), ("self_attn.o_proj", "o_proj.weight"),
         ("mlp.gate_up_proj", "gate_up_proj.weight"), ("mlp.down_proj", "down_proj.weight")]
def cfg(n_dec, only=None):
    layers = [{"name": "model.layers.%d.%s" % (d, k), "tensor": t}
              for d in range(n_dec) for k, t in kinds]
    if only:
        layers = [L for L in layers if L["name"] in only]
    return {"device": {"backend": "cuda"}, "model": {"path": "/tmp/l8/l8.safetensors", "layers": layers},
            "log": {"level": "info"}}
json.dump(cfg(8), open("/tmp/l8/cfg32.json", "w"))
json.dump(cfg(32), open("/tmp/l8/cfg128.json", "w"))
json.dump(cfg(32, {"model.layers.31.%s" % k for k, _ in kinds}), open("/tmp/l8/check.json", "w"))
print("model written in %.1f s, %d bytes of tensors" % (time.time() - t0, off))
PY
echo "mkmodel rc=$?"; cat "$OUT/mkmodel.log"

# run TAG PROJD CONFIG: start, time to ready, STATS memory, stop.
run() {
    local tag=$1 bin=$2 cfg=$3 t0 t1 sock=/tmp/l8/$1.sock
    t0=$(date +%s.%N)
    "$bin" --config "$cfg" --socket "ipc://$sock" >"$F/$tag.log" 2>&1 &
    PJ_DPID=$!
    for i in $(seq 3000); do
        timeout 5 "$B/bin/projctl" --socket "ipc://$sock" status >/dev/null 2>&1 && break
        kill -0 "$PJ_DPID" 2>/dev/null || { echo "$tag: projd exited"; tail -5 "$F/$tag.log"; return 1; }
        sleep 0.1
        [ "$i" = 3000 ] && { echo "$tag: not ready after 300 s"; return 1; }
    done
    t1=$(date +%s.%N)
    timeout 20 "$B/bin/projctl" --socket "ipc://$sock" status --json >"$OUT/$tag-status.json" 2>&1
    python3 - "$tag" "$t0" "$t1" "$OUT/$tag-status.json" <<'PY' | tee -a "$OUT/table.txt"
import json, sys
tag, t0, t1, p = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
s = json.load(open(p))
m = s["backend_stats"]["memory"]
su = s["backend_stats"].get("startup_ms", {})
print("%-10s layers %4d  ready %6.1f s  used %8.1f MiB  weights %8.1f  lanes %7.1f  graphs %6.1f  startup_ms %s" % (
    tag, len(s["model"]["layers"]), t1 - t0, m["used_total_bytes"] / 2**20, m["used_weights_bytes"] / 2**20,
    m["used_lanes_bytes"] / 2**20, m["used_graphs_bytes"] / 2**20,
    {k: round(v) for k, v in su.items()}))
PY
    nvidia-smi --query-gpu=memory.used --format=csv,noheader | sed "s/^/$tag nvidia-smi used: /" | tee -a "$OUT/table.txt"
}
stop() {
    kill -TERM "$PJ_DPID"
    timeout 60 tail --pid="$PJ_DPID" -f /dev/null || kill -KILL "$PJ_DPID"
    wait "$PJ_DPID"
    echo "$1 exit $?"
}

if [ -s /tmp/l8/l8.safetensors ]; then
    run old32 "$B/bin/projd-old" /tmp/l8/cfg32.json && stop old32
    run new32 "$B/bin/projd" /tmp/l8/cfg32.json && stop new32
    run new128 "$B/bin/projd" /tmp/l8/cfg128.json
    for k in self_attn.qkv_proj self_attn.o_proj mlp.gate_up_proj mlp.down_proj; do
        for m in 1 16 200; do
            timeout 120 "$B/bin/projctl" --socket ipc:///tmp/l8/new128.sock --config /tmp/l8/check.json \
                project --layer "model.layers.31.$k" --m $m --check --repeat 20 2>&1 | tail -2 | tr '\n' ' ' |
                sed "s/^/check $k m=$m: /" | tee -a "$OUT/checks.txt"
            echo | tee -a "$OUT/checks.txt"
        done
    done
    timeout 30 "$B/bin/projctl" --socket ipc:///tmp/l8/new128.sock layers | tail -3 >"$OUT/layers-tail.txt"
    stop new128
    grep -E "cuda: (startup|device memory)" "$F/old32.log" "$F/new32.log" "$F/new128.log" | cut -c1-400 >"$OUT/startup-lines.txt"
fi

timeout 240 "$B/tests/gpu/test_cuda_backend" --n 200 >"$OUT/backend-n.log" 2>&1
echo "N rc=$?"; grep -E "^N:|FAIL|checks" "$OUT/backend-n.log" | cut -c1-300 | head -20
echo "== table"; cat "$OUT/table.txt"; cat "$OUT/checks.txt" | cut -c1-250
