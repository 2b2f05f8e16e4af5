#!/usr/bin/env bash
# Session 22's final visit, part 2 (after visit.sh, same machine):
# projload's decode sweep through rings with host buffers: the session
# start's libprojd (f48fc31's projload, built without CUDA, in $B/old/cpu)
# against this build's (built the same way, in $B/new-cpu), one daemon
# build (this one), alternating, twice each.
. bench/visit-common.sh
for r in 1 2; do
    for side in old new; do
        bin=$B/$side-lb
        mkdir -p "$bin" "$F/load-$side-$r"
        for f in "$B"/bin/*; do ln -sf "$f" "$bin/"; done
        if [ $side = old ]; then ln -sf "$B/old/cpu/projload" "$bin/projload"; else ln -sf "$B/new-cpu/projload" "$bin/projload"; fi
        BIN=$bin OUT=$F/load-$side-$r PACK=0 BUFFERS=host TRANSPORTS=ring KINDS=decode COMPARE=0 \
            DURATION=1 timeout 200 bash bench/run-load-device.sh >"$F/load-$side-$r.log" 2>&1
        echo "load $side $r rc=$?"
        rm -f "$F/load-$side-$r"/files/*.jsonl
    done
done
rm -rf "$F"/apply-* "$F"/bench-* "$F"/backend* "$F"/latency*
tar czf "$OUT/load.tgz" -C "$F" .
for d in old-1 new-1 old-2 new-2; do
    echo "== load $d"; grep -E '^\| [0-9]' "$F/load-$d/files/summary.md" | cut -d'|' -f2-5,8-11
done
