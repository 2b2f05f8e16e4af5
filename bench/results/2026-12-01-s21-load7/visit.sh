#!/usr/bin/env bash
# Session 21, visit 7: projload's decode sweep through rings, old (f6a88ff)
# against new (f22dd0d: the FIFOs watched only while the loop sleeps), alternating, twice each.
set -u
OUT=${OUT:-/tmp/pj-out}; mkdir -p /tmp/v "$OUT" /tmp/f
[ -d /tmp/v/.devrun-v ] || tar xJf .devrun-pack/v.tar.xz -C /tmp/v
B=/tmp/v/.devrun-v
export LD_LIBRARY_PATH=$B/lib
for r in 1 2; do
    for side in old new; do
        bin=$B/bin; [ $side = old ] && bin=$B/old/bin
        mkdir -p /tmp/f/$side-$r
        BIN=$bin OUT=/tmp/f/$side-$r PACK=0 TRANSPORTS=ring KINDS=decode COMPARE=0 DURATION=1 \
            timeout 200 bash bench/run-load-device.sh >/tmp/f/$side-$r.log 2>&1
        echo "load $side $r rc=$?"
    done
done
for d in /tmp/f/*-[12]/files; do
    rm -f "$d"/*.jsonl
done
tar czf "$OUT/load.tgz" -C /tmp/f .
for d in old-1 new-1 old-2 new-2; do
    echo "== $d"; grep -E '^\| [0-9]' /tmp/f/$d/files/summary.md | cut -d'|' -f2-5,8-11
done
