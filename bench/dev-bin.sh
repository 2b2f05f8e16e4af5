# shellcheck shell=bash
# dev-bin.sh — sourced by the device-side bench scripts (ab-bin.sh,
# ncu-deep.sh) from the device copy's root. D is the folder of the built
# binaries: PJ_DEV, default .devrun; flat (D/projd-bench, as bench/README.md
# packs .devrun) or a pack folder (D/bin, D/tests/gpu, D/lib, as
# device/bundle-libs.sh leaves it).
D=${PJ_DEV:-.devrun}

# The path of binary $1 in D: flat, under bin/, or under tests/gpu/ (the
# flat path when none is there).
dev_bin() {
    local p
    for p in "$D/$1" "$D/bin/$1" "$D/tests/gpu/$1"; do
        [ -x "$p" ] && { echo "$p"; return; }
    done
    echo "$D/$1"
}

# Stops the calling script, naming what is missing, unless every binary
# named is in D; then puts D's libraries first on the library path.
dev_setup() {
    local b
    for b in "$@"; do
        [ -x "$(dev_bin "$b")" ] ||
            { echo "${0##*/}: no $b in $D, $D/bin or $D/tests/gpu" >&2; exit 2; }
    done
    LD_LIBRARY_PATH=$(cd "$D" && pwd)/lib:${LD_LIBRARY_PATH:-}
    export LD_LIBRARY_PATH
}
