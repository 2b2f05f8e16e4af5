#!/usr/bin/env bash
# Session 22, visit 1: where a ring round trip's time goes after host work.
# projctl bench-ipc --gap-us (ring only) on the cpu backend, so the GPU is
# out of it: the daemon's wake-ups alone. Default config, then the loop
# kept from spinning (PROJD_RING_LOOP_SPIN=0), then ring.spin_us 500; and
# the cuda backend (small model, host shared-memory buffers) under MPS.
. bench/visit-common.sh
nproc
mkdir -p /tmp/pjs && chmod 0700 /tmp/pjs
timeout 30 "$B/bin/projctl" mkmodel --out "$F/small.st" --preset small >/dev/null
echo '{"ring": {"spin_us": 500}}' >"$F/spin500.json"
gaps="0 50 100 200 500 1000 2000"
run() { # TAG BACKEND GAPS [VAR=VALUE...] [-- projd options...]
    local tag=$1 be=$2 g=$3 gap
    shift 3
    (
        while [ $# -gt 0 ] && [ "$1" != -- ]; do export "${1?}"; shift; done
        [ $# -gt 0 ] && shift
        pj_daemon_start "$tag" "/tmp/pjs/$tag.sock" --model "$F/small.st" --backend "$be" \
            --log-level warn "$@" || exit 1
        for gap in $g; do
            timeout 120 "$B/bin/projctl" --socket "ipc:///tmp/pjs/$tag.sock" bench-ipc \
                --transport ring --count 1000 --gap-us "$gap" --out "$F/$tag-gap$gap.json" \
                >"$F/$tag-gap$gap.log" 2>&1 || echo "$tag gap $gap rc=$?"
        done
        timeout 10 "$B/bin/projctl" --socket "ipc:///tmp/pjs/$tag.sock" stats --json \
            >"$F/$tag-stats.json"
        pj_daemon_stop
    )
}
run cpu cpu "$gaps"
run noloop cpu "0 200 1000" PROJD_RING_LOOP_SPIN=0
run s500 cpu "0 200 1000" -- --config "$F/spin500.json"
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpslog
mkdir -p /tmp/mps /tmp/mpslog
timeout 20 nvidia-cuda-mps-control -d && echo "MPS started"
run cuda cuda "0 100 200 500 1000"
echo quit | timeout 20 nvidia-cuda-mps-control
tar czf "$OUT/logs.tgz" --exclude=small.st -C "$F" . # one file: the device tool returns a limited count
python3 - "$F" <<'PY'
import json, glob, os, sys
rows = {}
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*-gap*.json"))):
    tag, gap = os.path.basename(f)[:-5].split("-gap")
    d = json.load(open(f))
    r = {x["request"]: x for x in d["rows"] if x["transport"] == "ring"}
    rows[(tag, int(gap))] = r
print("%-7s %6s %8s %8s %8s %8s   (p50 us)" % ("run", "gap", "PING", "PROJ", "daemon", "before"))
for (tag, gap), r in sorted(rows.items(), key=lambda kv: (kv[0][0], kv[0][1])):
    g = lambda k: r.get(k, {}).get("p50_us", float("nan"))
    print("%-7s %6d %8.1f %8.1f %8.1f %8.1f" % (tag, gap, g("PING"), g("PROJECT m=1"),
          g("PROJECT m=1 in the daemon"), g("PROJECT m=1 before the backend")))
PY
