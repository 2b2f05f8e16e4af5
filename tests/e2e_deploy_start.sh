#!/usr/bin/env bash
# e2e_deploy_start.sh — how projd and deploy/run-demo.sh (`make run`) start
# (cpu backend, the small generated model, sockets in a temporary folder):
#   - projd raises its open-files soft limit to the hard one (its own
#     /proc/PID/limits), and says at start when the hard limit is short of
#     limits.max_connections (about 2 x max_connections + 64), with the
#     numbers; a hard limit that is enough is not said; a SIGHUP that
#     raises max_connections past it says so too;
#   - out of descriptors (hard limit 64, clients holding every one, more
#     waiting to be accepted), the listener's replacement fails on every
#     100 ms watch: it is logged once, the next time not before 10 s have
#     passed and then with the count of the quiet ones (two lines, not a
#     hundred), and the daemon answers again once the clients let go,
#     saying the replacement that ends the episode;
#   - run-demo refuses at once (exit 1, the message, no projd started) when
#     a projd already answers on its socket, and that daemon keeps serving;
#   - run-demo says the exit status of a projd that exits before it is
#     ready (2: a bad PROJD_BACKEND; 1: a socket whose folder is a file),
#     after that projd's own message.
# The limits are set with bash's ulimit in the daemon's own process and
# only ever lowered, which needs no privilege; where they cannot be set (or
# /proc or python3 is missing) those cases say "skip" and why. run-demo is
# always given PROJD_SOCKET and PROJD_MODEL in the temporary folder, so it
# neither touches /run nor generates the 190 MB reference model.
# Usage: tests/e2e_deploy_start.sh BUILD_DIR (shellcheck -x: it sources daemons.sh)
set -u
unset PROJD_SOCKET PROJD_MODEL PROJD_BACKEND
build=${1:-build}
bin=$build/bin
demo=$(dirname "$0")/../deploy/run-demo.sh
for f in "$bin/projd" "$bin/projctl" "$demo"; do
    if [ ! -e "$f" ]; then
        echo "e2e_deploy_start: FAIL: $f is missing (build first: make BUILD=$build)" >&2
        exit 1
    fi
done

# shellcheck source=tests/daemons.sh
. "$(dirname "$0")/daemons.sh"
pjd_setup e2e_deploy_start
hold_pid=
# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {
    if [ -n "$hold_pid" ]; then
        kill -KILL "$hold_pid" 2>/dev/null
        wait "$hold_pid" 2>/dev/null
    fi
    pjd_cleanup
}
trap cleanup EXIT
pjd_mkmodel small 1

cases=0
failures=0
skips=0
skip() {
    skips=$((skips + 1))
    echo "skip: $*"
}
# show FILE: a failed case's evidence, indented (its last 40 lines).
show() {
    if [ -s "$1" ]; then
        tail -n 40 "$1" | sed 's/^/    /' >&2
    else
        echo "    (${1##*/} is empty)" >&2
    fi
}

# nofile SOFT HARD CMD...: CMD with those open-files limits (soft first:
# the hard one may be below the current soft one).
nofile() {
    ulimit -S -n "$1" && ulimit -H -n "$2" && shift 2 && exec "$@"
}
# soft_hard PID: "SOFT HARD" of a process's open-files limit.
soft_hard() {
    awk '/^Max open files/ { print $4, $5 }' "/proc/$1/limits" 2>/dev/null
}

# ---- the open-files limit ----------------------------------------------------------
limits=1
hard_now=$(ulimit -H -n)
if [ ! -r /proc/self/limits ]; then
    limits=0
    skip "open-files limit cases: no /proc/PID/limits to read a daemon's limit from"
elif [ "$hard_now" != unlimited ] && [ "$hard_now" -lt 256 ]; then
    limits=0
    skip "open-files limit cases: this shell's hard limit is $hard_now (they need 256)"
elif [ "$( (ulimit -S -n 32 && ulimit -H -n 64 && echo "$(ulimit -S -n):$(ulimit -H -n)") 2>&1)" != 32:64 ]; then
    limits=0
    skip "open-files limit cases: this shell cannot lower its own limits (ulimit -S -n 32, -H -n 64)"
fi

cpu='"device": { "backend": "cpu" }, "cpu": { "threads": 1 }, "log": { "level": "warn" }'
if [ "$limits" = 1 ]; then
    # Short: soft 32, hard 64 against max_connections 4096 (about 8256).
    # The connections never say HELLO and are never refused, so that they
    # hold their descriptors (for the listener case below).
    pjd_start starved "{ $cpu, \"limits\": { \"max_connections\": 4096, \"hello_timeout_ms\": 0 } }" \
        30 nofile 32 64
    starved_pid=$pjd_pid
    # Enough: soft 64, hard 256 against max_connections 32 (about 128).
    pjd_start enough "{ $cpu, \"limits\": { \"max_connections\": 32 } }" 30 nofile 64 256
    enough_pid=$pjd_pid

    for d in "$starved_pid 32 64" "$enough_pid 64 256"; do
        read -r pid soft hard <<<"$d"
        got=$(soft_hard "$pid")
        if [ "$got" = "$hard $hard" ]; then
            ok "soft limit $soft raised to the hard $hard"
        else
            not_ok "soft limit $soft not raised to the hard $hard: /proc/$pid/limits says soft, hard: $got"
        fi
    done
    if grep -q "warn: open files: the limit is 64 (hard 64), and limits.max_connections 4096 takes about 8256: past it new clients' connects are dropped; raise the hard limit" \
        "$tmp/starved.log"; then
        ok "a hard limit of 64 against max_connections 4096 is said at start"
    else
        not_ok "a hard limit of 64 against max_connections 4096 is not said at start; the log:"
        show "$tmp/starved.log"
    fi
    if grep -q "open files" "$tmp/enough.log"; then
        not_ok "a hard limit of 256 against max_connections 32 (enough) is warned of:"
        show "$tmp/enough.log"
    else
        ok "a hard limit that is enough is not said"
    fi
    # A SIGHUP that raises max_connections past the hard limit says so too
    # (32 -> 200: about 464 against 256); STATS counts the reload once the
    # warning is written.
    printf '%s\n' "{ $cpu, \"limits\": { \"max_connections\": 200 } }" >"$tmp/enough.json"
    kill -HUP "$enough_pid"
    for _ in $(seq 100); do
        "$bin/projctl" --socket "ipc://$tmp/enough.sock" stats --json >"$tmp/enough.stats" 2>&1 &&
            grep -Eq '"applied":[[:space:]]*1[,}]' "$tmp/enough.stats" && break
        sleep 0.1
    done
    if grep -q "warn: open files: the limit is 256 (hard 256), and limits.max_connections 200 takes about 464" \
        "$tmp/enough.log"; then
        ok "a reload that raises max_connections past the hard limit says so"
    else
        not_ok "a reload to max_connections 200 against a hard limit of 256 is not said; the log, STATS:"
        show "$tmp/enough.log"
        show "$tmp/enough.stats"
    fi
fi

# ---- the listener's failed replacement, out of descriptors -------------------------
# Unix-socket clients that send their half of the SP handshake (REQ0) and
# then hold the connection: more of them than the daemon has descriptors,
# so that accept fails (EMFILE) on every try, which moves the listener's
# error counters, and the watch's fresh listener cannot get a socket.
listener=0
if [ "$limits" = 1 ]; then
    if ! command -v python3 >/dev/null; then
        skip "listener case: no python3 to hold the connections with"
    else
        listener=1
        cat >"$tmp/hold.py" <<'EOF'
import socket, sys, time
held = []
for _ in range(int(sys.argv[2])):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(2)
    try:
        s.connect(sys.argv[1])
        s.sendall(b"\x00SP\x00\x00\x30\x00\x00")
    except OSError as e:
        print("connect:", e, flush=True)
        break
    held.append(s)
print("holding", len(held), flush=True)
time.sleep(120)
EOF
        python3 "$tmp/hold.py" "$tmp/starved.sock" 80 >"$tmp/hold.out" 2>&1 &
        hold_pid=$!
    fi
fi
said() {
    grep -c "listener: cannot replace a listener" "$tmp/starved.log"
}
if [ "$listener" = 1 ]; then
    for _ in $(seq 150); do
        [ "$(said)" -ge 1 ] && break
        sleep 0.1
    done
    if [ "$(said)" -ge 1 ]; then
        ok "out of descriptors, the listener's failed replacement is said"
    else
        not_ok "clients past the descriptors did not make the listener's replacement fail within 15 s; the log, the clients:"
        show "$tmp/starved.log"
        show "$tmp/hold.out"
        listener=0
    fi
fi

# ---- run-demo ----------------------------------------------------------------------
# run_demo OUT SOCKET BACKEND: deploy/run-demo.sh on the small model, its
# output (both streams) in OUT; its exit status returned. Bounded, so that
# a script that starts serving fails the case instead of hanging.
run_demo() {
    local rc=0
    timeout --kill-after=5 60 env PROJD_SOCKET="$2" PROJD_MODEL="$model" PROJD_BACKEND="$3" \
        bash "$demo" "$build" >"$1" 2>&1 || rc=$?
    return "$rc"
}

# A projd answers on the socket already: refused before a projd is started.
pjd_start running "{ $cpu }" 30
running_pid=$pjd_pid
rc=0
run_demo "$tmp/demo-running.out" "ipc://$tmp/running.sock" cpu || rc=$?
if [ "$rc" = 1 ] && grep -q "^run: a projd already answers on that socket (\`$bin/projctl --socket ipc://$tmp/running.sock status\`); stop it, or set PROJD_SOCKET to another path$" \
    "$tmp/demo-running.out" && ! grep -q "^run: starting" "$tmp/demo-running.out"; then
    ok "run-demo refuses a socket a projd already answers on, starting nothing"
else
    not_ok "run-demo on a socket a projd already answers on: exit $rc (expected 1 and the refusal, no projd started); its output:"
    show "$tmp/demo-running.out"
fi
if kill -0 "$running_pid" 2>/dev/null &&
    "$bin/projctl" --socket "ipc://$tmp/running.sock" status >"$tmp/running.status" 2>&1; then
    ok "the projd already there keeps serving"
else
    not_ok "the projd already there does not answer after run-demo:"
    show "$tmp/running.status"
    show "$tmp/running.log"
fi

# A projd that exits before it is ready: its exit status said, after its log.
rc=0
run_demo "$tmp/demo-backend.out" "ipc://$tmp/backend.sock" bogus || rc=$?
if [ "$rc" = 1 ] && grep -q 'device.backend: expected one of' "$tmp/demo-backend.out" &&
    grep -q '^run: projd exited before it was ready (exit status 2; its log is above)$' "$tmp/demo-backend.out"; then
    ok "run-demo says the exit status 2 of a projd given a bad backend"
else
    not_ok "run-demo with PROJD_BACKEND=bogus: exit $rc (expected 1, projd's message and its exit status 2); its output:"
    show "$tmp/demo-backend.out"
fi
: >"$tmp/afile"
rc=0
run_demo "$tmp/demo-socket.out" "ipc://$tmp/afile/demo.sock" cpu || rc=$?
if [ "$rc" = 1 ] && grep -q "$tmp/afile: exists and is not a directory" "$tmp/demo-socket.out" &&
    grep -q '^run: projd exited before it was ready (exit status 1; its log is above)$' "$tmp/demo-socket.out"; then
    ok "run-demo says the exit status 1 of a projd that cannot make its socket"
else
    not_ok "run-demo with a socket under a file: exit $rc (expected 1, projd's message and its exit status 1); its output:"
    show "$tmp/demo-socket.out"
fi

# ---- the listener's failed replacement, 10 s on --------------------------------------
# The failure goes on every 100 ms while the clients hold on: the second
# line comes 10 s after the first, with the count; a third could not come
# for another 10 s. (Without the limit, the second comes 100 ms later.)
if [ "$listener" = 1 ]; then
    for _ in $(seq 250); do
        [ "$(said)" -ge 2 ] && break
        kill -0 "$hold_pid" 2>/dev/null || break
        sleep 0.1
    done
    sleep 1 # still holding: no third line at the next watches
    grep "listener: cannot replace a listener" "$tmp/starved.log" >"$tmp/said.txt"
    if [ "$(wc -l <"$tmp/said.txt")" = 2 ] && ! sed -n 1p "$tmp/said.txt" | grep -q "more times" &&
        sed -n 2p "$tmp/said.txt" | grep -Eq ": Out of files \(and [1-9][0-9]* more times in the last [0-9]+ s\)$"; then
        ok "the failing replacement is said twice in 10 s, the second time with the count ($(sed -En '2s/.*\((and [0-9]+ more times in the last [0-9]+ s)\)$/\1/p' "$tmp/said.txt"))"
    else
        not_ok "the failing replacement, held on for 10 s, is not said once and again with a count:"
        show "$tmp/said.txt"
        echo "    (the clients said: $(cat "$tmp/hold.out"))" >&2
    fi
    kill -KILL "$hold_pid" 2>/dev/null
    wait "$hold_pid" 2>/dev/null
    hold_pid=
    up=0
    for _ in $(seq 50); do
        if "$bin/projctl" --socket "ipc://$tmp/starved.sock" status >"$tmp/starved.status" 2>&1; then
            up=1
            break
        fi
        sleep 0.2
    done
    if [ "$up" = 1 ]; then
        ok "the daemon answers again once the clients let go of their descriptors"
        # The episode's end is said with what the last line left unsaid,
        # not carried into the next episode's first line.
        for _ in $(seq 50); do
            grep -q "listener: replaced after failing" "$tmp/starved.log" && break
            sleep 0.1
        done
        if grep -Eq "listener: replaced after failing \([0-9]+ more times since the last line\)$" "$tmp/starved.log"; then
            ok "the replacement that ends the episode is said ($(grep -Eo '[0-9]+ more times since the last line' "$tmp/starved.log" | tail -n 1))"
        else
            not_ok "the replacement that ends the episode is not said:"
            show "$tmp/starved.log"
        fi
    else
        not_ok "the daemon does not answer within 10 s after the clients let go:"
        show "$tmp/starved.status"
        show "$tmp/starved.log"
    fi
fi

echo "e2e_deploy_start: $cases cases, $failures failed, $skips skipped"
pjd_stop_all || failures=$((failures + $?))
if [ "$failures" -ne 0 ]; then
    echo "e2e_deploy_start: FAIL ($failures failures)"
    exit 1
fi
if [ "$cases" -eq 0 ]; then
    echo "e2e_deploy_start: every case skipped"
    exit 77
fi
echo "e2e_deploy_start: all passed"
