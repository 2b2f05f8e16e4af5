#!/usr/bin/env bash
# units.sh — deploy/projd@.service under a real systemd, without a GPU node
# (`make test-systemd`; not part of `make test`: it boots an init).
#
# systemd runs as PID 1 in new mount, PID and UTS namespaces, with /run,
# /tmp and /var/tmp its own (tmpfs), booted to an empty target with the
# units that would act on the host masked: systemd-tmpfiles-setup cleans
# /tmp at boot, and /tmp is the host's unless it is mounted over (a first
# try without the masks emptied this machine's /tmp). The shipped
# projd@.service is used as installed, with a drop-in that points
# ExecStart at the build under test, the cpu backend and a generated model,
# and takes the unit off sysinit.target (masked here). Checked:
#   - projd@0 and projd@1 started together: both active (Type=notify:
#     READY=1), STATUS= "serving", and the second waited for the first's
#     load (their sockets share /run/projd: DAEMON.md, "Loads take turns");
#   - a projection through each socket is bit-exact (projctl --check);
#   - systemctl reload: STATUS= says the reload was applied, and a broken
#     file is refused while the unit stays active;
#   - MemoryMax=150M on projd@2: the start fails (exit 1), STATUS= names
#     the unit's cgroup and its limit (the loader's host memory check);
#   - a bad command line on projd@3 (exit 2): no restart
#     (RestartPreventExitStatus=2), the unit failed;
#   - systemctl stop: exit 0, Result=success, the sockets and their lock
#     files gone.
# Needs root, unshare(1), nsenter(1) and systemd; says SKIPPED otherwise.
# Usage: tests/systemd/units.sh [BUILD]
set -u
build=$(cd "${1:-build}" 2>/dev/null && pwd) || {
    echo "units: no build folder ${1:-build}" >&2
    exit 1
}
src=$(cd "$(dirname "$0")/../.." && pwd)
skip() {
    echo "units: SKIPPED: $*"
    exit 0
}
[ "$(id -u)" = 0 ] || skip "not root"
command -v unshare >/dev/null && command -v nsenter >/dev/null || skip "no unshare/nsenter"
sd=/lib/systemd/systemd
[ -x "$sd" ] || skip "no $sd"
[ -x "$build/bin/projd" ] && [ -x "$build/bin/projctl" ] || {
    echo "units: $build/bin/projd or projctl is missing: build it first" >&2
    exit 1
}
# Everything the namespace reads lives under the build folder: its /tmp is
# not the host's.
work=$(mktemp -d "$build/units.XXXXXX")
# The unit's StateDirectory= makes /var/lib/projd on the host's disk: taken
# away again at the end when it was not there before.
state_was_there=0
[ -e /var/lib/projd ] && state_was_there=1
pid1=
cleanup() {
    if [ -n "$pid1" ]; then
        kill -KILL "$pid1" 2>/dev/null
        for _ in $(seq 50); do kill -0 "$pid1" 2>/dev/null || break; sleep 0.1; done
    fi
    # the cgroups systemd made for the units (empty once PID 1 is gone)
    for d in /sys/fs/cgroup/system.slice/system-projd.slice \
        /sys/fs/cgroup/*/system.slice/system-projd.slice; do
        [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null
    done
    [ "$state_was_there" = 1 ] || rmdir /var/lib/projd 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

# The reference preset (190 MB): more than projd@2's MemoryMax= below.
"$build/bin/projctl" mkmodel --preset reference --out "$work/model.safetensors" >/dev/null ||
    { echo "units: cannot generate the model" >&2; exit 1; }
cat >"$work/projd.json" <<EOF
{ "socket": { "mode": "0660" }, "device": { "backend": "cpu" },
  "model": { "path": "$work/model.safetensors" }, "log": { "level": "info" } }
EOF
cat >"$work/boot.sh" <<EOF
#!/bin/bash
set -e
mount --make-rprivate /
for d in /run /tmp /var/tmp; do mount -t tmpfs tmpfs \$d; done
mkdir -p /run/systemd/system
for u in sysinit.target basic.target local-fs.target remote-fs.target \\
    systemd-tmpfiles-setup.service systemd-tmpfiles-setup-dev.service \\
    systemd-tmpfiles-clean.service systemd-tmpfiles-clean.timer systemd-sysusers.service \\
    systemd-sysctl.service systemd-udev-trigger.service systemd-udevd.service \\
    systemd-remount-fs.service systemd-random-seed.service systemd-machine-id-commit.service \\
    systemd-update-utmp.service systemd-binfmt.service systemd-modules-load.service \\
    systemd-journal-flush.service projd-mps.service; do
    ln -sf /dev/null /run/systemd/system/\$u
done
printf '[Unit]\nDescription=projd units test\nDefaultDependencies=no\n' \\
    >/run/systemd/system/projd-units-test.target
cp "$src/deploy/projd@.service" /run/systemd/system/
mkdir -p /run/systemd/system/projd@.service.d
cat >/run/systemd/system/projd@.service.d/10-test.conf <<'C'
[Unit]
DefaultDependencies=no
[Service]
ExecStart=
ExecStart=$build/bin/projd --config $work/projd.json --socket /run/projd/projd-%i.sock
Environment=PROJD_START_PAUSE_MS=100
StandardOutput=append:$work/projd-%i.log
StandardError=append:$work/projd-%i.log
C
exec $sd --system --unit=projd-units-test.target --log-target=console --log-level=notice
EOF
chmod +x "$work/boot.sh"
setsid unshare --fork --pid --mount --uts --mount-proc "$work/boot.sh" >"$work/systemd.log" 2>&1 &
up=0
for _ in $(seq 100); do
    pid1=$(pgrep -f -- "--unit=projd-units-test.target" | head -1)
    if [ -n "$pid1" ] && [ "$(nsenter -t "$pid1" -m -p systemctl is-system-running 2>/dev/null)" = running ]; then
        up=1
        break
    fi
    sleep 0.2
done
if [ "$up" != 1 ]; then
    cat "$work/systemd.log" >&2
    [ -n "$pid1" ] && skip "systemd did not come up in the namespace (state: $(nsenter -t "$pid1" -m -p systemctl is-system-running 2>&1))"
    skip "systemd did not start in the namespace"
fi
in_ns() { nsenter -t "$pid1" -m -p "$@"; }
show() { in_ns systemctl show -P "$2" "$1"; }
fail=0
check() { # check WHAT COMMAND...: the command must succeed
    local what=$1
    shift
    if "$@"; then echo "units: ok: $what"; else echo "units: FAIL: $what" >&2; fail=1; fi
}

in_ns systemctl start projd@0 projd@1
check "projd@0 and projd@1 active" test "$(show projd@0 ActiveState)/$(show projd@1 ActiveState)" = active/active
check "STATUS= serving" grep -q "^serving" <<<"$(show projd@0 StatusText)"
check "the second start waited for the first's load" \
    grep -qE "waiting for the model load of projd pid [0-9]+ to end" "$work/projd-0.log" "$work/projd-1.log"
for i in 0 1; do
    check "projection through /run/projd/projd-$i.sock bit-exact" bash -c \
        "nsenter -t $pid1 -m -p timeout 60 $build/bin/projctl --socket ipc:///run/projd/projd-$i.sock \
        project --layer qkv_gate --m 16 --check --model $work/model.safetensors | grep -q '^OK'"
done
in_ns systemctl reload projd@0
check "reload applied" grep -q "reload applied" <<<"$(show projd@0 StatusText)"
cp "$work/projd.json" "$work/projd.json.good"
echo '{ "log": ' >"$work/projd.json"
in_ns systemctl reload projd@0
check "a broken file's reload refused, still active" \
    test "$(show projd@0 ActiveState)" = active -a -n "$(grep -l 'reload failed' "$work/projd-0.log")"
cp "$work/projd.json.good" "$work/projd.json"

in_ns bash -c "mkdir -p /run/systemd/system/projd@2.service.d &&
    printf '[Service]\nMemoryMax=150M\nMemorySwapMax=0\nRestart=no\n' \
        >/run/systemd/system/projd@2.service.d/20-mem.conf && systemctl daemon-reload"
in_ns systemctl start projd@2 2>/dev/null
st2=$(show projd@2 StatusText)
check "MemoryMax=150M: the start refused naming the cgroup" \
    grep -q "the cgroup /system.slice/system-projd.slice/projd@2.service allows 150 MiB" <<<"$st2"
check "MemoryMax=150M: exit 1" test "$(show projd@2 ExecMainStatus)" = 1

in_ns bash -c "mkdir -p /run/systemd/system/projd@3.service.d &&
    printf '[Service]\nExecStart=\nExecStart=$build/bin/projd --no-such-option\n' \
        >/run/systemd/system/projd@3.service.d/20-bad.conf && systemctl daemon-reload"
in_ns systemctl start projd@3 2>/dev/null
sleep 6 # past RestartSec=5: a restart would have begun
check "exit 2 is not restarted" test "$(show projd@3 ExecMainStatus)/$(show projd@3 NRestarts)/$(show projd@3 ActiveState)" = 2/0/failed

in_ns systemctl stop 'projd@*'
check "stop: exit 0, Result=success" \
    test "$(show projd@0 Result)/$(show projd@0 ExecMainStatus)/$(show projd@1 Result)" = success/0/success
check "stop: sockets and their locks gone" \
    test -z "$(in_ns ls /run/projd)"
[ "$fail" = 0 ] || {
    for f in "$work"/projd-*.log; do
        echo "--- $f" >&2
        tail -20 "$f" >&2
    done
}
echo "units: $([ "$fail" = 0 ] && echo "all passed" || echo "FAILED")"
exit "$fail"
