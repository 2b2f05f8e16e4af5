#!/usr/bin/env bash
# Session 33, visit 1: the final check of main with this session's daemon and
# client changes (no kernel or table change): the two releases moved off the
# loop (pinned shm takes the host address where the device says so, an IPC
# open whose range cannot be read closed on the closer), weight digests in
# STATS (python_torch: projd_sglang.check_weight on every layer from the
# GPU), the bounded connect; test_cuda_backend re-run for session 32's last
# refactor. Then projd --check-config on the cuda backend and the STATS
# digests against the file, and the benchmark twice.
. bench/visit-common.sh
timeout 450 bash bench/final-check.sh "$B" "$F/final" "$(cat .devrun-pack/commit)"
cp "$F"/final/bench-1/*.json "$OUT/" 2>/dev/null
# --check-config on the GPU host, and the served digests against the file's
m=$F/ref.safetensors
"$B/bin/projctl" mkmodel --out "$m" >/dev/null 2>&1
{
    timeout 60 "$B/bin/projd" --model "$m" --socket "$F/cc/p.sock" --check-config
    echo "check-config rc=$?"
    if pj_daemon_start dg "$F/dg/p.sock" --model "$m"; then
        timeout 20 "$B/bin/projctl" --socket "$F/dg/p.sock" status
        timeout 20 "$B/bin/projctl" --socket "$F/dg/p.sock" status --json |
            python3 -c 'import json,sys; d=json.load(sys.stdin); [print("served", L["name"], L["digest"]) for L in d["model"]["layers"]]'
        timeout 60 "$B/bin/projctl" inspect --json "$m" |
            python3 -c 'import json,sys; d=json.load(sys.stdin); [print("file", L["name"], L["digest"]) for L in d["layers"]]'
        kill -TERM "$PJ_DPID"
        wait "$PJ_DPID" 2>/dev/null
        echo "daemon exit $?"
    fi
} >"$OUT/digest.txt" 2>&1
tar czf "$OUT/final.tgz" -C "$F" final
cat "$OUT/digest.txt"
grep -E "checks passed|test_engines:|GPU suites|^OK|^Ran |FAIL" "$F/final/backend.log" | head -16
