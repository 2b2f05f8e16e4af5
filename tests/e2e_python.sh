#!/usr/bin/env bash
# e2e_python.sh — the Python binding (client/python/projd.py) against real
# daemons: two projd on sockets in a temporary directory (cpu backend, the
# small generated model), one at full speed and one holding every op for
# 300 ms (cpu.min_op_us, for requests that must still be in flight), then
# tests/python/test_projd.py (stdlib unittest): info against `projctl
# layers`, ping, stats, every layer at several m bit for bit against a
# pure-Python reference of the model file, offsets and strides, error codes,
# buffers, close, asynchronous requests, the C struct layouts. Both daemons
# must then drain and exit 0.
# python3 is required (3.9+): without it the suite fails, it does not skip.
# Usage: tests/e2e_python.sh BUILD_DIR
set -u
build=${1:-build}
bin=$build/bin
lib=$build/lib/libprojd.so
for f in "$bin/projd" "$bin/projctl" "$lib"; do
    if [ ! -e "$f" ]; then
        echo "e2e_python: FAIL: $f is missing (build first: make BUILD=$build)" >&2
        exit 1
    fi
done
py=$(command -v python3 || true)
if [ -z "$py" ]; then
    echo "e2e_python: FAIL: python3 not found; the Python binding's suite needs it" \
        "(deploy/install-deps.sh installs it: apt-get install python3)" >&2
    exit 1
fi
if ! "$py" -c 'import sys; sys.exit(sys.version_info < (3, 9))'; then
    echo "e2e_python: FAIL: $("$py" --version 2>&1) is too old; the binding needs Python 3.9+" >&2
    exit 1
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/e2e_python.XXXXXX")
pids=()
names=()
cleanup() {
    local p
    for p in "${pids[@]}"; do
        if kill -0 "$p" 2>/dev/null; then
            kill -TERM "$p" 2>/dev/null
            for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
            kill -KILL "$p" 2>/dev/null
        fi
    done
    rm -rf "$tmp"
}
trap cleanup EXIT

model=$tmp/small.safetensors
if ! "$bin/projctl" mkmodel --preset small --seed 1 --out "$model" >/dev/null; then
    echo "e2e_python: FAIL: projctl mkmodel" >&2
    exit 1
fi

# start_daemon NAME CPU_JSON: projd on ipc://$tmp/NAME.sock, up within 30 s.
start_daemon() {
    local name=$1 cpu=$2
    printf '{ "device": { "backend": "cpu" }, "cpu": %s, "log": { "level": "warn" } }\n' "$cpu" \
        >"$tmp/$name.json"
    "$bin/projd" --config "$tmp/$name.json" --model "$model" --socket "ipc://$tmp/$name.sock" \
        2>"$tmp/$name.log" &
    local pid=$!
    pids+=("$pid")
    names+=("$name")
    for _ in $(seq 150); do
        if "$bin/projctl" --socket "ipc://$tmp/$name.sock" status >/dev/null 2>&1; then
            return 0
        fi
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.2
    done
    echo "e2e_python: FAIL: projd ($name) did not come up within 30 s" >&2
    cat "$tmp/$name.log" >&2
    exit 1
}
start_daemon main '{ "threads": 2 }'
start_daemon slow '{ "threads": 1, "min_op_us": 300000 }'
if ! "$bin/projctl" --socket "ipc://$tmp/main.sock" layers >"$tmp/layers.txt"; then
    echo "e2e_python: FAIL: projctl layers" >&2
    exit 1
fi

# A sanitizer build's libprojd needs its runtime loaded first, and the
# interpreter's own allocations are not ours to judge.
cc=${CC:-gcc}
[ "$cc" = cc ] && cc=gcc
envs=()
if readelf -d "$lib" 2>/dev/null | grep -q 'libasan'; then
    envs+=("LD_PRELOAD=$("$cc" -print-file-name=libasan.so)" "ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}")
fi

start=$SECONDS
rc=0
timeout --kill-after=10 240 env "${envs[@]}" \
    PYTHONDONTWRITEBYTECODE=1 \
    PROJD_LIB="$lib" \
    PROJD_TEST_URL="ipc://$tmp/main.sock" \
    PROJD_TEST_SLOW_URL="ipc://$tmp/slow.sock" \
    PROJD_TEST_MODEL="$model" \
    PROJD_TEST_LAYERS="$tmp/layers.txt" \
    PROJD_TEST_CC="$cc" \
    "$py" tests/python/test_projd.py -v || rc=$?
echo "e2e_python: test_projd.py exit $rc ($((SECONDS - start)) s)"

# Both daemons saw nothing wrong: SIGTERM drains them, exit 0.
failures=0
[ "$rc" -eq 0 ] || failures=$((failures + 1))
for i in "${!pids[@]}"; do
    p=${pids[$i]}
    name=${names[$i]}
    if ! kill -0 "$p" 2>/dev/null; then
        echo "e2e_python: FAIL: projd ($name) died during the tests" >&2
        cat "$tmp/$name.log" >&2
        failures=$((failures + 1))
        continue
    fi
    kill -TERM "$p"
    code=0
    wait "$p" || code=$?
    if [ "$code" -ne 0 ]; then
        echo "e2e_python: FAIL: projd ($name) exited $code after SIGTERM" >&2
        cat "$tmp/$name.log" >&2
        failures=$((failures + 1))
    fi
done
pids=()
if [ "$failures" -ne 0 ]; then
    echo "e2e_python: FAIL ($failures failures)"
    exit 1
fi
echo "e2e_python: all passed"
