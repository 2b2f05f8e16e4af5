#!/usr/bin/env bash
# e2e_hardened.sh — projd under the file-system hardening of
# deploy/projd@.service, without systemd: what the unit's settings take away
# is taken away in a mount namespace of its own (unshare), read from the
# unit file itself, so that a write projd starts to need outside the unit's
# ReadWritePaths= shows here and not on a GPU node:
#   - ProtectSystem=strict: every mount but /dev, /proc and /sys read-only;
#   - ProtectHome=yes: /home, /root and /run/user empty and read-only;
#   - ProtectKernelTunables=yes, ProtectControlGroups=yes: /proc/sys, /sys
#     and /sys/fs/cgroup read-only;
#   - RuntimeDirectory=, StateDirectory=, ReadWritePaths=: the only writable
#     folders beside /dev (each a folder of the test's, bound there);
#   - NoNewPrivileges=yes (setpriv), LimitMEMLOCK= and LimitNOFILE= (where
#     the machine's hard limits allow; said when not), the unit's
#     Environment= (%i = 0) and its ExecStart's --socket.
# The settings a seccomp filter or a namespace enforces (LockPersonality=,
# RestrictRealtime=, RestrictNamespaces=, SystemCallArchitectures=,
# ProtectHostname=, RestrictSUIDSGID=) are listed, not applied: CUDA makes
# none of those calls. The sandbox is checked before projd runs in it (a
# file under /usr cannot be made, /root reads empty).
# Checked: projd starts and serves, a projection through the unit's socket
# path is bit-exact (projctl --check: shared-memory buffers in /dev/shm),
# projd's log has no read-only or permission failure, and SIGTERM ends it
# with exit 0 and its socket gone.
# On the GPU host: PJ_HARDENED_BACKEND=cuda (default cpu),
# PJ_HARDENED_MODEL=a model file (default the small generated one),
# PJ_HARDENED_LAYER (default the model's first layer). Needs root,
# unshare(1) with mount namespaces and setpriv(1): exit 77 (skipped)
# without them.
# Usage: tests/e2e_hardened.sh BUILD_DIR (shellcheck -x: it sources daemons.sh)
set -u
unset PROJD_SOCKET PROJD_MODEL PROJD_BACKEND
build=${1:-build}
bin=$build/bin
src=$(cd "$(dirname "$0")/.." && pwd)
unit=$src/deploy/projd@.service
backend=${PJ_HARDENED_BACKEND:-cpu}
for f in "$bin/projd" "$bin/projctl" "$unit"; do
    if [ ! -e "$f" ]; then
        echo "e2e_hardened: FAIL: $f is missing (build first: make BUILD=$build)" >&2
        exit 1
    fi
done
skip() {
    echo "e2e_hardened: skipped: $*"
    exit 77
}
[ "$(id -u)" = 0 ] || skip "not root (a mount namespace needs it)"
for c in unshare setpriv; do
    command -v "$c" >/dev/null || skip "no $c"
done
unshare --mount --propagation private true 2>/dev/null || skip "unshare --mount is not allowed here"

# shellcheck source=tests/daemons.sh
. "$(dirname "$0")/daemons.sh"
pjd_setup e2e_hardened
made_dirs=()
daemon=
# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {
    if [ -n "$daemon" ]; then
        kill -KILL "$daemon" 2>/dev/null
        wait "$daemon" 2>/dev/null
    fi
    local d
    for d in "${made_dirs[@]}"; do rmdir "$d" 2>/dev/null; done
    pjd_cleanup
}
trap cleanup EXIT

# The unit's [Service] settings, KEY=VALUE, the last of each key.
declare -A set_in_unit=()
envs=()
in_service=0
while IFS= read -r line; do
    case $line in
    '[Service]') in_service=1 ;;
    '['*) in_service=0 ;;
    '#'* | '') ;;
    *=*)
        [ "$in_service" = 1 ] || continue
        key=${line%%=*}
        val=${line#*=}
        if [ "$key" = Environment ]; then
            envs+=("${val//%i/0}")
        else
            set_in_unit[$key]=$val
        fi
        ;;
    esac
done <"$unit"
setting() { printf '%s' "${set_in_unit[$1]:-}"; }

applied=()
not_applied=()
for k in LockPersonality RestrictRealtime RestrictNamespaces SystemCallArchitectures \
    ProtectHostname RestrictSUIDSGID ProtectClock PrivateDevices DevicePolicy PrivateIPC \
    PrivateTmp MemoryDenyWriteExecute SystemCallFilter; do
    [ -n "$(setting "$k")" ] && not_applied+=("$k=$(setting "$k")")
done
case $(setting ProtectSystem) in strict) applied+=(ProtectSystem=strict) ;; "") ;;
*) echo "e2e_hardened: FAIL: ProtectSystem=$(setting ProtectSystem) is not emulated here" >&2; exit 1 ;;
esac

# The folders the unit makes writable, each bound to one of the test's.
rw=()
[ -n "$(setting RuntimeDirectory)" ] && rw+=("/run/$(setting RuntimeDirectory)")
[ -n "$(setting StateDirectory)" ] && rw+=("/var/lib/$(setting StateDirectory)")
for p in $(setting ReadWritePaths); do
    p=${p#-}
    case " ${rw[*]} " in *" $p "*) ;; *) rw+=("$p") ;; esac
done
binds=()
for p in "${rw[@]}"; do
    if [ ! -d "$p" ]; then
        mkdir -p "$p" || { echo "e2e_hardened: FAIL: cannot make $p" >&2; exit 1; }
        made_dirs+=("$p")
    fi
    own=$tmp/rw$(echo "$p" | tr / _)
    mkdir -p "$own"
    binds+=("$own:$p")
done

# The unit's ExecStart, with the build's projd and the test's config.
exec_start=$(setting ExecStart)
sock=$(sed -n 's/.*--socket \([^ ]*\).*/\1/p' <<<"$exec_start")
sock=${sock//%i/0}
[ -n "$sock" ] || { echo "e2e_hardened: FAIL: no --socket in the unit's ExecStart ($exec_start)" >&2; exit 1; }
outside_sock=
for b in "${binds[@]}"; do
    case $sock in "${b#*:}"/*) outside_sock=${b%%:*}/${sock#"${b#*:}"/} ;; esac
done
[ -n "$outside_sock" ] || {
    echo "e2e_hardened: FAIL: the unit's socket $sock is in none of its writable folders (${rw[*]})" >&2
    exit 1
}

# What projd reads lives in the test's folder (under ProtectHome= a build in
# /root or /home could not be read at all: deploy/projd@.service says so).
mkdir -p "$tmp/opt/bin"
cp "$bin/projd" "$tmp/opt/bin/"
[ -d "$build/lib" ] && cp -a "$build/lib" "$tmp/opt/"
case $tmp in /home/* | /root/* | /run/user/*)
    echo "e2e_hardened: FAIL: the temporary folder $tmp is under ProtectHome=" >&2; exit 1 ;;
esac
if [ -n "${PJ_HARDENED_MODEL:-}" ]; then
    cp "$PJ_HARDENED_MODEL" "$tmp/opt/model.safetensors" || exit 1
else
    pjd_mkmodel small 1
    mv "$model" "$tmp/opt/model.safetensors"
fi
model=$tmp/opt/model.safetensors
layer=${PJ_HARDENED_LAYER:-$(PROJD_BACKEND=cpu "$bin/projctl" inspect "$model" --json 2>/dev/null |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["layers"][0]["name"])' 2>/dev/null)}
[ -n "$layer" ] || { echo "e2e_hardened: FAIL: no layer name from projctl inspect $model" >&2; exit 1; }
# The tables (cuda) too: $PROJD_TUNING_DIR's copy.
if [ -n "${PROJD_TUNING_DIR:-}" ]; then
    cp -a "$PROJD_TUNING_DIR" "$tmp/opt/tuning" || exit 1
    export PROJD_TUNING_DIR=$tmp/opt/tuning
fi
cat >"$tmp/opt/projd.json" <<EOF
{ "device": { "backend": "$backend" }, "model": { "path": "$model" },
  "log": { "level": "info" } }
EOF

# The namespace's side: the mounts, checked, then projd as the unit runs it.
cat >"$tmp/inner.sh" <<'EOF'
#!/bin/bash
# inner.sh TMP SOCK PROTECT_HOME KERNEL_TUNABLES CGROUPS NNP MEMLOCK NOFILE -- BIND... -- ENV...
set -u
tmp=$1 sock=$2 home=$3 tunables=$4 cgroups=$5 nnp=$6 memlock=$7 nofile=$8
shift 8
[ "$1" = -- ] && shift
keep=(/dev /proc /sys)
while [ $# -gt 0 ] && [ "$1" != -- ]; do
    mount --bind "${1%%:*}" "${1#*:}" || exit 90
    keep+=("${1#*:}")
    shift
done
[ "${1:-}" = -- ] && shift
# ProtectSystem=strict: every other mount read-only, the deepest first.
awk '{print $5}' /proc/self/mountinfo | sort -r | while read -r mp; do
    mp=$(printf '%b' "$mp")
    skip=0
    for k in "${keep[@]}"; do
        case $mp in "$k" | "$k"/*) skip=1 ;; esac
    done
    [ "$skip" = 1 ] || mount -o remount,bind,ro "$mp" 2>/dev/null
done
if [ "$home" = yes ]; then
    for d in /home /root /run/user; do
        [ -d "$d" ] && { mount -t tmpfs -o ro,mode=0755 tmpfs "$d" || exit 91; }
    done
fi
if [ "$tunables" = yes ]; then
    mount --bind /proc/sys /proc/sys && mount -o remount,bind,ro /proc/sys || exit 92
    mount -o remount,bind,ro /sys || exit 92
fi
if [ "$cgroups" = yes ] && mountpoint -q /sys/fs/cgroup; then
    mount -o remount,bind,ro /sys/fs/cgroup || exit 93
fi
# The sandbox holds: nothing can be made under /usr, /root reads empty.
if touch /usr/.e2e_hardened_probe 2>/dev/null; then
    rm -f /usr/.e2e_hardened_probe
    echo "inner: /usr is still writable" >&2
    exit 94
fi
if [ "$home" = yes ] && [ -n "$(ls -A /root 2>/dev/null)" ]; then
    echo "inner: /root still shows its files" >&2
    exit 95
fi
echo "inner: sandbox ready"
env=()
for e in "$@"; do env+=("$e"); done
# The unit's limits, where this machine's hard limits let root set them
# (a container may not): said either way.
if [ -n "$memlock" ]; then
    v=$([ "$memlock" = infinity ] && echo unlimited || echo "$memlock")
    ulimit -l "$v" 2>/dev/null || echo "inner: LimitMEMLOCK=$memlock not applied: the hard limit here is $(ulimit -Hl)"
fi
if [ -n "$nofile" ]; then
    ulimit -n "$nofile" 2>/dev/null || echo "inner: LimitNOFILE=$nofile not applied: the hard limit here is $(ulimit -Hn)"
fi
pre=()
[ "$nnp" = yes ] && pre+=(setpriv --no-new-privs)
exec env "${env[@]}" "${pre[@]}" "$tmp/opt/bin/projd" --config "$tmp/opt/projd.json" --socket "$sock"
EOF
chmod +x "$tmp/inner.sh"
for k in ProtectHome ProtectKernelTunables ProtectControlGroups NoNewPrivileges LimitMEMLOCK LimitNOFILE; do
    [ -n "$(setting "$k")" ] && applied+=("$k=$(setting "$k")")
done
[ "${#rw[@]}" -gt 0 ] && applied+=("writable: ${rw[*]}")
echo "e2e_hardened: applied: ${applied[*]}"
echo "e2e_hardened: not applied (seccomp or namespaces): ${not_applied[*]:-none}"
echo "e2e_hardened: backend $backend, model $(basename "$model"), layer $layer, socket $sock"

cases=0
failures=0
unshare --mount --propagation private "$tmp/inner.sh" "$tmp" "$sock" "$(setting ProtectHome)" \
    "$(setting ProtectKernelTunables)" "$(setting ProtectControlGroups)" "$(setting NoNewPrivileges)" \
    "$(setting LimitMEMLOCK)" "$(setting LimitNOFILE)" -- "${binds[@]}" -- "${envs[@]}" \
    >"$tmp/projd.log" 2>&1 &
daemon=$!
up=0
for _ in $(seq 600); do
    if "$bin/projctl" --socket "ipc://$outside_sock" status >/dev/null 2>&1; then
        up=1
        break
    fi
    kill -0 "$daemon" 2>/dev/null || break
    sleep 0.2
done
grep '^inner: ' "$tmp/projd.log" | sed 's/^inner: /e2e_hardened: /'
if [ "$up" = 1 ]; then
    ok "projd serves under the unit's hardening ($backend)"
else
    wait "$daemon"
    rc=$?
    daemon=
    # 90-95: inner.sh could not build the sandbox (a container's limits),
    # which says nothing of projd.
    if [ "$rc" -ge 90 ] && [ "$rc" -le 95 ]; then
        skip "the sandbox could not be set up here (inner.sh exit $rc: $(tr '\n' ' ' <"$tmp/projd.log"))"
    fi
    not_ok "projd did not come up under the unit's hardening (exit $rc); its output:"
    sed 's/^/    /' "$tmp/projd.log"
    echo "e2e_hardened: $failures of $cases failed"
    exit 1
fi
if "$bin/projctl" --socket "ipc://$outside_sock" project --layer "$layer" --m 16 --check \
    --model "$model" >"$tmp/check.out" 2>&1 && grep -q '^OK' "$tmp/check.out"; then
    ok "a projection through $sock is bit-exact ($(grep -o 'mismatches [0-9]*' "$tmp/check.out" | head -1))"
else
    not_ok "the projection through $sock:"
    sed 's/^/    /' "$tmp/check.out"
fi
if grep -Eiq 'read-only file system|permission denied|EROFS|EACCES' "$tmp/projd.log"; then
    not_ok "projd's log names a read-only or permission failure:"
    grep -Ei 'read-only file system|permission denied|EROFS|EACCES' "$tmp/projd.log" | sed 's/^/    /'
else
    ok "no read-only or permission failure in projd's log"
fi
kill -TERM "$daemon"
wait "$daemon"
rc=$?
daemon=
if [ "$rc" = 0 ] && [ ! -e "$outside_sock" ]; then
    ok "SIGTERM: exit 0, the socket gone"
else
    not_ok "SIGTERM: exit $rc, socket $([ -e "$outside_sock" ] && echo left || echo gone)"
    tail -20 "$tmp/projd.log" | sed 's/^/    /'
fi
if [ "$failures" = 0 ]; then
    echo "e2e_hardened: all passed ($cases)"
    exit 0
fi
echo "e2e_hardened: $failures of $cases failed"
exit 1
