#!/usr/bin/env bash
# e2e_projctl.sh — projctl's command line against a real daemon (cpu
# backend, the small generated model): exit codes and what it prints for
# options, arguments and files that are wrong, so that a mistake is said,
# not ignored. Usage: tests/e2e_projctl.sh BUILD_DIR (shellcheck -x: it sources daemons.sh)
set -u
# --check without --model falls back to $PROJD_MODEL before the daemon's file.
unset PROJD_MODEL
build=${1:-build}
bin=$build/bin
for f in "$bin/projd" "$bin/projctl"; do
    if [ ! -e "$f" ]; then
        echo "e2e_projctl: FAIL: $f is missing (build first: make BUILD=$build)" >&2
        exit 1
    fi
done

# shellcheck source=tests/daemons.sh
. "$(dirname "$0")/daemons.sh"
pjd_skip_under_tsan e2e_projctl "$bin/projctl" \
    "its cases under an address-space cap cannot start a TSan build"
pjd_setup e2e_projctl
pjd_mkmodel small 1
pjd_start main '{ "device": { "backend": "cpu" }, "cpu": { "threads": 1 }, "log": { "level": "warn" } }' 30
sock="ipc://$tmp/main.sock"

failures=0
cases=0
# expect CODE PATTERN ARGS...: projctl ARGS exits CODE and its output (both
# streams) matches the extended regex PATTERN.
expect() {
    pjd_expect "$1" "$2" "$bin/projctl" "${@:3}"
}

# status_shows SOCKET TRIES PATTERN WHAT: projctl status on SOCKET, every
# 0.1 s, TRIES times at most, until its output (both streams) matches the
# extended regex PATTERN; one case, failed with WHAT and the last output.
status_shows() {
    cases=$((cases + 1))
    for _ in $(seq "$2"); do
        "$bin/projctl" --socket "$1" status >"$tmp/status-shows.out" 2>&1
        grep -Eq -- "$3" "$tmp/status-shows.out" && return 0
        sleep 0.1
    done
    failures=$((failures + 1))
    echo "e2e_projctl: FAIL: $4:" >&2
    sed 's/^/    /' "$tmp/status-shows.out" >&2
}

# An option the command does not take is a usage error, not ignored.
expect 2 "project does not take --json" --socket "$sock" project --layer o --m 1 --json
expect 2 "project does not take --count" --socket "$sock" project --layer o --m 1 --count 5
expect 2 "bench-ipc does not take --repeat" --socket "$sock" bench-ipc --repeat=3
expect 2 "mkmodel does not take --check" mkmodel --out "$tmp/m.safetensors" --check
# ... and the ones it takes still work, before or after the command.
expect 0 '"uptime_s"' --json --socket "$sock" stats
expect 0 "^layer o \(1\): m 3" --socket "$sock" project --layer o --m 1 --m=3 --seed 2
expect 0 "layers" inspect --model "$model"
expect 0 "^index" --socket "$sock" --timeout 5000 layers

# --json on status (STATS and what projctl adds) and layers (an array).
expect 0 '"version":"[0-9.]+".*"projctl":\{.*"ping_us":' --socket "$sock" status --json
expect 0 '^\[$' --socket "$sock" layers --json
if ! grep -Eq '^  \{"index": 1, "name": "o", "n": 256, "k": 192, "format": "z12"\},?$' \
    "$tmp/expect.out"; then
    failures=$((failures + 1))
    echo "e2e_projctl: FAIL: layers --json has no line for layer o:" >&2
    sed 's/^/    /' "$tmp/expect.out" >&2
fi
if command -v python3 >/dev/null; then
    for cmd in status layers; do
        cases=$((cases + 1))
        if ! "$bin/projctl" --socket "$sock" "$cmd" --json | python3 -c 'import json, sys; json.load(sys.stdin)'; then
            failures=$((failures + 1))
            echo "e2e_projctl: FAIL: $cmd --json is not one JSON document" >&2
        fi
    done
fi

# The cpu backend is not described as a GPU: no graphs, no engine number,
# and a device line that says what it is; status names projd's version.
expect 0 "^m: 1\.\.256 \(cpu backend: no CUDA graphs\)$" --socket "$sock" layers
expect 0 "^  device     cpu \(1 worker threads\)$" --socket "$sock" status
grep -Eq "^  version    projd [0-9]+\.[0-9]+" "$tmp/expect.out" ||
    { failures=$((failures + 1)); echo "e2e_projctl: FAIL: status shows no version" >&2; }
expect 0 "^layer o \(1\): m 1, n 256, k 192, cpu backend$" --socket "$sock" project --layer o --m 1
expect 0 "^projctl [0-9]+\.[0-9]+\.[0-9]+" --version
expect 0 "^exit status:" --help

# A config file projctl cannot use is a usage error (2), as in projd and
# projload, not a failure (1).
printf '{ "socket": ' >"$tmp/bad.json"
expect 2 "bad\.json" --config "$tmp/bad.json" --socket "$sock" status
# A global option given twice differently is refused (the last won unsaid).
expect 2 '^projctl: --config given twice \("a\.json", then "b\.json"\): it takes one file$' \
    --config a.json --config b.json status
expect 2 '^projctl: --socket given twice' --socket "$sock" --socket=/tmp/other.sock status

# A socket that is not there: said so, with where the URL came from.
expect 1 "no socket file at $tmp/none\.sock \(is projd running there\?\); the URL is from --socket" \
    --socket "ipc://$tmp/none.sock" status
pjd_expect 1 "no socket file at $tmp/env\.sock.*the URL is from \\\$PROJD_SOCKET" \
    env PROJD_SOCKET="$tmp/env.sock" "$bin/projctl" status
printf '{ "socket": { "url": "ipc://%s/cfg.sock" } }\n' "$tmp" >"$tmp/cfg.json"
expect 1 "no socket file at $tmp/cfg\.sock.*the URL is from socket\.url of --config $tmp/cfg\.json" \
    --config "$tmp/cfg.json" status
# --instance N (-i N) is projd@N.service's socket; not together with --socket.
expect 1 "connect ipc:///run/projd/projd-999999\.sock: .*the URL is from --instance 999999" \
    --instance 999999 status
expect 1 "connect ipc:///run/projd/projd-999998\.sock: " -i 999998 --config "$tmp/cfg.json" layers
expect 2 "give one" --socket "$sock" -i 0 status
expect 2 "^projctl: project needs --m M$" --socket "$sock" project --layer o
# An empty --socket is said as such (it fell through to the default and the
# message said both "the default" and "from --socket").
expect 2 '^projctl: --socket "": empty; give ipc://PATH or a PATH' --socket "" status

# project --check with an --n past the layer's rows: said before x and y
# are made (a huge --n took m x n of /dev/shm first, then the daemon's
# E_SHAPE), not a claim that the model file is another one.
expect 1 "^projctl: --n 300: layer o has 256 rows \(--n 1 to 256; without it, all\)" --socket "$sock" \
    project --layer o --m 2 --n 300 --check --model "$model"
expect 0 "bit-exact 200 / 200" --socket "$sock" project --layer o --m 2 --n 100 --check --model "$model"
# An --m past the daemon's max_m: refused before x and y are made (a
# million rows would first take a GiB of /dev/shm).
expect 1 "^projctl: --m 1048576: the daemon takes 1 to 256 rows per op" --socket "$sock" project \
    --layer o --m 1048576
# Seeds are decimal (or 0x hex), never octal.
expect 0 "seed 10," mkmodel --preset small --out "$tmp/m10.safetensors" --seed 010
# Without --model (nor $PROJD_MODEL, nor --config) the file the daemon
# serves (its STATS model.path); another file with the same shapes is
# named as not the daemon's model before anything is compared.
expect 0 "bit-exact 512 / 512" --socket "$sock" project --layer o --m 2 --check
# A daemon given a relative model path names it absolute in STATS, so that
# a client in another directory finds the file.
absbin=$(cd "$bin" && pwd)
(cd "$tmp" && exec "$absbin/projd" --config "$tmp/main.json" --model "${model##*/}" \
    --socket "ipc://$tmp/rel.sock" 2>"$tmp/rel.log") &
relpid=$!
for _ in $(seq 150); do
    "$bin/projctl" --socket "ipc://$tmp/rel.sock" status >/dev/null 2>&1 && break
    sleep 0.2
done
expect 0 "^model\.path +$model$" --socket "ipc://$tmp/rel.sock" stats
expect 0 "bit-exact 512 / 512" --socket "ipc://$tmp/rel.sock" project --layer o --m 2 --check
kill -TERM "$relpid" && wait "$relpid"
"$bin/projctl" mkmodel --preset small --seed 2 --out "$tmp/other.safetensors" >/dev/null
expect 1 "--check: layer o of $tmp/other\.safetensors has digest [0-9a-f]{8}, the daemon's has [0-9a-f]{8}: not the model the daemon serves \(it serves $model\)" \
    --socket "$sock" project --layer o --m 2 --check --model "$tmp/other.safetensors"

# A seed with a blank or a sign before it is refused, not wrapped to 2^64 - 1.
expect 2 'expected an unsigned integer, got " -1"' mkmodel --out "$tmp/m.safetensors" --seed " -1"
expect 2 'expected an unsigned integer, got "-1"' mkmodel --out "$tmp/m.safetensors" --seed=-1
expect 0 "seed 16," mkmodel --preset small --out "$tmp/m.safetensors" --seed 0x10
# A file at --out is left alone (it may be a real model) unless --force.
sum_before=$(cksum <"$tmp/m.safetensors")
expect 1 "^projctl: mkmodel: $tmp/m\.safetensors is there already \(a file, [0-9]+ bytes\); not replaced: give --force" \
    mkmodel --preset small --out "$tmp/m.safetensors" --seed 3
cases=$((cases + 1))
[ "$(cksum <"$tmp/m.safetensors")" = "$sum_before" ] ||
    { failures=$((failures + 1)); echo "e2e_projctl: FAIL: mkmodel without --force changed the file" >&2; }
expect 0 "seed 3," mkmodel --preset small --out "$tmp/m.safetensors" --seed 3 --force
cases=$((cases + 1))
[ "$(cksum <"$tmp/m.safetensors")" != "$sum_before" ] ||
    { failures=$((failures + 1)); echo "e2e_projctl: FAIL: mkmodel --force did not write" >&2; }
expect 2 "--force takes no value" mkmodel --out "$tmp/m.safetensors" --force=1

# bench-ipc --out that cannot be written fails before the run (no table),
# not after it; a missing daemon leaves an existing --out file alone.
expect 1 "projctl: --out $tmp/no-dir/b\.json: No such file or directory" \
    --socket "$sock" bench-ipc --count 10 --out "$tmp/no-dir/b.json"
if grep -q "PING" "$tmp/expect.out"; then
    failures=$((failures + 1))
    echo "e2e_projctl: FAIL: bench-ipc ran before it found --out unwritable:" >&2
    sed 's/^/    /' "$tmp/expect.out" >&2
fi
# A symbolic link at --out is not followed (one in a shared folder could
# name a file of the caller's): refused before the run, the file untouched.
echo "mine" >"$tmp/victim"
ln -s "$tmp/victim" "$tmp/blink.json"
expect 1 "projctl: --out $tmp/blink\.json: .*a symbolic link is not followed" \
    --socket "$sock" bench-ipc --count 10 --out "$tmp/blink.json"
if [ "$(cat "$tmp/victim")" != "mine" ]; then
    failures=$((failures + 1))
    echo "e2e_projctl: FAIL: bench-ipc --out wrote through a symbolic link" >&2
fi
echo "old results" >"$tmp/b.json"
expect 1 "no socket file at $tmp/none\.sock" --socket "ipc://$tmp/none.sock" bench-ipc --out "$tmp/b.json"
if [ "$(cat "$tmp/b.json")" != "old results" ]; then
    failures=$((failures + 1))
    echo "e2e_projctl: FAIL: bench-ipc without a daemon changed its --out file" >&2
fi
expect 0 "wrote $tmp/b\.json" --socket "$sock" bench-ipc --count 10 --transport nng --out "$tmp/b.json"
# An interrupted run takes the --out file it made away again (it is opened
# before the run): no empty file is left.
"$bin/projctl" --socket "$sock" bench-ipc --count 10000000 --transport nng --out "$tmp/bi.json" \
    >/dev/null 2>&1 &
bench_pid=$!
for _ in $(seq 100); do [ -e "$tmp/bi.json" ] && break; sleep 0.05; done
kill -TERM "$bench_pid"
wait "$bench_pid"
bench_rc=$?
if [ "$bench_rc" != 143 ] || [ -e "$tmp/bi.json" ]; then
    failures=$((failures + 1))
    echo "e2e_projctl: FAIL: an interrupted bench-ipc: exit $bench_rc, --out file left: $([ -e "$tmp/bi.json" ] && echo yes || echo no)" >&2
fi
# A run that fails midway (the daemon stops answering) leaves an existing
# --out file as it was, too: it is emptied only once there are results.
# On a daemon of its own: a client that gives up mid-stream can block nng
# 1.5's reaper for good (daemon/reapwatch.h), and the cases below count
# the main daemon's connections.
pjd_start stalled '{ "device": { "backend": "cpu" }, "cpu": { "threads": 1 }, "log": { "level": "warn" } }' 30
stalled_pid=$pjd_pid
cases=$((cases + 1))
echo "old results" >"$tmp/b.json"
"$bin/projctl" --socket "ipc://$tmp/stalled.sock" --timeout 500 bench-ipc --count 100000 \
    --transport nng --out "$tmp/b.json" >"$tmp/stalled.out" 2>&1 &
bench_pid=$!
sleep 2
kill -STOP "$stalled_pid"
sleep 1.5
kill -CONT "$stalled_pid"
rc=0
wait "$bench_pid" || rc=$?
if [ "$rc" -ne 1 ] || ! grep -q "no reply within 500 ms" "$tmp/stalled.out" ||
    [ "$(cat "$tmp/b.json")" != "old results" ]; then
    failures=$((failures + 1))
    echo "e2e_projctl: FAIL: bench-ipc cut short by a stopped daemon: exit $rc, --out now" \
        "\"$(cat "$tmp/b.json")\", output:" >&2
    sed 's/^/    /' "$tmp/stalled.out" >&2
fi
cases=$((cases + 1))
pjd_stop stalled || failures=$((failures + 1))


# metrics: the live daemon's counters as Prometheus text, moving with the
# work; --out replaces the file whole (mode 0644, nothing left beside it);
# a daemon that does not answer is projd_up 0 and exit 1; a label the
# series use themselves is a usage error.
metric() { # metric NAME_AND_LABELS: its value in $tmp/expect.out
    grep -F "$1 " "$tmp/expect.out" | sed 's/.* //'
}
expect 0 '^projd_up\{gpu="0"\} 1$' --socket "$sock" metrics --label gpu=0
ops0=$(metric 'projd_layer_ops_total{layer="o",gpu="0"}')
rows0=$(metric 'projd_layer_rows_total{layer="o",gpu="0"}')
expect 0 "^layer o \(1\): m 4" --socket "$sock" project --layer o --m 4 --repeat 3
expect 0 '^projd_up\{gpu="0"\} 1$' --socket "$sock" metrics --label gpu=0
cases=$((cases + 1))
ops1=$(metric 'projd_layer_ops_total{layer="o",gpu="0"}')
rows1=$(metric 'projd_layer_rows_total{layer="o",gpu="0"}')
if [ -z "$ops0" ] || [ "$ops1" != $((ops0 + 3)) ] || [ "$rows1" != $((rows0 + 12)) ] ||
    ! grep -q '^# TYPE projd_layer_exec_seconds summary$' "$tmp/expect.out"; then
    failures=$((failures + 1))
    echo "e2e_projctl: FAIL: metrics: layer o ops $ops0 -> $ops1, rows $rows0 -> $rows1" \
        "after 3 projections of m = 4; output:" >&2
    sed 's/^/    /' "$tmp/expect.out" >&2
fi
# The cpu backend's numbers typed (counters with _total), and every error
# code there at 0 before its first: E_AUTH, which projd never replies (an
# auth refusal closes the pipe). (E_BUFFER was checked; once, in a CI run,
# it read 1 here, after the stalled bench-ipc above, whose client gives up
# and releases its buffers while the stopped daemon still holds its work.)
cases=$((cases + 1))
if grep -q '^# TYPE .* untyped$' "$tmp/expect.out" ||
    ! grep -q '^# TYPE projd_backend_ops_total counter$' "$tmp/expect.out" ||
    ! grep -q '^# TYPE projd_backend_busy_seconds_total counter$' "$tmp/expect.out" ||
    ! grep -q '^# TYPE projd_backend_threads gauge$' "$tmp/expect.out" ||
    [ "$(metric 'projd_errors_total{code="E_AUTH",gpu="0"}')" != 0 ]; then
    failures=$((failures + 1))
    echo "e2e_projctl: FAIL: metrics: an untyped family, the cpu backend's counters or" \
        "projd_errors_total{code=\"E_AUTH\"} 0 missing; output:" >&2
    sed 's/^/    /' "$tmp/expect.out" >&2
fi
# Prometheus's own checker, where it is installed (Debian's prometheus):
# the text parses, and its lint (names, units, _total) has nothing to say.
if command -v promtool >/dev/null; then
    cases=$((cases + 1))
    if ! "$bin/projctl" --socket "$sock" metrics --label gpu=0 | promtool check metrics \
        >"$tmp/promtool.out" 2>&1; then
        failures=$((failures + 1))
        echo "e2e_projctl: FAIL: promtool check metrics:" >&2
        sed 's/^/    /' "$tmp/promtool.out" >&2
    fi
    # The alerting rules shipped beside the units, and their cases.
    cases=$((cases + 1))
    if ! (cd deploy/prometheus && promtool check rules projd-alerts.yml &&
        promtool test rules projd-alerts.test.yml) >"$tmp/promtool.out" 2>&1; then
        failures=$((failures + 1))
        echo "e2e_projctl: FAIL: deploy/prometheus/projd-alerts.yml:" >&2
        sed 's/^/    /' "$tmp/promtool.out" >&2
    fi
fi
mkdir -p "$tmp/prom"
echo "old" >"$tmp/prom/projd.prom"
cases=$((cases + 1))
rc=0
"$bin/projctl" --socket "$sock" metrics --out "$tmp/prom/projd.prom" >"$tmp/out" 2>&1 || rc=$?
if [ "$rc" -ne 0 ] || [ -s "$tmp/out" ] || ! grep -q '^projd_up 1$' "$tmp/prom/projd.prom" ||
    [ "$(stat -c %a "$tmp/prom/projd.prom")" != 644 ] || [ "$(ls "$tmp/prom")" != projd.prom ]; then
    failures=$((failures + 1))
    echo "e2e_projctl: FAIL: metrics --out: exit $rc, mode $(stat -c %a "$tmp/prom/projd.prom")," \
        "folder: $(ls "$tmp/prom" | tr '\n' ' '), output: $(cat "$tmp/out"), file:" >&2
    head -5 "$tmp/prom/projd.prom" | sed 's/^/    /' >&2
fi
expect 1 'no socket file at' --socket "ipc://$tmp/nobody.sock" --timeout 2000 metrics \
    --label gpu=1 --out "$tmp/prom/projd.prom"
cases=$((cases + 1))
if [ "$(grep -vc '^#' "$tmp/prom/projd.prom")" != 1 ] ||
    ! grep -q '^projd_up{gpu="1"} 0$' "$tmp/prom/projd.prom"; then
    failures=$((failures + 1))
    echo "e2e_projctl: FAIL: metrics --out with projd away does not hold projd_up 0 alone:" >&2
    sed 's/^/    /' "$tmp/prom/projd.prom" >&2
fi
expect 2 "projd's own series use that name" --socket "$sock" metrics --label layer=x
expect 2 "a label name is" --socket "$sock" metrics --label 0gpu=1
expect 1 "--out $tmp/nodir/p.prom: cannot create a file beside it" --socket "$sock" metrics \
    --out "$tmp/nodir/p.prom"

# Output that does not reach stdout (a full disk) is a failure, not exit 0.
for args in "stats --json" "status" "layers" "status --json" "layers --json" "metrics"; do
    cases=$((cases + 1))
    rc=0
    # shellcheck disable=SC2086  # args: words on purpose
    "$bin/projctl" --socket "$sock" $args >/dev/full 2>"$tmp/err" || rc=$?
    if [ "$rc" -ne 1 ] || ! grep -q "writing standard output: No space left on device" "$tmp/err"; then
        failures=$((failures + 1))
        echo "e2e_projctl: FAIL: projctl $args >/dev/full: exit $rc, stderr:" >&2
        sed 's/^/    /' "$tmp/err" >&2
    fi
done
# ... and so is projd --print-config's (a script's `> new.json &&` took an
# empty file for success).
cases=$((cases + 1))
rc=0
"$bin/projd" --print-config >/dev/full 2>"$tmp/err" || rc=$?
if [ "$rc" -ne 1 ] || ! grep -q "writing standard output: No space left on device" "$tmp/err"; then
    failures=$((failures + 1))
    echo "e2e_projctl: FAIL: projd --print-config >/dev/full: exit $rc, stderr:" >&2
    sed 's/^/    /' "$tmp/err" >&2
fi

# bench-ipc says so when its samples do not fit in memory (it exited 1
# without a word). Under a 1.5 GB address-space limit: a sanitizer build
# cannot start under one (its shadow memory alone is larger), so there the
# case runs without the limit on a count that fits and must succeed.
if readelf -d "$bin/projctl" 2>/dev/null | grep -q 'libasan'; then
    expect 0 "PING" --socket "$sock" bench-ipc --count 10
else
    cases=$((cases + 1))
    rc=0
    (ulimit -v 1500000 && exec "$bin/projctl" --socket "$sock" bench-ipc --count 100000000) \
        >"$tmp/out" 2>&1 || rc=$?
    if [ "$rc" -ne 1 ] || ! grep -q "no memory for 100000000 samples" "$tmp/out"; then
        failures=$((failures + 1))
        echo "e2e_projctl: FAIL: bench-ipc out of memory: exit $rc, output:" >&2
        sed 's/^/    /' "$tmp/out" >&2
    fi
fi

# Layer names of up to 63 bytes (an SGLang prefix, as projd_sglang's
# quant_config maps them): the layers table's name column is as wide as the
# longest, so the numbers stay in their columns.
pjd_start long '{ "device": { "backend": "cpu" }, "cpu": { "threads": 1 }, "log": { "level": "warn" },
  "model": { "layers": [ { "name": "model.layers.0.self_attn.qkv_proj", "tensor": "qkv_gate.weight" },
                         { "name": "o", "tensor": "o.weight" } ] } }' 30
expect 0 "^0     model\.layers\.0\.self_attn\.qkv_proj      320      256  z12$" \
    --socket "ipc://$tmp/long.sock" layers
if ! grep -Eq "^1     o {32}      256      192  z12$" "$tmp/expect.out"; then
    failures=$((failures + 1))
    echo "e2e_projctl: FAIL: layers with a long name: the short one's row is out of its columns:" >&2
    sed 's/^/    /' "$tmp/expect.out" >&2
fi

# status names buffer releases that have not returned: a daemon whose
# releases each take 3 s (PROJD_CPU_CLOSE_HOLD_MS, tests only), after a
# project run (its x and y released when it disconnects).
PROJD_CPU_CLOSE_HOLD_MS=3000 pjd_start held \
    '{ "device": { "backend": "cpu" }, "cpu": { "threads": 1 }, "log": { "level": "warn" } }' 30
held="ipc://$tmp/held.sock"
expect 0 "^layer o \(1\): m 1" --socket "$held" project --layer o --m 1
status_shows "$held" 20 "^  releasing  [12] buffer release\(s\), the running one waiting" \
    "status did not name the releases held 3 s each"

# status says the connections against their limit, and the refusals; a
# client past the limit is told why (protocol/PROTOCOL.md: a refused connection's
# first request gets an ERROR). A raw connection (nng's handshake, then
# nothing; python3) holds the one place of a daemon limited to one.
expect 0 "^  clients    1 connected of 64 allowed$" --socket "$sock" status
expect 0 "^projd_connections_limit 64$" --socket "$sock" metrics
if command -v python3 >/dev/null; then
    pjd_start one '{ "device": { "backend": "cpu" }, "cpu": { "threads": 1 }, "log": { "level": "debug" },
      "limits": { "max_connections": 1 } }' 30
    # pjd_start's status probes count against the limit until the loop has
    # retired them (a closed connection is counted until then, as its
    # requests may still run): the holder connects once every probe's
    # close is in the log, or it could be the one refused.
    for _ in $(seq 50); do
        [ "$(grep -c ': pid [0-9]* uid [0-9]* gid [0-9]* connected (' "$tmp/one.log")" = \
            "$(grep -c ' closed after ' "$tmp/one.log")" ] && break
        sleep 0.1
    done
    # It holds the place until the script lets go ($tmp/one.release), or
    # 60 s: the status poll and metrics below must both meet it held. It
    # says when its handshake is done ($tmp/one.held); a status that gets
    # in after that found the place free: the holder was the one refused
    # (a probe's connection not yet retired had the place; a CI run saw
    # it), so it lets go and connects again.
    for _ in 1 2 3 4; do
        rm -f "$tmp/one.release" "$tmp/one.held"
        python3 - "$tmp/one.sock" "$tmp/one.release" "$tmp/one.held" <<'PY' &
import os, socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(bytes([0, ord("S"), ord("P"), 0, 0, 0x30, 0, 0]))
s.recv(8)
open(sys.argv[3], "w").close()
end = time.time() + 60
while time.time() < end and not os.path.exists(sys.argv[2]):
    time.sleep(0.05)
PY
        holder=$!
        for _ in $(seq 100); do
            [ -e "$tmp/one.held" ] && break
            sleep 0.05
        done
        sleep 0.2 # the daemon counts it once nng has handed it over
        # A refusal at the limit is an answer: status exits 0 (a health
        # check on it must not restart a busy daemon) and says why it
        # knows no more.
        "$bin/projctl" --socket "ipc://$tmp/one.sock" status >"$tmp/one.out" 2>&1
        st_rc=$?
        grep -q "connection limit" "$tmp/one.out" && break
        touch "$tmp/one.release"
        wait "$holder"
        sleep 0.5
    done
    cases=$((cases + 1))
    if ! grep -q "projd refused this connection: connection limit 1 reached" "$tmp/one.out" ||
        ! grep -q "^projd is up, at a connection limit" "$tmp/one.out" || [ "$st_rc" -ne 0 ]; then
        failures=$((failures + 1))
        echo "e2e_projctl: FAIL: status past the connection limit (exit $st_rc) is not 'up, refused':" >&2
        sed 's/^/    /' "$tmp/one.out" >&2
    fi
    expect 0 '^\{"projctl": \{"up": true, "refused": "E_LIMIT"\}\}$' \
        --socket "ipc://$tmp/one.sock" status --json
    # A refusal is an answer: metrics says projd is up, at its limit (a
    # node whose clients hold every place must not fire ProjdDown), exit 0.
    "$bin/projctl" --socket "ipc://$tmp/one.sock" metrics --label gpu=0 >"$tmp/one.prom" 2>"$tmp/one.err"
    rc=$?
    cases=$((cases + 1))
    if [ "$rc" -ne 0 ] || ! grep -q '^projd_up{gpu="0"} 1$' "$tmp/one.prom" ||
        ! grep -q '^projd_scrape_refused{reason="E_LIMIT",gpu="0"} 1$' "$tmp/one.prom" ||
        [ "$(grep -vc '^#' "$tmp/one.prom")" -ne 2 ] ||
        ! grep -q "connection limit 1 reached" "$tmp/one.err"; then
        failures=$((failures + 1))
        echo "e2e_projctl: FAIL: metrics past the connection limit (exit $rc) is not 'up, refused':" >&2
        sed 's/^/    /' "$tmp/one.prom" "$tmp/one.err" >&2
    fi
    touch "$tmp/one.release"
    wait "$holder"
    status_shows "ipc://$tmp/one.sock" 50 \
        "^  clients    1 connected of 1 allowed; [0-9]+ refused since the start \(its log says why\)$" \
        "status after a refusal does not count it"
fi

# A daemon serving layers of its own naming (as for SGLang): --check with
# no --config reads the file with the daemon's layers (STATS), not the
# built-in five; with --config, that file's layers, and a layer it does
# not name is said. Its ring is off: bench-ipc times nng alone and says
# so, unless --transport ring asked for the ring.
pjd_start custom '{ "device": { "backend": "cpu" }, "cpu": { "threads": 1 }, "log": { "level": "warn" },
  "ring": { "enabled": 0 },
  "model": { "layers": [ { "name": "model.layers.0.proj", "tensor": "o.weight" },
                         { "name": "up", "tensor": "unpooler.weight", "max_n": 100 } ] } }' 30
csock="ipc://$tmp/custom.sock"
expect 0 "bit-exact 512 / 512" --socket "$csock" project --layer model.layers.0.proj --m 2 --check
expect 0 "bit-exact 300 / 300" --socket "$csock" project --layer up --m 3 --check --model "$model"
expect 1 "--check: layer up is not in .* with this config" \
    --socket "$csock" --config "$tmp/main.json" project --layer up --m 1 --check
expect 0 "refused a ring: .*; timing nng alone" --socket "$csock" bench-ipc --count 10
cases=$((cases + 1))
if ! grep -Eq '^PING +nng ' "$tmp/expect.out" || grep -Eq ' ring +[0-9]' "$tmp/expect.out"; then
    failures=$((failures + 1))
    echo "e2e_projctl: FAIL: bench-ipc without a ring did not time nng alone:" >&2
    sed 's/^/    /' "$tmp/expect.out" >&2
fi
expect 1 "refused a ring" --socket "$csock" bench-ipc --count 10 --transport ring

echo "e2e_projctl: $cases cases, $failures failed"
pjd_stop_all || failures=$((failures + $?))
if [ "$failures" -ne 0 ]; then
    echo "e2e_projctl: FAIL ($failures failures)"
    exit 1
fi
echo "e2e_projctl: all passed"
