#!/usr/bin/env bash
# `make bench-ipc`: round-trip latency of PING and of a tiny projection on
# the cpu backend, over nng and over the shared-memory ring, in the same run
# (alternating blocks). Starts its own daemon on the small generated model and
# a private socket, prints projctl's table, stops the daemon. A benchmark, not
# a test: nothing here asserts a time.
#
# Usage: bench/bench-ipc.sh [BUILD] [COUNT] [JSON]   (JSON: where the numbers go)
set -euo pipefail
build=${1:-build}
count=${2:-2000}
dir=$(mktemp -d /tmp/projd-bench-ipc.XXXXXX)
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
"$build/bin/projctl" mkmodel --preset small --out "$dir/small.safetensors" >/dev/null
sock="ipc://$dir/projd.sock"
"$build/bin/projd" --model "$dir/small.safetensors" --socket "$sock" --backend cpu \
    --log-level warn &
pid=$!
for _ in $(seq 1 100); do
    "$build/bin/projctl" --socket "$sock" --timeout 500 status >/dev/null 2>&1 && break
    sleep 0.1
done
echo "projd cpu backend, small model, $(nproc) cores, $count round trips each"
timeout 300 "$build/bin/projctl" --socket "$sock" bench-ipc --count "$count" ${3:+--out "$3"}
