#!/usr/bin/env bash
# Session 40, visit 1: the session's code (signals during the start,
# EXTEND_TIMEOUT_USEC per step, test_cuda_backend U): bench/final-check.sh
# (GPU suites under MPS, the fault tests, the benchmark twice); then the
# reference model's start as systemd would hear it (every notification,
# timed), a SIGTERM in its cuda start, and two facts for the units: where
# MPS's control daemon writes its pid, and whether this machine runs
# systemd.
. bench/visit-common.sh
V=bench/results/2026-12-04-s40/visit1
bash bench/final-check.sh "$B" "$OUT/final" "$(cat .devrun-pack/commit)"
cp /tmp/backend/gpu-fault.log /tmp/backend/gpu-tests.log "$OUT/final/" 2>/dev/null
grep -E "^U:|== U|FAIL|checks passed|^--- |GPU suites|^Ran|^OK" "$OUT/final/gpu-tests.log" "$OUT/final/gpu-fault.log" | cut -c1-200 | head -40
timeout 40 "$B/bin/projctl" mkmodel --out /tmp/ref.safetensors >/dev/null || exit 1
mkdir -p -m 700 /tmp/pjs
echo "== the reference model's start, as systemd hears it"
timeout 90 python3 $V/notify_log.py /tmp/pjs/n1 60 -- "$B/bin/projd" --socket ipc:///tmp/pjs/a.sock \
    --backend cuda --model /tmp/ref.safetensors 2>"$OUT/start.log" | cut -c1-220
grep -E 'startup|during the start|stopped' "$OUT/start.log" | cut -c1-300
echo "== SIGTERM once the lanes' phase is announced"
timeout 90 python3 $V/notify_log.py --term-at "starting backend cuda: the lanes" /tmp/pjs/n2 60 -- \
    "$B/bin/projd" --socket ipc:///tmp/pjs/b.sock --backend cuda --model /tmp/ref.safetensors \
    2>"$OUT/term.log" | cut -c1-220
grep -E 'during the start|stopped|error' "$OUT/term.log" | cut -c1-300
ls -la /tmp/pjs
echo "== MPS control daemon: its files"
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpsp CUDA_MPS_LOG_DIRECTORY=/tmp/mpsl
mkdir -p /tmp/mpsp /tmp/mpsl
timeout 20 nvidia-cuda-mps-control -d; echo "mps -d exit $?"
sleep 1
ls -la /tmp/mpsp /tmp/mpsl
for f in /tmp/mpsp/*.pid /tmp/mpsl/*.pid; do [ -f "$f" ] && echo "$f: $(cat "$f")"; done
pgrep -a -f nvidia-cuda-mps-control
echo quit | timeout 20 nvidia-cuda-mps-control; sleep 1
echo "after quit:"; ls /tmp/mpsp; pgrep -a -f nvidia-cuda-mps || echo "no MPS process"
echo "== pid 1: $(cat /proc/1/comm); $(systemctl --version 2>&1 | head -1)"
