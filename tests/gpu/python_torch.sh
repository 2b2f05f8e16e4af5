#!/usr/bin/env bash
# python_torch.sh — a GPU suite: the Python binding's CUDA IPC path and the
# SGLang linear method (client/python/projd_sglang.py) with torch tensors,
# against projd on the cuda backend (the small generated model), checked by
# tests/python/test_torch_gpu.py against a float64 reference of the model
# file. Exit 77 (skipped) where there is no GPU, no python3 or no torch
# with CUDA; the daemon must then drain and exit 0 on SIGTERM.
# Usage: tests/gpu/python_torch.sh BUILD_DIR
set -u
build=${1:-build}
bin=$build/bin
here=$(cd "$(dirname "$0")" && pwd)
lib=
for f in "$build"/lib/libprojd.so*; do
    [ -e "$f" ] && lib=$f && break
done
for f in "$bin/projd" "$bin/projctl" "$lib"; do
    if [ -z "$f" ] || [ ! -e "$f" ]; then
        echo "python_torch: FAIL: ${f:-libprojd.so} is missing under $build" >&2
        exit 1
    fi
done
py=$(command -v python3 || true)
if [ -z "$py" ] || ! "$py" -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
    echo "python_torch: no python3 with torch and a CUDA device here: skipped"
    exit 77
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/python_torch.XXXXXX")
pid=
# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        kill -KILL "$pid" 2>/dev/null
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT

model=$tmp/small.safetensors
if ! "$bin/projctl" mkmodel --preset small --seed 3 --out "$model" >/dev/null; then
    echo "python_torch: FAIL: projctl mkmodel" >&2
    exit 1
fi
printf '{ "device": { "backend": "cuda" }, "log": { "level": "warn" } }\n' >"$tmp/projd.json"
"$bin/projd" --config "$tmp/projd.json" --model "$model" --socket "ipc://$tmp/projd.sock" \
    2>"$tmp/projd.log" &
pid=$!
up=0
for _ in $(seq 300); do
    if "$bin/projctl" --socket "ipc://$tmp/projd.sock" status >/dev/null 2>&1; then
        up=1
        break
    fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
done
if [ "$up" -ne 1 ]; then
    echo "python_torch: FAIL: projd (cuda) did not come up within 60 s" >&2
    cat "$tmp/projd.log" >&2
    exit 1
fi

rc=0
timeout --kill-after=10 300 env PYTHONDONTWRITEBYTECODE=1 PROJD_LIB="$lib" \
    PROJD_TEST_URL="ipc://$tmp/projd.sock" PROJD_TEST_MODEL="$model" \
    "$py" "$here/../python/test_torch_gpu.py" -v || rc=$?
echo "python_torch: test_torch_gpu.py exit $rc"

kill -TERM "$pid"
code=0
wait "$pid" || code=$?
pid=
if [ "$code" -ne 0 ]; then
    echo "python_torch: FAIL: projd exited $code after SIGTERM" >&2
    cat "$tmp/projd.log" >&2
    rc=1
fi
[ "$rc" -eq 0 ] && echo "python_torch: ok"
exit "$rc"
