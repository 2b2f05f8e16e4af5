#!/usr/bin/env bash
# Session 45, visit 1.
#  1. projd-bench's tuner on a --config whose two layers (the reference o
#     tensor, named as SGLang names them) have "tuned_as": "o", --tune-new
#     over the committed table at m = 1 and 8: the retuned entries must be
#     written under "o" (the name the daemon looks them up by), no entry
#     under the config's own names, and the rest of the table carried as
#     it was. Before this session's change the tuner wrote and compared
#     under the config's names (the daemon never read those entries).
#  2. The memory plan's refusal (session 43, never run on a GPU): 700
#     layers of the 8B-shaped gate_up_proj (28672 x 4096) as bf16, 153 GiB
#     of weights, must be refused before any upload, in seconds, saying
#     what they need and what is free.
#  3. Session 43's planned visit 1, run as it was written
#     (bench/results/2026-12-04-s43/visit1/visit.sh): the z12 pack and
#     unpack of session 43 against the main before it (7c50dcf, carried as
#     projd-old / projctl-old), the 8B-shaped model's 128 layers on the
#     16-core host: load A/B, two starts, checks, metrics, then
#     test_cuda_backend --n 1024.
# At most 8 files come back: s45.txt (steps 1 and 2), and that script's
# seven.
. bench/visit-common.sh
export PROJD_TUNING_DIR=$PWD/config/tuning
pj_served_config || { echo "visit: no reference model"; exit 1; }
python3 - "$F/ref.safetensors" >"$F/tas.json" <<'PY'
import json, sys
L = [{"name": "model.layers.%d.self_attn.o_proj" % i, "tensor": "o.weight", "format": "auto",
      "tuned_as": "o"} for i in (0, 1)]
print(json.dumps({"model": {"path": sys.argv[1], "layers": L}, "shapes": {"m": [1, 8], "max_m": 8}}))
PY
t0=$SECONDS
timeout 240 "$B/bin/projd-bench" --config "$F/tas.json" --table config/tuning/h200.json \
    --tune "$F/tas-new.json" --tune-new --tune-m 1-8 --reps 30 --out "$F/tas" >"$F/tas.log" 2>&1
echo "tuned_as: projd-bench rc=$? in $((SECONDS - t0)) s" | tee "$OUT/s45.txt"
python3 - config/tuning/h200.json "$F/tas-new.json" "$F/tas/bench.json" <<'PY' 2>&1 | tee -a "$OUT/s45.txt"
import json, sys
old = {(e["layer"], e["n"], e["k"], e["m"]): e for e in json.load(open(sys.argv[1]))["entries"]}
new = {(e["layer"], e["n"], e["k"], e["m"]): e for e in json.load(open(sys.argv[2]))["entries"]}
ours = [k for k in new if k[0].startswith("model.layers.")]
print("entries: old %d, new %d; under the config's own names: %d %s" % (len(old), len(new), len(ours), ours))
for m in (1, 8):
    k = ("o", 4096, 2048, m)
    o, n = old.get(k), new.get(k)
    print("o m=%d: old %s %s us %s -> new %s %s us %s (%s)" % (
        m, o and o["engine"], o and o["knobs"], o and o["us"], n and n["engine"], n and n["knobs"],
        n and n["us"], "retuned" if n and o and n.get("us") != o.get("us") else "NOT retuned"))
print("carried unchanged: %d of %d (every entry but o m=1/8 expected: %d)" % (
    sum(1 for k in old if (k[0] != "o" or k[3] not in (1, 8)) and new.get(k) == old[k]),
    len(old) - 2, len(old) - 2))
b = json.load(open(sys.argv[3]))
for s in b["shapes"]:
    print("bench: %s m=%d engine %s knobs %s ours %.2f base %.2f" % (
        s["layer"], s["m"], s["engine"], s["knobs"], s["ours_us"], s["base_us"]))
PY
grep -E "^tuner|entries accepted|pick|dropped|shares the tuned" "$F/tas.log" | cut -c1-200 | head -12 >>"$OUT/s45.txt"

pj_l8_model || exit 1
python3 - <<'PY'
import json
c = json.load(open("/tmp/l8/cfg128.json"))
c["model"]["layers"] = [{"name": "huge.%d" % i, "tensor": "gate_up_proj.weight", "format": "bf16"}
                        for i in range(700)]
json.dump(c, open("/tmp/l8/cfg-huge.json", "w"))
PY
t0=$SECONDS
timeout 150 "$B/bin/projd" --socket ipc:///tmp/l8/huge.sock --config /tmp/l8/cfg-huge.json \
    >"$F/huge.log" 2>&1
echo "memplan: 700 bf16 layers of 28672 x 4096: projd rc=$? in $((SECONDS - t0)) s" |
    tee -a "$OUT/s45.txt"
grep -iE 'need at least|error|fatal|upload' "$F/huge.log" | cut -c1-500 | head -5 | tee -a "$OUT/s45.txt"

bash bench/results/2026-12-04-s43/visit1/visit.sh
