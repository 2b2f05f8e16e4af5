#!/usr/bin/env bash
# Session 21, visit 2: libprojd's waiting thread taking its own reply off
# the ring (new) against main 4bcf35b's libprojd (old), the breakdown of
# sglang_apply.py after 0-1000 µs of host work, alternating, twice each; the
# new one with ring.spin_us 500; then projload's decode sweep through rings
# with ring.spin_us 50 and 500. Reference model under MPS.
set -u
OUT=${OUT:-/tmp/pj-out}; mkdir -p /tmp/v "$OUT" /tmp/f
[ -d /tmp/v/.devrun-v ] || tar xJf .devrun-pack/v.tar.xz -C /tmp/v
B=/tmp/v/.devrun-v
export LD_LIBRARY_PATH=$B/lib
mkdir -p "$B/old/bin"; for f in "$B"/bin/*; do ln -sf "$f" "$B/old/bin/"; done
timeout 240 bash tests/gpu/python_torch.sh "$B" >/tmp/f/python_torch.log 2>&1
echo "python_torch rc=$?"; grep -E "^Ran |^OK|FAIL" /tmp/f/python_torch.log | head -5
bd() { # bd TAG BUILD [env...]
    local tag=$1 build=$2; shift 2
    env "$@" MPS=1 PRESET=reference timeout 240 bash bench/sglang-apply.sh "$build" client/python \
        -- --ring A --reps 500 --breakdown --no-table --gaps 0,100,200,500,1000 \
        --json /tmp/f/bd-$tag.json >/tmp/f/bd-$tag.log 2>&1
    echo "breakdown $tag rc=$?"
}
for r in 1 2; do
    bd old-$r "$B/old"
    bd new-$r "$B"
done
bd new-spin500 "$B" RING_SPIN_US=500
for sp in 50 500; do
    mkdir -p /tmp/f/load-spin$sp
    BIN=$B/bin OUT=/tmp/f/load-spin$sp PACK=0 TRANSPORTS=ring KINDS=decode COMPARE=0 DURATION=3 \
        RING_SPIN_US=$sp timeout 300 bash bench/run-load-device.sh >/tmp/f/load-spin$sp.log 2>&1
    echo "load spin $sp rc=$?"
done
tar czf "$OUT/reap.tgz" -C /tmp/f .
for f in /tmp/f/bd-*.log; do
    echo "== $f"; grep -E '^(round trip \+ events, reply at launch|apply)' "$f"
done
for sp in 50 500; do echo "== load spin $sp"; grep -E '^\|' /tmp/f/load-spin$sp/files/summary.md | head -12; done
