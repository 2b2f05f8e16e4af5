#!/usr/bin/env bash
# python_sglang.sh — a GPU suite: the SGLang linear method
# (client/python/projd_sglang.py) inside SGLang's own linear layers, built
# with projd_sglang.quant_config and loaded by SGLang's weight loaders,
# against projd on the cuda backend (the small generated model, its layers
# named by SGLang prefixes), checked by tests/python/test_sglang_gpu.py
# against a float64 reference of the model file.
# Exit 77 (skipped) where there is no GPU, no torch with CUDA, or no SGLang
# Python package (bench/sglang-wheels.sh fetches one for a host without a
# network). Where SGLang's kernel packages (sgl_kernel, flashinfer) do not
# import — sgl_kernel's wheels are built for one torch, and this path calls
# neither — the test puts stand-ins in their place (SGLANG_STAND_INS) and
# says so.
# Usage: tests/gpu/python_sglang.sh BUILD_DIR
set -u
build=${1:-build}
bin=$build/bin
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/daemons.sh
. "$here/../daemons.sh"
pjd_torch_gpu python_sglang "$build"
if ! sgl_version=$("$py" -c 'import importlib.metadata as m; print(m.version("sglang"))' 2>/dev/null); then
    echo "python_sglang: no SGLang Python package here (bench/sglang-wheels.sh): skipped"
    exit 77
fi
# SGLang's kernel packages: compiled for one torch (sgl_kernel), or
# compiling at run time (flashinfer); on a CUDA machine its modules import
# them at load time, for kernels this path does not call.
stand_ins=
for m in sgl_kernel flashinfer; do
    if ! "$py" -c "import $m" >/dev/null 2>&1; then
        stand_ins=${stand_ins:+$stand_ins,}$m
    fi
done
[ -n "$stand_ins" ] && echo "python_sglang: not importable here, so stood in for: $stand_ins (SGLANG_STAND_INS)"
echo "python_sglang: SGLang $sgl_version, torch $("$py" -c 'import torch; print(torch.__version__)')"

pjd_setup python_sglang

pjd_mkmodel small 3
pjd_start main '{ "device": { "backend": "cuda" }, "log": { "level": "warn" },
  "model": { "layers": [
    { "name": "model.layers.0.self_attn.qkv_proj", "tensor": "qkv_gate.weight" },
    { "name": "model.layers.0.self_attn.o_proj", "tensor": "o.weight" },
    { "name": "model.layers.0.mlp.gate_up_proj", "tensor": "pooler.weight" },
    { "name": "model.layers.0.mlp.unpool", "tensor": "unpooler.weight" },
    { "name": "model.layers.0.mlp.gate", "tensor": "router.weight", "format": "split" } ] } }' 60

rc=0
timeout --kill-after=10 300 env PYTHONDONTWRITEBYTECODE=1 PROJD_LIB="$lib" \
    PROJD_TEST_URL="ipc://$tmp/main.sock" PROJD_TEST_MODEL="$model" SGLANG_STAND_INS=$stand_ins \
    "$py" "$here/../python/test_sglang_gpu.py" -v || rc=$?
echo "python_sglang: test_sglang_gpu.py exit $rc"

pjd_stop_all || rc=1
[ "$rc" -eq 0 ] && echo "python_sglang: ok"
exit "$rc"
