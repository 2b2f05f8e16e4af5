#!/usr/bin/env bash
# sglang-apply.sh — time the SGLang linear method's apply() end to end
# (bench/sglang_apply.py) against a projd on the cuda backend serving the
# small generated model: what the client and the round trip cost, not the
# kernels. On the GPU host, from the repository root.
# PRESET=reference serves the reference model instead (apply() on
# qkv_gate, 4608 x 4096: the daemon's GPU work as in decode).
# With MPS=1 the daemon and the client run under an MPS control daemon of
# their own, as deployed (without it their kernels time-slice the GPU).
# RING_SPIN_US=N sets the daemon's ring.spin_us (how long its ring poller,
# its loop and the clients' reapers spin before they sleep; 50 by default).
# Usage: bench/sglang-apply.sh BUILD_DIR DIR_A [DIR_B] [-- sglang_apply.py options]
#   DIR_B defaults to none; e.g. DIR_A the committed module (git show into
#   a folder), DIR_B client/python, for an A/B of a change.
set -u
build=${1:?usage: bench/sglang-apply.sh BUILD_DIR DIR_A [DIR_B] [-- options]}
shift
bin=$build/bin
here=$(cd "$(dirname "$0")" && pwd)
lib=$build/lib/libprojd.so
dirs=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do dirs+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
# shellcheck source=tests/daemons.sh
. "$here/../tests/daemons.sh"
pjd_setup sglang-apply
if [ "${MPS:-0}" = 1 ]; then
    mps=$(mktemp -d "${TMPDIR:-/tmp}/sglang-apply-mps.XXXXXX")
    export CUDA_MPS_PIPE_DIRECTORY=$mps/pipe CUDA_MPS_LOG_DIRECTORY=$mps/log
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    # the daemons first (pjd_cleanup), then the MPS server they used
    trap 'pjd_cleanup; echo quit | timeout 20 nvidia-cuda-mps-control >/dev/null 2>&1; rm -rf "$mps"' EXIT
    timeout 20 nvidia-cuda-mps-control -d || { echo "sglang-apply: MPS did not start" >&2; exit 1; }
    echo "sglang-apply: under MPS"
fi
pjd_mkmodel "${PRESET:-small}" 3
ring=
if [ -n "${RING_SPIN_US:-}" ]; then
    case $RING_SPIN_US in
        '' | *[!0-9]*) echo "sglang-apply: RING_SPIN_US must be a number of µs" >&2; exit 2 ;;
    esac
    ring=", \"ring\": { \"spin_us\": $RING_SPIN_US }"
fi
pjd_start main "{ \"device\": { \"backend\": \"cuda\" }, \"log\": { \"level\": \"warn\" }$ring }" 60
rc=0
timeout --kill-after=10 300 env PYTHONDONTWRITEBYTECODE=1 PROJD_LIB="$lib" \
    python3 "$here/sglang_apply.py" "ipc://$tmp/main.sock" "${dirs[@]}" "$@" || rc=$?
pjd_stop_all || rc=1
exit "$rc"
