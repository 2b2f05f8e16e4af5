#!/usr/bin/env bash
# Session 37, visit 1: bench/final-check.sh on the session's code (the GPU
# suites with test_cuda_backend's new sections P and L and
# tests/gpu/check_config.sh, the fatal-error test, the benchmark of the
# committed table twice), then three daemon starts on the small model:
# PROJD_FORCE_ENGINE with a knob the engine does not read (must refuse to
# start, naming it), PROJD_FORCE_ENGINE=gemvz:pipe=6 (pipe 6 takes m <= 8:
# the refusals at m >= 16 must give pipe 6's reason), and a start without
# MPS (the new warning).
. bench/visit-common.sh
export PJ_BUILD=$B
c=$(cat .devrun-pack/commit)
bash bench/final-check.sh "$B" "$OUT/final" "$c"
unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
"$B/bin/projctl" mkmodel --preset small --out "$F/small.safetensors" >/dev/null
echo '{ "device": { "backend": "cuda" } }' >"$F/cuda.json"
PROJD_FORCE_ENGINE=cublas:nw=4 timeout 60 "$B/bin/projd" --config "$F/cuda.json" \
    --model "$F/small.safetensors" --socket "ipc://$F/f1.sock" >"$F/force1.log" 2>&1
echo "force cublas:nw=4: exit $?"
grep -m2 "PROJD_FORCE_ENGINE" "$F/force1.log"
PROJD_FORCE_ENGINE=gemvz:pipe=6 pj_daemon_start force2 "$F/f2.sock" --config "$F/cuda.json" \
    --model "$F/small.safetensors" && pj_daemon_stop
echo "force gemvz:pipe=6: $(grep -c 'forced gemvz refused' "$F/force2.log") refusals"
grep -m3 "forced gemvz refused" "$F/force2.log"
echo "MPS warning (started without MPS): $(grep -c 'no MPS control daemon' "$F/force2.log")"
grep -m1 "no MPS control daemon" "$F/force2.log"
cp "$F"/force*.log "$OUT/"
grep -E "^(P|L): " /tmp/backend/gpu-tests.log | head -12
grep -E "check_config|test_cuda_backend:|test_cuda_ipc:|test_engines:|GPU suites" /tmp/backend/gpu-tests.log | head -10
echo "== bench"
grep -hE "^SCORE|^load|decode|verify" "$OUT"/final/bench-*.log | head -20
