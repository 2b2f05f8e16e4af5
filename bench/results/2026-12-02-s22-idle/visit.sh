#!/usr/bin/env bash
# Session 22: the cuda backend's completion thread after a quiet spell.
# s22-gap showed a projection's time in the daemon (cuda backend, reply at
# completion) growing from 25 µs back to back to 55-68 µs after 0.5-1 ms
# of client host work while the ring's hand-off stayed at 3-12 µs.
# PROJD_CUDA_IDLE_SPIN_US=N makes each lane's completion thread poll N µs
# for its next job before sleeping. projctl bench-ipc --transport ring on
# the small model under MPS, idle spin 0 (the default) against 1000,
# alternating, twice each.
. bench/visit-common.sh
mkdir -p /tmp/pjs && chmod 0700 /tmp/pjs
timeout 30 "$B/bin/projctl" mkmodel --out "$F/small.st" --preset small >/dev/null
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpslog
mkdir -p /tmp/mps /tmp/mpslog
timeout 20 nvidia-cuda-mps-control -d && echo "MPS started"
for r in 1 2; do
    for spin in 0 1000; do
        tag=spin$spin-$r
        (
            export PROJD_CUDA_IDLE_SPIN_US=$spin
            pj_daemon_start "$tag" "/tmp/pjs/$tag.sock" --model "$F/small.st" --backend cuda \
                --log-level warn || exit 1
            for gap in 0 100 200 500 1000; do
                timeout 120 "$B/bin/projctl" --socket "ipc:///tmp/pjs/$tag.sock" bench-ipc \
                    --transport ring --count 1000 --gap-us "$gap" --out "$F/$tag-gap$gap.json" \
                    >"$F/$tag-gap$gap.log" 2>&1 || echo "$tag gap $gap rc=$?"
            done
            pj_daemon_stop
        )
    done
done
echo quit | timeout 20 nvidia-cuda-mps-control
tar czf "$OUT/idle.tgz" --exclude=small.st -C "$F" .
python3 - "$F" <<'PY'
import json, glob, os, sys
rows = {}
for f in sorted(glob.glob(os.path.join(sys.argv[1], "spin*-gap*.json"))):
    tag, gap = os.path.basename(f)[:-5].split("-gap")
    r = {x["request"]: x for x in json.load(open(f))["rows"]}
    rows[(tag, int(gap))] = r
print("%-10s %6s %8s %8s %8s %8s   (p50 us)" % ("run", "gap", "PING", "PROJ", "daemon", "before"))
for (tag, gap), r in sorted(rows.items(), key=lambda kv: (kv[0][0], kv[0][1])):
    g = lambda k: r.get(k, {}).get("p50_us", float("nan"))
    print("%-10s %6d %8.1f %8.1f %8.1f %8.1f" % (tag, gap, g("PING"), g("PROJECT m=1"),
          g("PROJECT m=1 in the daemon"), g("PROJECT m=1 before the backend")))
PY
