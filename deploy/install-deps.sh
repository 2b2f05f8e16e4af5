#!/usr/bin/env bash
# Check (and, as root, install) the Debian packages projd builds against.
# Usage: install-deps.sh [--check]   --check: report only, never install.
# Exit 0 when everything is present afterwards, 1 otherwise (with the exact
# command to run printed on stderr).
set -u
pkgs=(build-essential pkg-config libuv1-dev libnng-dev libcjson-dev libsystemd-dev check clang
      libclang-rt-14-dev gnuplot-nox python3)
# nng ships no pkg-config file on Debian 12, so every package is checked by dpkg.
missing=()
for p in "${pkgs[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$p")
    fi
done
if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
cmd="apt-get install -y --no-install-recommends ${missing[*]}"
if [ "${1:-}" != "--check" ] && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    echo "install-deps: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    # A name of its own: a fixed one in /tmp, written as root, is one any
    # user could have put a symlink at.
    log=$(mktemp /tmp/projd-apt.XXXXXX.log) || exit 1
    # A fresh cloud machine's first boot may have unattended-upgrades
    # holding dpkg's lock: wait for it (10 minutes at most) rather than fail.
    lock=(-o DPkg::Lock::Timeout=600)
    if ! apt-get "${lock[@]}" install -y -qq --no-install-recommends "${missing[@]}" >"$log" 2>&1; then
        # A fresh machine may have no package lists yet.
        apt-get "${lock[@]}" update -qq >>"$log" 2>&1
        apt-get "${lock[@]}" install -y -qq --no-install-recommends "${missing[@]}" >>"$log" 2>&1 || {
            echo "install-deps: apt-get failed; see $log" >&2
            tail -n 20 "$log" >&2
            exit 1
        }
    fi
    rm -f "$log"
    exit 0
fi
echo "install-deps: missing packages: ${missing[*]}" >&2
# One command that runs whole as root (a line of two joined by && pasted
# after sudo would run its second part as the user).
echo "install-deps: run as root:  sudo sh -c 'apt-get update && $cmd'" >&2
exit 1
