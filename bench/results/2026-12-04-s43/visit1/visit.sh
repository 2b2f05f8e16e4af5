#!/usr/bin/env bash
# Session 43, visit 1 — PLANNED, NOT RUN (no device was lent in session 43).
# The z12 pack and unpack rewritten for speed (kernels/zfmt.c, session 43)
# on the H200 host, each figure against the previous main (7c50dcf) in the
# same run. The pack needs, besides this build, that main's projd and
# projctl built with CUDA and copied in as bin/projd-old and bin/projctl-old
# (README.md beside this script says how).
#  1. bench/load-ab.sh: `projctl inspect` of the 8B-shaped model's 128
#     layers (read, convert + verify), old and new alternated, 3 runs each.
#  2. projd on those 128 layers (cuda backend), old then new: time to ready
#     and STATS startup_ms (convert; upload, which unpacks the bf16 copies
#     with the new unpack).
#  3. The new build's layers 124-127 (one of each kind) at m = 1, 16, 200
#     checked by `projctl project --check` against the CPU reference; then
#     `projctl metrics` of that daemon (session 44: never run on a cuda
#     daemon; unit-tested on an H200's STATS) kept as metrics.prom.
#  4. test_cuda_backend --n 1024 (session 42's visit 5 plan): every layer of
#     1024 run at a graph m and a direct m, checked.
# Then visit 2 (bench/final-check.sh) on the same pack. Each step streams to
# $OUT as it ends, so a visit cut at 600 s keeps the steps before the cut.
. bench/visit-common.sh
export PROJD_TUNING_DIR=$PWD/config/tuning PJ_BUILD=$B
pj_l8_model || exit 1
CONFIG=/tmp/l8/cfg128.json timeout 240 bash bench/load-ab.sh "$B/bin/projctl-old" "$B/bin/projctl" \
    /tmp/l8/l8.safetensors 3 "$OUT/load-ab-l8.json" 2>"$F/load-ab.err" | tee "$OUT/load-ab-l8.txt"

# ready TAG PROJD: projd on the 128 layers; time to ready and startup_ms.
ready() {
    local t0=$SECONDS
    PJ_PROJD=$2 PJ_READY_S=120 pj_daemon_start "$1" /tmp/l8/$1.sock --config /tmp/l8/cfg128.json ||
        return 1
    timeout 20 "$B/bin/projctl" --socket "ipc:///tmp/l8/$1.sock" status --json >"$F/$1-status.json"
    python3 - "$1" "$((SECONDS - t0))" "$F/$1-status.json" <<'PY' | tee -a "$OUT/startup.txt"
import json, sys
s = json.load(open(sys.argv[3]))["backend_stats"]
print("%-6s ready in ~%s s  startup_ms %s" % (sys.argv[1], sys.argv[2],
      {k: round(v) for k, v in s.get("startup_ms", {}).items()}))
PY
}
ready old "$B/bin/projd-old"
pj_daemon_stop # also when it did not come up: it must not hold memory through the new one's start
if ready new "$B/bin/projd"; then
    for k in self_attn.qkv_proj self_attn.o_proj mlp.gate_up_proj mlp.down_proj; do
        for m in 1 16 200; do
            printf 'check %s m=%s: %s\n' "$k" "$m" "$(timeout 30 "$B/bin/projctl" \
                --socket ipc:///tmp/l8/new.sock --config /tmp/l8/check.json project \
                --layer "model.layers.31.$k" --m $m --check --repeat 20 2>&1 | tail -1)" |
                tee -a "$OUT/checks.txt"
        done
    done
    # projctl metrics (session 44) against a cuda daemon of 128 layers: the
    # text node_exporter would read; its families and projd_up said here.
    timeout 20 "$B/bin/projctl" --socket ipc:///tmp/l8/new.sock metrics --label gpu=0 \
        >"$OUT/metrics.prom" 2>&1
    echo "metrics rc=$?: $(grep -c '^# TYPE' "$OUT/metrics.prom") families," \
        "$(grep -vc '^#' "$OUT/metrics.prom") samples, $(grep '^projd_up' "$OUT/metrics.prom")" |
        tee -a "$OUT/checks.txt"
fi
pj_daemon_stop
timeout 240 "$B/tests/gpu/test_cuda_backend" --n 1024 >"$F/backend-n1024.log" 2>&1
echo "N1024 rc=$?" | tee "$OUT/backend-n1024.txt"
grep -E "^N:|FAIL|checks|also serve" "$F/backend-n1024.log" | cut -c1-300 | head -20 | tee -a "$OUT/backend-n1024.txt"
