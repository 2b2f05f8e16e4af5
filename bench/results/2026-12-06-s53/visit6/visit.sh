#!/usr/bin/env bash
# Session 53, visit 6: the GPU check of the session's last host changes, in
# the device time left (under 300 s with the start): test_cuda_backend and
# test_cuda_ipc (the daemon's cuda backend end to end; libprojd's
# send-callback hold, 53353fd, and ring_unsure, 0f44210), then a daemon on
# the reference model with the GPU's committed table, to show the warm-up's
# new notes of entries passed over between the shapes (1928397) and the
# open-files line (c3eb363) if any.
. bench/visit-common.sh
table=$(bash bench/gpu-table.sh)
export PROJD_TUNING_DIR=$PWD/config/tuning PJ_TUNE_TABLE=$PWD/$table PJ_BUILD=$B
# Under MPS, as bench/run-backend-device.sh runs the suites.
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpslog
mkdir -p /tmp/mps /tmp/mpslog
if timeout 20 nvidia-cuda-mps-control -d; then
    trap 'echo quit | timeout 20 nvidia-cuda-mps-control >/dev/null 2>&1' EXIT
else
    unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
fi
for t in test_cuda_backend test_cuda_ipc; do
    timeout 150 "$B/tests/gpu/$t" >"$OUT/$t.log" 2>&1
    echo "$t rc=$? $(grep -E 'checks passed|FAIL' "$OUT/$t.log" | tail -3)"
done
pj_served_config || { echo "visit: no served config"; exit 1; }
if pj_daemon_start ref /tmp/pj-ref.sock --config "$F/ref.json"; then
    pj_daemon_stop
fi
cp "$F/ref.log" "$OUT/daemon-ref.log"
grep -E "between the graphs|open files|tuning table|: forced|table entry" "$F/ref.log" | cut -c1-240 | head -20
