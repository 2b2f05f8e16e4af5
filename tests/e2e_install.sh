#!/usr/bin/env bash
# e2e_install.sh — `make install` into a temporary DESTDIR (PREFIX=/usr, as a
# package build does) installs every file deploy/README.md's table promises
# (the documents `projd --help` names too, and the installed projd's --help
# names the folder they were installed in),
# the installed libprojd exports only its API, the installed Python
# binding finds the installed libprojd on its own, and `make uninstall`
# takes it all away again but the node's configuration.
# It runs install's copying half (install-files) against the build under
# test, which builds nothing: a nested make could rebuild with other flags.
# Usage: tests/e2e_install.sh BUILD_DIR
set -u
build=${1:-build}
# shellcheck source=tests/daemons.sh
. "$(dirname "$0")/daemons.sh"
pjd_skip_under_tsan e2e_install "$build/bin/projd" \
    "the installed Python module cannot load a TSan libprojd"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/e2e_install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# The program list depends on CUDA (projd-bench): take it from the build.
cuda=0
[ -e "$build/lib/libpjcuda.a" ] && cuda=1
if ! make -s BUILD="$build" CUDA="$cuda" install-files DESTDIR="$tmp/root" PREFIX=/usr UNITDIR=/lib/systemd/system \
    >"$tmp/make.log" 2>&1; then
    echo "e2e_install: FAIL: make install" >&2
    cat "$tmp/make.log" >&2
    exit 1
fi
fail=0
# A build folder without the programs: install-files names what is missing
# and installs nothing.
mkdir -p "$tmp/nobuild"
if make -s BUILD="$tmp/nobuild" CUDA="$cuda" install-files DESTDIR="$tmp/none" PREFIX=/usr \
    >"$tmp/none.log" 2>&1; then
    echo "e2e_install: FAIL: install-files from an empty build folder succeeded" >&2
    fail=1
elif ! grep -q "is missing: build it first" "$tmp/none.log" || [ -e "$tmp/none" ]; then
    echo "e2e_install: FAIL: install-files from an empty build folder: no clear error, or files written" >&2
    cat "$tmp/none.log" >&2
    fail=1
fi
for f in usr/bin/projd usr/bin/projctl usr/bin/projload usr/lib/libprojd.so.1 usr/lib/libprojd.so \
    usr/lib/libprojd.a usr/include/projd/projd.h usr/include/projd/protocol/wire.h \
    lib/systemd/system/projd@.service lib/systemd/system/projd-mps.service \
    lib/systemd/system/projd-metrics@.service lib/systemd/system/projd-metrics@.timer \
    usr/lib/sysusers.d/projd.conf usr/lib/tmpfiles.d/projd.conf etc/projd/projd.json \
    usr/share/projd/tuning/h200.json usr/share/projd/tuning/h100-80gb-hbm3.json \
    usr/share/projd/python/projd.py \
    usr/share/projd/python/projd_sglang.py usr/share/projd/python/projd_pack.py \
    usr/share/projd/prometheus/projd-alerts.yml usr/share/projd/prometheus/projd-alerts.test.yml \
    usr/share/doc/projd/README.md \
    usr/share/doc/projd/config/CONFIG.md usr/share/doc/projd/daemon/DAEMON.md \
    usr/share/doc/projd/daemon/CUDA.md usr/share/doc/projd/protocol/PROTOCOL.md \
    usr/share/doc/projd/bench/README.md; do
    if [ ! -e "$tmp/root/$f" ]; then
        echo "e2e_install: FAIL: /$f was not installed" >&2
        fail=1
    fi
done
# The installed projd points --help at the installed documents (found next
# to its bin folder), and every document the unit names is there.
if [ -x "$tmp/root/usr/bin/projd" ]; then
    "$tmp/root/usr/bin/projd" --help >"$tmp/help.txt" 2>&1
    grep -qF "Documentation, in $tmp/root/usr/share/doc/projd/:" "$tmp/help.txt" ||
        { echo "e2e_install: FAIL: the installed projd --help does not name the installed documents" >&2
          grep -A3 '^Documentation' "$tmp/help.txt" >&2; fail=1; }
    for doc in $(sed -n 's#^Documentation=file:///usr/##p' "$tmp/root/lib/systemd/system/projd@.service"); do
        [ -e "$tmp/root/usr/$doc" ] ||
            { echo "e2e_install: FAIL: projd@.service names /usr/$doc, not installed" >&2; fail=1; }
    done
fi
# The node config names the group sysusers.d creates and the directory
# tmpfiles.d makes for the model.
grep -q '^g projd ' "$tmp/root/usr/lib/sysusers.d/projd.conf" ||
    { echo "e2e_install: FAIL: sysusers.d does not create the projd group" >&2; fail=1; }
grep -q '"group": "projd"' "$tmp/root/etc/projd/projd.json" ||
    { echo "e2e_install: FAIL: projd.json's socket group is not projd" >&2; fail=1; }
grep -q '^d /var/lib/projd ' "$tmp/root/usr/lib/tmpfiles.d/projd.conf" ||
    { echo "e2e_install: FAIL: tmpfiles.d does not make /var/lib/projd" >&2; fail=1; }
# Run again over directories an operator gave to a non-root instance, it
# keeps their owner and mode, and it makes missing ones.
if command -v systemd-tmpfiles >/dev/null && [ "$(id -u)" = 0 ]; then
    tf=$tmp/tf
    mkdir -p "$tf/run/projd" "$tf/var/lib"
    chown nobody "$tf/run/projd" && chmod 0750 "$tf/run/projd"
    systemd-tmpfiles --create --root="$tf" "$tmp/root/usr/lib/tmpfiles.d/projd.conf" >"$tmp/tf.log" 2>&1
    [ "$(stat -c '%U %a' "$tf/run/projd")" = "nobody 750" ] && [ -d "$tf/var/lib/projd" ] ||
        { echo "e2e_install: FAIL: systemd-tmpfiles with projd.conf: /run/projd $(stat -c '%U %a' "$tf/run/projd"), not nobody 750, or no /var/lib/projd" >&2
          cat "$tmp/tf.log" >&2; fail=1; }
fi
# The node config asks for the GPU: a projd@ instance that cannot use it
# fails (and is restarted) instead of serving on the CPU reference backend.
grep -q '"backend": "cuda"' "$tmp/root/etc/projd/projd.json" ||
    { echo "e2e_install: FAIL: projd.json does not ask for the cuda backend" >&2; fail=1; }
# ... and names no tuning table: the cuda backend takes its GPU's own from
# <bin>/../share/projd/tuning/ (an H100 node the H100's, not the H200's,
# which a pinned tuning.table would give it and then not use).
grep -q '"tuning"' "$tmp/root/etc/projd/projd.json" &&
    { echo "e2e_install: FAIL: projd.json pins a tuning table" >&2; fail=1; }
# The units name the installed paths under another PREFIX, and the tables
# lie where the cuda backend looks beside that PREFIX's projd;
# the MPS control daemon stays where the driver put it.
if make -s BUILD="$build" CUDA="$cuda" install-files DESTDIR="$tmp/opt" PREFIX=/opt/pj \
    UNITDIR=/opt/pj/lib/systemd/system >"$tmp/opt.log" 2>&1; then
    u=$tmp/opt/opt/pj/lib/systemd/system
    grep -q '^ExecStart=/opt/pj/bin/projd ' "$u/projd@.service" &&
        grep -q 'file:///opt/pj/share/doc/projd/README.md' "$u/projd@.service" &&
        grep -q '^ExecStart=/usr/bin/nvidia-cuda-mps-control -d' "$u/projd-mps.service" &&
        grep -q '^ExecStart=/opt/pj/bin/projctl --instance %i ' "$u/projd-metrics@.service" &&
        [ -e "$tmp/opt/opt/pj/bin/../share/projd/tuning/h100-80gb-hbm3.json" ] ||
        { echo "e2e_install: FAIL: PREFIX=/opt/pj: the units name other paths, or no tables beside its projd" >&2
          grep -h 'ExecStart\|Documentation' "$u"/*.service >&2
          fail=1; }
else
    echo "e2e_install: FAIL: make install-files PREFIX=/opt/pj" >&2
    cat "$tmp/opt.log" >&2
    fail=1
fi
# The installed units as systemd reads them (systemd-analyze verify, where
# systemd is installed): an unknown key, a bad value or a command that is
# not there fails. Verified as copies that name this tree's programs (the
# units name /usr/bin); the MPS control daemon is the driver's, absent on
# a machine without one, and only its absence is allowed.
if command -v systemd-analyze >/dev/null 2>&1; then
    mkdir -p "$tmp/units"
    for u in "$tmp"/root/lib/systemd/system/*; do
        sed "s#/usr/bin/projd #$tmp/root/usr/bin/projd #; s#/usr/bin/projctl #$tmp/root/usr/bin/projctl #" \
            "$u" >"$tmp/units/${u##*/}"
    done
    (cd "$tmp/units" && systemd-analyze verify ./*) >"$tmp/verify.log" 2>&1
    if grep -v -e 'nvidia-cuda-mps-control is not executable' "$tmp/verify.log" | grep -q .; then
        echo "e2e_install: FAIL: systemd-analyze verify finds fault with the installed units:" >&2
        cat "$tmp/verify.log" >&2
        fail=1
    else
        echo "e2e_install: systemd-analyze verify: the $(ls "$tmp/units" | wc -l) units are clean"
    fi
else
    echo "e2e_install: systemd-analyze is not installed here: the units' check is not run"
fi
# The installed library exports exactly the functions projd.h declares
# (client/libprojd.map): nothing of the protocol codec it is linked from.
lib=$tmp/root/usr/lib/libprojd.so.1
if ! command -v nm >/dev/null; then
    echo "e2e_install: FAIL: nm (binutils, which the build's linker comes with) is missing" >&2
    fail=1
elif [ -e "$lib" ]; then
    nm -D --defined-only "$lib" | awk '$2 != "A" {sub(/@.*/, "", $3); print $3}' | sort -u >"$tmp/exports"
    grep -oE '\bprojd_[a-z0-9_]+[[:space:]]*\(' "$tmp/root/usr/include/projd/projd.h" | tr -d '( ' |
        sort -u >"$tmp/declared"
    if ! [ -s "$tmp/exports" ] || ! diff "$tmp/declared" "$tmp/exports" >"$tmp/exports.diff"; then
        echo "e2e_install: FAIL: libprojd's exports differ from projd.h's functions (< declared, > exported):" >&2
        cat "$tmp/exports.diff" >&2
        fail=1
    fi
fi
# The installed binding loads the installed library (share/projd/python ->
# lib/libprojd.so.1) with nothing in the environment pointing at it.
# A sanitizer build's library needs its runtime loaded first.
# shellcheck source=tests/daemons.sh
. "$(dirname "$0")/daemons.sh"
pjd_asan_env "$tmp/root/usr/lib/libprojd.so.1"
if command -v python3 >/dev/null; then
    if ! env -u PROJD_LIB "${asan_env[@]}" python3 -c "
import sys; sys.path.insert(0, '$tmp/root/usr/share/projd/python')
import projd; lib = projd.load_library()
assert lib._name.startswith('$tmp/root/usr/lib/'), lib._name
print('e2e_install: the installed binding loads', lib._name)" 2>"$tmp/py.log"; then
        echo "e2e_install: FAIL: the installed Python binding does not load the installed library" >&2
        cat "$tmp/py.log" >&2
        fail=1
    fi
fi
# A C program builds against libprojd and runs, twice: against the build
# tree (-I. -Iclient -L BUILD/lib, as README.md's "From C" says) and against
# the installed headers and library. The loader asks for the soname
# (libprojd.so.1), which both places must have; nothing in the environment
# points at either. The program dials a socket nobody listens on and
# prints the library's error, which must name the URL.
cat >"$tmp/linkme.c" <<'CEOF'
#include <stdio.h>
#include <string.h>
#include "projd.h"
int main(int argc, char **argv)
{
    projd_conn *c = NULL;
    projd_error e;
    memset(&e, 0, sizeof e);
    if (argc != 2 || projd_connect_timeout(argv[1], "e2e_install", 2000, &c, &e) == 0)
        return 1;
    printf("%d %s\n", e.code, e.msg);
    return 0;
}
CEOF
san=()
readelf -d "$build/lib/libprojd.so" 2>/dev/null | grep -q 'libasan' && san+=(-fsanitize=address)
readelf -d "$build/lib/libprojd.so" 2>/dev/null | grep -q 'libubsan' && san+=(-fsanitize=undefined)
for where in build installed; do
    if [ "$where" = build ]; then
        inc=(-I. -Iclient) libdir=$(cd "$build/lib" && pwd)
    else
        inc=(-I"$tmp/root/usr/include/projd") libdir=$tmp/root/usr/lib
    fi
    exe=$tmp/linkme-$where
    if ! ${CC:-gcc} -std=c11 -Wall -Werror "${san[@]}" "${inc[@]}" "$tmp/linkme.c" -L"$libdir" -lprojd \
        -Wl,-rpath,"$libdir" -o "$exe" 2>"$tmp/link-$where.log"; then
        echo "e2e_install: FAIL: a C program does not build against the $where libprojd:" >&2
        cat "$tmp/link-$where.log" >&2
        fail=1
        continue
    fi
    url=ipc://$tmp/nobody-$where.sock
    if out=$(env -u LD_LIBRARY_PATH -u PROJD_SOCKET ASAN_OPTIONS=detect_leaks=0 "$exe" "$url" 2>&1) &&
        [ "${out#*"$url"}" != "$out" ]; then
        echo "e2e_install: a C program links the $where libprojd ($(ldd "$exe" | grep -o 'libprojd.so.1 => [^ ]*')) and reports: $out"
    else
        echo "e2e_install: FAIL: the C program built against the $where libprojd did not run as expected: $out" >&2
        fail=1
    fi
done
# uninstall (same DESTDIR and PREFIX) removes every file install wrote but
# the node's configuration, and says that it kept that; and the metrics
# timers' files (left, they keep an instance's alerts firing for good).
mkdir -p "$tmp/root/var/lib/prometheus/node-exporter"
echo 'projd_up{gpu="0"} 0' >"$tmp/root/var/lib/prometheus/node-exporter/projd-0.prom"
echo 'other_metric 1' >"$tmp/root/var/lib/prometheus/node-exporter/other.prom"
if make -s BUILD="$build" CUDA="$cuda" uninstall DESTDIR="$tmp/root" PREFIX=/usr \
    UNITDIR=/lib/systemd/system >"$tmp/uninstall.log" 2>&1; then
    left=$(cd "$tmp/root" && find . \( -type f -o -type l \) | sort | tr '\n' ' ')
    if [ "$left" != "./etc/projd/projd.json ./var/lib/prometheus/node-exporter/other.prom " ]; then
        echo "e2e_install: FAIL: after make uninstall these are left: $left" >&2
        fail=1
    fi
    grep -q "kept $tmp/root/etc/projd/projd.json" "$tmp/uninstall.log" ||
        { echo "e2e_install: FAIL: make uninstall does not say it kept projd.json" >&2
          cat "$tmp/uninstall.log" >&2; fail=1; }
else
    echo "e2e_install: FAIL: make uninstall" >&2
    cat "$tmp/uninstall.log" >&2
    fail=1
fi
[ "$fail" -eq 0 ] && echo "e2e_install: ok"
exit "$fail"
