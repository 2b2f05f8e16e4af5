#!/usr/bin/env bash
# sglang-wheels.sh DIR — download SGLang's Python package and the packages
# its linear layers import that the GPU host's image lacks, as wheels for
# its Python (3.12, x86_64), into DIR (default .whl, which .git/info/exclude
# should list). The host has no network; a device visit carries DIR and
# installs it before make test-gpu:
#   python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site DIR/*.whl
#   export PYTHONPATH=/tmp/site
# tests/gpu/python_sglang.sh then runs. sgl_kernel (SGLang's compiled
# kernels, ~1.2 GB, built for torch 2.9; the image has 2.11) is left out:
# the test stands in for it. The list is what `import
# sglang.srt.layers.linear, sglang.srt.layers.quantization.unquant` needed
# on top of the image's packages (device/KINDS.md), found by importing it
# in a clean environment with torch 2.11, transformers 5.17 and
# huggingface-hub 1.33 as the image has them.
set -eu
dir=${1:-.whl}
mkdir -p "$dir"
pkgs=(
    sglang==0.5.10.post1
    annotated-types==0.8.0 compressed-tensors==0.20.1 dill==0.4.1 distro==1.9.0
    gguf==0.19.0 ipython==9.18.1 loguru==0.7.3 openai==2.6.1 orjson==3.13.0
    partial-json-parser==0.2.1.1.post7 pybase64==1.5.1 pydantic==2.14.4
    pydantic-core==2.50.5 pyzmq==27.3.0 sniffio==1.3.1 starlette==1.10.0
    traitlets==5.16.1 typing-inspection==0.4.5
)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
    --platform any -d "$dir" "${pkgs[@]}"
du -sh "$dir"
