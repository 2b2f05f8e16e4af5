# bench/visit-common.sh — the start every visit script shares
# shellcheck shell=bash
# (bench/results/*/visit.sh, run on the GPU host from the device copy's
# root). Sourced, not run: unpacks the carried build (.devrun-pack/v.tar.xz,
# see bench/README.md) to /tmp/v unless that very pack is there already, sets B (the build
# folder: bin/, lib/, tests/gpu/), OUT (what comes back; default
# /tmp/pj-out), F (/tmp/f, scratch for logs) and LD_LIBRARY_PATH (the
# bundled libraries), and gives a daemon starter that waits for READY.
set -u
OUT=${OUT:-/tmp/pj-out}
F=/tmp/f
mkdir -p /tmp/v "$OUT" "$F"
# Unpacked again whenever the pack is not the one unpacked last, so that a
# machine that kept /tmp from an earlier visit cannot run that visit's
# binaries; the pack's checksum is printed, to match against the one here.
pack_sum=$(cksum <.devrun-pack/v.tar.xz)
if [ ! -d /tmp/v/.devrun-v ] || [ "$(cat /tmp/v/.pack-sum 2>/dev/null)" != "$pack_sum" ]; then
    rm -rf /tmp/v/.devrun-v /tmp/v/.pack-sum
    tar xJf .devrun-pack/v.tar.xz -C /tmp/v || { echo "visit: cannot unpack .devrun-pack/v.tar.xz"; exit 1; }
    echo "$pack_sum" >/tmp/v/.pack-sum
fi
echo "visit: pack $pack_sum" >&2
B=/tmp/v/.devrun-v
export LD_LIBRARY_PATH=$B/lib

# pj_daemon_start TAG SOCKET_PATH [projd options...]: start $B/bin/projd
# (or $PJ_PROJD; log in $F/TAG.log), wait until `projctl status` answers
# ($PJ_READY_S seconds at most, default 60). Sets PJ_DPID. 0, or 1 with
# the log's tail printed.
pj_daemon_start() {
    local tag=$1 sock=$2 i
    shift 2
    "${PJ_PROJD:-$B/bin/projd}" --socket "ipc://$sock" "$@" >"$F/$tag.log" 2>&1 &
    PJ_DPID=$!
    for i in $(seq $((${PJ_READY_S:-60} * 10))); do
        timeout 5 "$B/bin/projctl" --socket "ipc://$sock" status >/dev/null 2>&1 && return 0
        kill -0 "$PJ_DPID" 2>/dev/null || break
        sleep 0.1
    done
    echo "visit: projd $tag did not come up (try $i)"
    tail -5 "$F/$tag.log"
    return 1
}

# pj_daemon_stop: SIGTERM the last started daemon and wait (20 s at most).
pj_daemon_stop() {
    kill -TERM "$PJ_DPID" 2>/dev/null
    timeout 20 tail --pid="$PJ_DPID" -f /dev/null
}

# pj_served_config: the reference model as `projctl mkmodel` writes it
# ($F/ref.safetensors) and a projd configuration serving it ($F/ref.json,
# bench/results/2026-12-02-s24-config/ref.json), for projd-bench --config.
pj_served_config() {
    "$B/bin/projctl" mkmodel --force --out "$F/ref.safetensors" >/dev/null || return 1
    sed "s|@MODEL@|$F/ref.safetensors|" bench/results/2026-12-02-s24-config/ref.json >"$F/ref.json"
}

# pj_rows_trace [TIMEOUT_S]: one decode trace (2500 requests after 300 of
# warm-up; the unpooler's requests of 1024 rows) against projd on the
# reference model ($F/ref.safetensors, pj_served_config), once per
# configuration in $PJ_ROWS_CONFIGS (default "default maxn1024"): default,
# the default layers (the unpooler's max_n all 8192 rows; since session 61
# its graphs at 1024 rows too, from the table's "rows"); noclass, the same
# with PROJD_CUDA_ROW_CLASSES=0 (graphs at max_n only: every request
# computes all 8192 rows); maxn1024, $F/ref.json (its max_n 1024). Each
# started on the committed tables; the daemons' logs (the start's lines on
# the rows) and projload's reports in $OUT/rows, and the lines that
# compare them printed.
pj_rows_trace() {
    local c to=${1:-90} cs=${PJ_ROWS_CONFIGS:-default maxn1024}
    export PROJD_TUNING_DIR=$PWD/config/tuning
    "$B/bin/projload" gen --kind decode --seed 3 --count 3000 --unpooler-n 1024 \
        --out "$F/dec.jsonl" >/dev/null || return 1
    mkdir -p "$OUT/rows"
    for c in $cs; do
        if [ $c = maxn1024 ]; then set -- --config "$F/ref.json"; else set -- --model "$F/ref.safetensors"; fi
        if [ $c = noclass ]; then export PROJD_CUDA_ROW_CLASSES=0; fi
        pj_daemon_start "d-$c" "/tmp/pjs-$c/d.sock" "$@"
        local up=$?
        unset PROJD_CUDA_ROW_CLASSES
        [ $up = 0 ] || continue
        timeout "$to" "$B/bin/projload" --trace "$F/dec.jsonl" --socket "ipc:///tmp/pjs-$c/d.sock" \
            --warmup 300 --count 2500 --json "$F/pl-$c.json" >"$F/pl-$c.txt" 2>&1
        echo "projload $c rc=$?"
        pj_daemon_stop
        cp "$F/d-$c.log" "$F/pl-$c.txt" "$OUT/rows/" 2>/dev/null
    done
    for c in $cs; do
        echo "== rows: $c"
        grep -m4 -oE ".{0,50}[0-9]+ entries.{0,40}|layer unpooler: (its table entries|graphs at n).*|ROW_CLASSES=0.{0,40}" "$F/d-$c.log" |
            cut -c1-220
        grep -E "^(all |overall  )|unpooler" "$F/pl-$c.txt" | head -6 | cut -c1-140
    done
}

# pj_site_wheels: SGLang's wheels carried in .whl/ (bench/sglang-wheels.sh)
# installed into /tmp/site and put on PYTHONPATH, so that the GPU suites run
# python_sglang too. 0, or 1 when pip failed.
pj_site_wheels() {
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || return 1
    export PYTHONPATH=/tmp/site
}

# pj_l8_model: a Llama-3-8B-shaped model in /tmp/l8/l8.safetensors (one
# decoder layer's fused tensors: qkv_proj 6144 x 4096, o_proj 4096 x 4096,
# gate_up_proj 28672 x 4096, down_proj 4096 x 14336, bf16, per-row
# log-normal scales as trained weights have; torch's generator, seed 1) and
# configurations of the cuda backend serving it as N decoder layers (every
# one naming the same four tensors): /tmp/l8/cfg32.json (8 decoder
# layers), /tmp/l8/cfg128.json (32, the whole 8B), and /tmp/l8/check.json
# (the 128 layers' last four only, for projctl --check's reference).
# Session 42's visit 1 made it the same way. 0, or 1 with the log printed.
pj_l8_model() {
    mkdir -p /tmp/l8
    [ -s /tmp/l8/l8.safetensors ] && [ -s /tmp/l8/cfg128.json ] && return 0
    timeout 200 python3 - >"$F/l8-model.log" 2>&1 <<'PY'
import json, struct, torch, time
t0 = time.time()
g = torch.Generator().manual_seed(1)
shapes = {"qkv_proj.weight": (6144, 4096), "o_proj.weight": (4096, 4096),
          "gate_up_proj.weight": (28672, 4096), "down_proj.weight": (4096, 14336)}
hdr, blobs, off = {}, [], 0
for name, (n, k) in shapes.items():
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
    local rc=$?
    [ $rc = 0 ] || { echo "visit: the 8B-shaped model failed (rc $rc)"; cat "$F/l8-model.log"; }
    return $rc
}

# pj_final_check: bench/final-check.sh on this build (the GPU suites under
# MPS, the fault tests, the benchmark of the committed table twice) under
# `timeout 560` (its own worst case passes a command's 600 s), then its
# logs and the first benchmark's JSON copied to $OUT/final and the lines
# that say how it went printed: final-check.sh's exit status says nothing
# (it ends with an echo), the logs do.
pj_final_check() {
    local fc=/tmp/fc
    timeout --kill-after=5 560 bash bench/final-check.sh "$B" "$fc" "$(cat .devrun-pack/commit)" ||
        echo "visit: final-check.sh ended with status $? (124: cut at 560 s)"
    mkdir -p "$OUT/final"
    cp "$fc/backend.log" "$fc/bench-1.log" "$fc/bench-2.log" "$OUT/final/" 2>/dev/null
    cp /tmp/backend/gpu-fault.log /tmp/backend/gpu-tests.log "$OUT/final/" 2>/dev/null
    cp "$fc/bench-1/bench.json" "$OUT/final/bench.json" 2>/dev/null
    grep -E "python_sglang|FAIL|checks passed|^--- |GPU suites|^Ran |^OK" "$OUT/final/gpu-tests.log" \
        "$OUT/final/gpu-fault.log" | cut -c1-220 | head -50
    return 0
}
