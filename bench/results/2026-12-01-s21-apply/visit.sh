#!/usr/bin/env bash
# Session 21, visit 1: what one apply() of the SGLang linear method costs,
# piece by piece, and the adapter's new hot path (PackedOps, no device
# switch) against the committed one (old/projd_sglang.py), both through
# rings, on the reference model under MPS; with the host idle between
# applies (gap 0) and busy for 200 µs (as between a model's projections),
# and with the ring's spin 50 µs (the default) and 500 µs.
set -u
OUT=${OUT:-/tmp/pj-out}; mkdir -p /tmp/v "$OUT" /tmp/f
[ -d /tmp/v/.devrun-v ] || tar xJf .devrun-pack/v.tar.xz -C /tmp/v
B=/tmp/v/.devrun-v
export LD_LIBRARY_PATH=$B/lib
D=bench/results/2026-12-01-s21-apply
timeout 240 bash tests/gpu/python_torch.sh "$B" >/tmp/f/python_torch.log 2>&1
echo "python_torch rc=$?"; grep -E "^Ran |^OK|FAIL|Error" /tmp/f/python_torch.log | head -5
for gap in 0 200; do
    extra=; [ "$gap" = 0 ] && extra=--breakdown
    MPS=1 PRESET=reference timeout 240 bash bench/sglang-apply.sh "$B" $D/old client/python \
        -- --ring AB --reps 1000 --gap-us $gap $extra --json /tmp/f/ab-gap$gap.json >/tmp/f/ab-gap$gap.log 2>&1
    echo "old/new gap $gap rc=$?"
done
for sp in 50 500; do
    RING_SPIN_US=$sp MPS=1 PRESET=reference timeout 240 bash bench/sglang-apply.sh "$B" client/python client/python \
        -- --ring B --reps 1000 --gap-us 200 --breakdown --json /tmp/f/nr-spin$sp.json >/tmp/f/nr-spin$sp.log 2>&1
    echo "nng/ring spin $sp rc=$?"
done
tar czf "$OUT/apply.tgz" -C /tmp/f .
for f in /tmp/f/ab-gap0.log /tmp/f/ab-gap200.log /tmp/f/nr-spin50.log /tmp/f/nr-spin500.log; do
    echo "== $f"; grep -E '^ +[0-9]+ |^(torch|current|event|stream|cuda_all|Packed|Op list|round|apply)' "$f"
done
