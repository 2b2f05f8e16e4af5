#!/usr/bin/env bash
# Session 25, round 37: a heavy CTA's x gather in one or two rounds and the
# exception finish unrolled (kernels/gemvz.cuh). VISIT (1, 2 or 3) names the
# build: 1 the register-array gather, 2 the cp.async one, 3 round 37c (its
# loops unrolled; no ncu). On the H200: test_engines
# of the new build with the committed table; then the benchmark of the new
# build twice on the benchmark's generated weights and twice on the served
# reference model (--config); then ncu of the unpooler's z12 GEMV with and
# without a K split (round 37b, a measurement). The build before the change
# could not come along: two builds of projd-bench (31 + 25 MB packed; the
# heavy path grew the z12 GEMVs' code by 8 MB) and the tracked tree pass the
# 64 MiB a visit carries, so "before" is round 36c's visit on another machine.
# Visit 2 also times the unpooler's GEMVs of probe.txt with --probe.
. bench/visit-common.sh
T=config/tuning/h200.json
pj_served_config || exit 1
PJ_TUNE_TABLE=$PWD/$T timeout 300 "$B/tests/gpu/test_engines" >"$F/test_engines.log" 2>&1
echo "test_engines rc=$? $(grep -E 'checks' "$F/test_engines.log" | tail -1)"
grep -E 'FAIL' "$F/test_engines.log" | head -5
bin=$B/bin/projd-bench
b=new
for i in 1 2; do
    timeout 120 "$bin" --out "$F/gen-$b-$i" --table "$T" --reps 300 --commit "$b" \
        >"$F/gen-$b-$i.log" 2>&1
    echo "gen $b $i rc=$? $(grep -E '^SCORE' "$F/gen-$b-$i.log")"
    timeout 120 "$bin" --config "$F/ref.json" --out "$F/ref-$b-$i" --table "$T" --reps 300 \
        --commit "$b" >"$F/ref-$b-$i.log" 2>&1
    echo "ref $b $i rc=$? $(grep -E '^SCORE' "$F/ref-$b-$i.log")"
done
grep -h -E '^bench (qkv_gate|o|pooler) +m=(1|8|16) ' "$F"/ref-*-1.log | cut -c1-150
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
i=0
[ "${VISIT:-1}" = 3 ] && NCU=
for k in "nw=8,ks=1,u=1,pipe=5,xs=2,r=1,rb=1,cl=0,ts=0,st=0" \
    "nw=8,ks=2,u=1,pipe=5,xs=2,r=1,rb=1,cl=1,ts=0,st=0" \
    "nw=4,ks=2,u=1,pipe=5,xs=2,r=1,rb=1,cl=0,ts=0,st=0"; do
    i=$((i + 1))
    [ -n "$NCU" ] || break
    timeout 150 "$NCU" --clock-control none -k "regex:gemvz" --launch-skip 4 --launch-count 1 \
        --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
        --section SchedulerStats -f -o "$F/ncu$i" \
        "$B/bin/projd-bench" --out /tmp/pj-one --one unpooler 1 gemvz "$k" >"$F/ncu$i.run" 2>&1
    "$NCU" --import "$F/ncu$i.ncu-rep" --page details >"$F/ncu$i.txt" 2>&1
    echo "ncu $i $k: $(grep -E 'Duration|Registers Per|Achieved Occupancy|Block Limit Reg|Block Limit Shared|Waves Per SM' "$F/ncu$i.txt" | tr -s ' ' | tr '\n' ';')"
done
if [ "${VISIT:-1}" = 2 ]; then
    timeout 120 "$B/bin/projd-bench" --probe bench/results/2026-12-02-s25-r37/probe.txt \
        >"$F/probe.log" 2>&1
    echo "probe rc=$?"
    tail -14 "$F/probe.log" | cut -c1-160
fi
rm -f "$F"/*.ncu-rep "$F/ref.safetensors"
tar czf "$OUT/out.tgz" -C "$F" .
