#!/usr/bin/env bash
# `make run`: generate the demo model if absent, start projd with the embedded
# default config, show it serving with projctl, then keep serving in the
# foreground until Ctrl-C (which drains and stops the daemon).
set -euo pipefail
build=${1:-build}
bin=$build/bin
model=${PROJD_MODEL:-$build/models/reference.safetensors}
if [ ! -f "$model" ]; then
    echo "run: generating the reference model at $model (about 190 MB, once)"
    mkdir -p "$(dirname "$model")"
    "$bin/projctl" mkmodel --preset reference --out "$model"
fi
"$bin/projctl" inspect "$model"

args=(--model "$model")
[ -n "${PROJD_SOCKET:-}" ] && args+=(--socket "$PROJD_SOCKET")
[ -n "${PROJD_BACKEND:-}" ] && args+=(--backend "$PROJD_BACKEND")
# projctl is given the very socket this projd will listen on (as projd
# resolves it): left to its own search it would find a projd@N unit's
# socket on a GPU node, refuse to start the demo beside it, or show that
# daemon in the checks below. Where projd cannot say (a bad option), it is
# started anyway, to say why itself.
ctl=("$bin/projctl")
if url=$("$bin/projd" "${args[@]}" --print-config 2>/dev/null |
    sed -n 's/^[[:space:]]*"url":[[:space:]]*"\(.*\)",\{0,1\}$/\1/p' | head -n 1) &&
    [ -n "$url" ]; then
    ctl+=(--socket "$url")
elif [ -n "${PROJD_SOCKET:-}" ]; then
    ctl+=(--socket "$PROJD_SOCKET")
fi
# A daemon that answers there already is not this one: the checks below
# would show it (and fail on its model) while this one is refused.
if "${ctl[@]}" --timeout 1000 status >/dev/null 2>&1; then
    echo "run: a projd already answers on that socket (\`${ctl[*]} status\`); stop it, or set" \
        "PROJD_SOCKET to another path" >&2
    exit 1
fi
echo "run: starting $bin/projd ${args[*]}"
"$bin/projd" "${args[@]}" &
pid=$!
stop() {
    echo
    echo "run: stopping projd (SIGTERM drains in-flight work)"
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    exit 0
}
trap stop INT TERM
# Any other way out (a failed check below, set -e) must not leave the
# daemon running in the background.
leave() {
    if kill -0 "$pid" 2>/dev/null; then
        echo "run: a step failed; stopping projd" >&2
        kill -TERM "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    fi
}
trap leave EXIT

# Loading and converting the reference model takes a few seconds.
for _ in $(seq 1 120); do
    if ! kill -0 "$pid" 2>/dev/null; then
        rc=0
        wait "$pid" || rc=$?
        echo "run: projd exited before it was ready (exit status $rc; its log is above)" >&2
        exit 1
    fi
    if "${ctl[@]}" --timeout 1000 status >/dev/null 2>&1; then break; fi
    sleep 0.5
done
"${ctl[@]}" status
"${ctl[@]}" layers
"${ctl[@]}" project --layer o --m 8 --check --model "$model"
"${ctl[@]}" project --layer router --m 1 --check --model "$model"
echo
echo "run: projd is serving (pid $pid). In another shell try:"
echo "  ${ctl[*]} stats"
echo "  ${ctl[*]} project --layer qkv_gate --m 16 --check --model $model"
echo "run: Ctrl-C stops it."
wait "$pid"
