#!/usr/bin/env bash
# Session 40, visit 2: evhandle_probe (do IPC event handles' bytes come
# back for new events, and what does an import of the old bytes see?),
# without MPS and under it.
set -u
chmod +x .devrun-pack/evhandle_probe
echo "== without MPS"; timeout 60 .devrun-pack/evhandle_probe
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpsp CUDA_MPS_LOG_DIRECTORY=/tmp/mpsl
mkdir -p /tmp/mpsp /tmp/mpsl
timeout 20 nvidia-cuda-mps-control -d && echo "== under MPS" && timeout 60 .devrun-pack/evhandle_probe
echo quit | timeout 20 nvidia-cuda-mps-control
