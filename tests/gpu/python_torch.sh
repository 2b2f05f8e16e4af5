#!/usr/bin/env bash
# python_torch.sh — a GPU suite: the Python binding's CUDA IPC path and the
# SGLang linear method (client/python/projd_sglang.py) with torch tensors,
# against projd on the cuda backend (two daemons, the small generated model;
# the second with small limits; a third of the tests' own, killed and
# started again), checked by
# tests/python/test_torch_gpu.py against a float64 reference of the model
# file. Exit 77 (skipped) where there is no GPU, no python3 or no torch
# with CUDA; the daemons must then drain and exit 0 on SIGTERM.
# Usage: tests/gpu/python_torch.sh BUILD_DIR
set -u
build=${1:-build}
bin=$build/bin
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/daemons.sh
. "$here/../daemons.sh"
pjd_torch_gpu python_torch "$build"

pjd_setup python_torch

pjd_mkmodel small 3
# start_daemon NAME EXTRA_JSON: projd (cuda) on ipc://$tmp/NAME.sock, up within 60 s.
start_daemon() {
    pjd_start "$1" "{ \"device\": { \"backend\": \"cuda\" }, \"log\": { \"level\": \"warn\" }$2 }" 60
}
start_daemon main ''
start_daemon small ', "shapes": { "m": [1, 8, 16, 32], "max_m": 40 }, "limits": { "max_ops_per_request": 2, "max_buffers_per_conn": 10 }'

rc=0
timeout --kill-after=10 300 env PYTHONDONTWRITEBYTECODE=1 PROJD_LIB="$lib" \
    PROJD_TEST_URL="ipc://$tmp/main.sock" PROJD_TEST_SMALL_URL="ipc://$tmp/small.sock" \
    PROJD_TEST_MODEL="$model" PROJD_TEST_PROJD="$bin/projd" \
    "$py" "$here/../python/test_torch_gpu.py" -v || rc=$?
echo "python_torch: test_torch_gpu.py exit $rc"

# Both daemons saw nothing wrong: SIGTERM drains them, exit 0.
pjd_stop_all || rc=1
[ "$rc" -eq 0 ] && echo "python_torch: ok"
exit "$rc"
