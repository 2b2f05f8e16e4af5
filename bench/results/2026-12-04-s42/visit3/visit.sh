#!/usr/bin/env bash
# Session 42, visit 3: a Hugging Face checkpoint to a tuned projd, the way
# deploy/README.md tells an operator to.
#  1. A Llama-3-8B-shaped checkpoint as Hugging Face stores it (q/k/v,
#     gate/up apart; 4 decoder layers over 2 shards with an index), written
#     here with torch (random, per-row log-normal scales).
#  2. projd_pack.py: the packed file, the serving config (16 layers,
#     tuned_as) and the tuner's config (one layer of each kind).
#  3. projd-bench --config tune.json --tune: the table for these shapes,
#     and the benchmark with it (baseline cuBLAS measured in the same run).
#  4. projd serving the 16 layers with that table: --check of the last
#     decoder layer's four layers at m = 1 / 16 / 128; STATS engines.
. bench/visit-common.sh
export PROJD_TUNING_DIR=$PWD/config/tuning
D=/tmp/hf
mkdir -p $D/ckpt
timeout 120 python3 - <<'PY' >"$OUT/ckpt.log" 2>&1
import json, struct, torch, time
t0 = time.time()
g = torch.Generator().manual_seed(3)
parts = {"self_attn.q_proj": (4096, 4096), "self_attn.k_proj": (1024, 4096), "self_attn.v_proj": (1024, 4096),
         "self_attn.o_proj": (4096, 4096), "mlp.gate_proj": (14336, 4096), "mlp.up_proj": (14336, 4096),
         "mlp.down_proj": (4096, 14336)}
def write(path, tensors):
    hdr, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name, w in tensors:
        b = w.view(torch.int16).numpy().tobytes()
        hdr[name] = {"dtype": "BF16", "shape": list(w.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)
wm = {}
for shard in range(2):
    fname = "model-%05d-of-00002.safetensors" % (shard + 1)
    ts = []
    for layer in (2 * shard, 2 * shard + 1):
        for p, (n, k) in parts.items():
            w = torch.randn(n, k, generator=g) * 0.02 * torch.exp(0.3 * torch.randn(n, 1, generator=g))
            ts.append(("model.layers.%d.%s.weight" % (layer, p), w.to(torch.bfloat16)))
    write("/tmp/hf/ckpt/" + fname, ts)
    wm.update({n: fname for n, _ in ts})
json.dump({"metadata": {}, "weight_map": wm}, open("/tmp/hf/ckpt/model.safetensors.index.json", "w"))
print("checkpoint written in %.1f s" % (time.time() - t0))
PY
echo "ckpt rc=$?"; cat "$OUT/ckpt.log"
s0=$SECONDS
timeout 120 python3 client/python/projd_pack.py $D/ckpt $D/packed.safetensors --config $D/serve.json \
    --tune-config $D/tune.json 2>&1 | tail -2 | tee "$OUT/pack.log"
echo "pack rc=$? in $((SECONDS - s0)) s"
cp $D/serve.json $D/tune.json "$OUT/"

timeout 360 "$B/bin/projd-bench" --config $D/tune.json --tune $D/llama-h200.json --out "$F/tune" \
    --reps 200 >"$F/tune.log" 2>&1
echo "tune rc=$?"
cp "$F/tune/bench.json" "$OUT/tune-bench.json" 2>/dev/null
cp "$D/llama-h200.json" "$OUT/" 2>/dev/null
tail -25 "$F/tune.log" | cut -c1-200

# serve with the table
python3 - <<'PY'
import json
c = json.load(open("/tmp/hf/serve.json"))
c["device"] = {"backend": "cuda"}
c["tuning"] = {"table": "/tmp/hf/llama-h200.json"}
json.dump(c, open("/tmp/hf/serve-tuned.json", "w"))
chk = dict(c)
chk["model"] = dict(c["model"], layers=[L for L in c["model"]["layers"] if L["name"].startswith("model.layers.3.")])
json.dump(chk, open("/tmp/hf/check.json", "w"))
PY
if pj_daemon_start serve /tmp/hf/s.sock --config /tmp/hf/serve-tuned.json; then
    grep -E "cuda: (startup|device memory|tuning table)|warn" "$F/serve.log" | cut -c1-300 | head -12
    for k in self_attn.qkv_proj self_attn.o_proj mlp.gate_up_proj mlp.down_proj; do
        for m in 1 16 128; do
            timeout 120 "$B/bin/projctl" --socket ipc:///tmp/hf/s.sock --config /tmp/hf/check.json \
                project --layer "model.layers.3.$k" --m $m --check --repeat 50 2>&1 | tail -2 | tr '\n' ' ' |
                sed "s/^/check $k m=$m: /" | tee -a "$OUT/checks.txt"
            echo | tee -a "$OUT/checks.txt"
        done
    done
    timeout 20 "$B/bin/projctl" --socket ipc:///tmp/hf/s.sock stats --json >"$OUT/serve-stats.json" 2>&1
    python3 - "$OUT/serve-stats.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
rows = [e for e in s["backend_stats"]["engines"] if e["layer"].startswith("model.layers.3.")]
for e in rows:
    print("engine %-32s m=%-4s %-8s %-8s tuned_as=%s" % (e["layer"], e.get("m"), e.get("engine"), e.get("why"), e.get("tuned_as", "")))
PY
    pj_daemon_stop
fi
