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
# (log in $F/TAG.log), wait until `projctl status` answers (60 s at most).
# Sets PJ_DPID. 0, or 1 with the log's tail printed.
pj_daemon_start() {
    local tag=$1 sock=$2 i
    shift 2
    "$B/bin/projd" --socket "ipc://$sock" "$@" >"$F/$tag.log" 2>&1 &
    PJ_DPID=$!
    for i in $(seq 600); do
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
    "$B/bin/projctl" mkmodel --out "$F/ref.safetensors" >/dev/null || return 1
    sed "s|@MODEL@|$F/ref.safetensors|" bench/results/2026-12-02-s24-config/ref.json >"$F/ref.json"
}
