# GPU image: TensorFlow 2.21 (GPU build) + Horovod 0.28.1 with NCCL and Gloo.
#
# NOT BUILT HERE: the machines this project is developed and tested on have no
# Docker engine and no GPU, so this file has been written from the documented
# requirements and not run. The CPU set-up it mirrors (scripts/setup.sh and
# scripts/build_horovod.sh) is what the test suite exercises.
#
# Versions:
#   * TensorFlow 2.21.0's `and-cuda` extra pulls CUDA 12.5.x runtime libraries,
#     cuDNN 9.3+ and NCCL 2.27+ as pip wheels, so the base image only has to
#     provide a matching CUDA toolkit (nvcc and headers) for Horovod's CUDA
#     kernels plus NCCL headers: nvidia/cuda 12.5.1 devel on Ubuntu 22.04.
#   * Python 3.11 comes from Ubuntu 22.04's own python3.11 packages.
#   * Horovod is linked against NCCL (libnccl_static.a from libnccl-dev) and the
#     CUDA runtime statically, so it does not clash with the NCCL wheel TF loads.
#
# Build:  docker build -t largebatch:gpu .
#         (add --build-arg HOROVOD_BUILD_CUDA_CC_LIST=80 to compile only for A100s)
# Run:    docker run --gpus all --rm largebatch:gpu --config configs/<name>.yaml
#         docker run --gpus all --rm --entrypoint horovodrun largebatch:gpu \
#             -np 4 -H localhost:4 python run.py --config configs/<name>.yaml
ARG CUDA_IMAGE=nvidia/cuda:12.5.1-devel-ubuntu22.04
FROM ${CUDA_IMAGE}

# GPU architectures Horovod's CUDA kernels are compiled for (V100, T4, A100,
# A10/RTX 30xx, L4/RTX 40xx, H100). Empty means every one nvcc knows (slow).
ARG HOROVOD_BUILD_CUDA_CC_LIST=70,75,80,86,89,90

ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    LARGEBATCH_VENV=/opt/venv \
    LARGEBATCH_CACHE=/tmp/largebatch-cache \
    PATH=/opt/venv/bin:${PATH}

# System packages: Python 3.11, the compilers and CMake for Horovod, the hash
# library headers TF 2.21's headers include, NCCL's headers and static library,
# the Fashion-MNIST data set package the configs read, and tcmalloc, which
# run.py restarts under (core/allocator.py).
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      python3.11 python3.11-dev python3.11-venv \
      build-essential cmake ca-certificates \
      libhighwayhash-dev libfarmhash-dev \
      dataset-fashion-mnist libtcmalloc-minimal4 \
 && if ! dpkg -s libnccl-dev >/dev/null 2>&1; then \
      apt-get install -y --no-install-recommends libnccl2 libnccl-dev; \
    fi \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /workspace

# Python packages: requirements.txt with the GPU build of TensorFlow instead of
# tensorflow-cpu (same version), with its CUDA/cuDNN/NCCL wheels.
COPY requirements.txt /workspace/requirements.txt
RUN python3.11 -m venv /opt/venv \
 && sed -E 's/^tensorflow-cpu==/tensorflow[and-cuda]==/' requirements.txt > /tmp/requirements-gpu.txt \
 && grep -q '^tensorflow\[and-cuda\]==' /tmp/requirements-gpu.txt \
 && python -m pip install -r /tmp/requirements-gpu.txt \
 && rm /tmp/requirements-gpu.txt

# Horovod: the same script as on CPU machines, with NCCL for GPU collectives.
# The CUDA driver stub is registered with the dynamic linker only for the build
# and check (there is no driver at build time), as Horovod's own images do.
# build_horovod.sh applies the TF 2.21 source fixes, including the GPU-only ones
# (AsGpuStreamValue, xla::StatusOr), and the wake-on-enqueue patch of the
# background loop (as on CPU), and fails unless `horovodrun --check-build`
# shows TensorFlow, Gloo and NCCL.
COPY scripts/build_horovod.sh /workspace/scripts/build_horovod.sh
RUN if [ -z "${HOROVOD_BUILD_CUDA_CC_LIST}" ]; then unset HOROVOD_BUILD_CUDA_CC_LIST; fi \
 && ldconfig /usr/local/cuda/targets/x86_64-linux/lib/stubs \
 && HOROVOD_GPU_OPERATIONS=NCCL \
    HOROVOD_NCCL_LINK=STATIC \
    HOROVOD_CUDA_HOME=/usr/local/cuda \
    bash scripts/build_horovod.sh \
 && ldconfig \
 && rm -rf /tmp/largebatch-cache

COPY . /workspace

# The environment's horovodrun runs scripts/horovodrun.py, as scripts/setup.sh
# makes it on CPU machines: Horovod's launcher with a stop that gives the
# workers time to save and exits 128 + the signal (framework/engines/horovod_launcher.py).
RUN printf '#!/bin/sh\nexec /opt/venv/bin/python /workspace/scripts/horovodrun.py "$@"\n' \
      > /opt/venv/bin/horovodrun \
 && chmod +x /opt/venv/bin/horovodrun

ENTRYPOINT ["python", "run.py"]
