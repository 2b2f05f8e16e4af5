#!/usr/bin/env bash
# e2e_python.sh — the Python binding (client/python/projd.py) against real
# daemons: three projd on sockets in a temporary directory (cpu backend, the
# small generated model), one at full speed, one holding every op for
# 300 ms (cpu.min_op_us, for requests that must still be in flight) and one
# serving 300 layers (more than pj_welcome holds inline), then
# tests/python/test_projd.py (stdlib unittest): info against `projctl
# layers`, ping, stats, every layer at several m bit for bit against a
# pure-Python reference of the model file, offsets and strides, error codes,
# buffers, close, asynchronous requests, the C struct layouts. The daemons
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

# shellcheck source=tests/daemons.sh
. "$(dirname "$0")/daemons.sh"
pjd_skip_under_tsan e2e_python "$build/lib/libprojd.so" \
    "Python cannot load a TSan libprojd (static TLS)"
pjd_setup e2e_python

pjd_mkmodel small 1

# start_daemon NAME CPU_JSON: projd (cpu) on ipc://$tmp/NAME.sock, up within 30 s.
start_daemon() {
    pjd_start "$1" "{ \"device\": { \"backend\": \"cpu\" }, \"cpu\": $2, \"log\": { \"level\": \"warn\" } }" 30
}
start_daemon main '{ "threads": 2 }'
start_daemon slow '{ "threads": 1, "min_op_us": 300000 }'
# A whole model's worth of layers, named as SGLang names them: 300 of
# them, each the small model's o or router tensor again (ManyLayersTests).
many_json=$("$py" -c '
import json
layers = [{"name": "model.layers.%d.proj" % i, "tensor": ("o", "router")[i % 2] + ".weight",
           "format": ("auto", "split")[i % 2]} for i in range(300)]
print(json.dumps({"device": {"backend": "cpu"}, "cpu": {"threads": 2}, "log": {"level": "warn"},
                  "model": {"layers": layers}}))')
pjd_start many "$many_json" 30
if ! "$bin/projctl" --socket "ipc://$tmp/main.sock" layers >"$tmp/layers.txt"; then
    echo "e2e_python: FAIL: projctl layers" >&2
    exit 1
fi

# A sanitizer build's libprojd needs its runtime loaded first.
pjd_asan_env "$lib"
cc=${CC:-gcc}
[ "$cc" = cc ] && cc=gcc

start=$SECONDS
rc=0
timeout --kill-after=10 240 env "${asan_env[@]}" \
    PYTHONDONTWRITEBYTECODE=1 \
    PROJD_LIB="$lib" \
    PROJD_TEST_URL="ipc://$tmp/main.sock" \
    PROJD_TEST_SLOW_URL="ipc://$tmp/slow.sock" \
    PROJD_TEST_MANY_URL="ipc://$tmp/many.sock" \
    PROJD_TEST_MODEL="$model" \
    PROJD_TEST_LAYERS="$tmp/layers.txt" \
    PROJD_TEST_CC="$cc" \
    PROJD_TEST_PROJD="$bin/projd" \
    "$py" tests/python/test_projd.py -v || rc=$?
echo "e2e_python: test_projd.py exit $rc ($((SECONDS - start)) s)"

# The daemons saw nothing wrong: SIGTERM drains them, exit 0.
failures=0
[ "$rc" -eq 0 ] || failures=$((failures + 1))
pjd_stop_all || failures=$((failures + $?))
if [ "$failures" -ne 0 ]; then
    echo "e2e_python: FAIL ($failures failures)"
    exit 1
fi
echo "e2e_python: all passed"
