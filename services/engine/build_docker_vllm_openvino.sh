#!/usr/bin/env bash
# Build vLLM with the OpenVINO backend (OPEA: "bash build_docker_vllm_openvino.sh [gpu]").
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/../../scripts/lib/common.sh"

usage() {
    cat <<USAGE
Usage: $(basename "$0") [cpu|gpu] [--tag IMAGE] [--no-cache] [--help]

Builds vLLM with the OpenVINO backend from Dockerfile.vllm-openvino:
  cpu (default)  any x86-64 CPU with AVX2            -> vllm-openvino:latest
  gpu            Intel integrated/discrete GPUs (adds the Intel GPU runtime) -> opea/vllm-arc:latest
USAGE
    build_usage_footer VLLM_IMAGE "the one above" \
        "VLLM_OPENVINO_REF               vLLM git tag with the OpenVINO backend (build argument, when set)"
}

build_image="${VLLM_IMAGE:-}"
parse_build_options device "$@"
target="${arg_target:-cpu}"
case "$target" in
    cpu) default_image="vllm-openvino:latest" ;;
    gpu) default_image="opea/vllm-arc:latest" ;;
    *) die "unknown device '$target': expected cpu or gpu" ;;
esac
build_args=(--build-arg "VLLM_OPENVINO_TARGET=$target")
add_set_env build_args --build-arg VLLM_OPENVINO_REF
docker_build "$here/Dockerfile.vllm-openvino" "$here" "$default_image"
