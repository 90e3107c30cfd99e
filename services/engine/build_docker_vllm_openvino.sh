#!/usr/bin/env bash
# Build vLLM with the OpenVINO backend (OPEA: "bash build_docker_vllm_openvino.sh [gpu]").
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=services/engine/_lib.sh
source "$here/_lib.sh"

usage() {
    cat <<USAGE
Usage: $(basename "$0") [cpu|gpu] [--tag IMAGE] [--no-cache] [--help]

Builds vLLM with the OpenVINO backend from Dockerfile.vllm-openvino:
  cpu (default)  any x86-64 CPU with AVX2            -> vllm-openvino:latest
  gpu            Intel integrated/discrete GPUs (adds the Intel GPU runtime) -> opea/vllm-arc:latest

Options:
  --tag IMAGE   image name (default: \$VLLM_IMAGE or the one above)
  --no-cache    build without Docker's layer cache
  --help        show this help

Environment:
  VLLM_IMAGE                      default for --tag
  VLLM_OPENVINO_REF               vLLM git tag with the OpenVINO backend (build argument, when set)
  http_proxy https_proxy no_proxy passed as build arguments when set
  DRY_RUN=1                       print the docker command instead of running it
USAGE
}

build_image="${VLLM_IMAGE:-}"
parse_build_options device "$@"
target="$build_target"
image="$build_image"
target="${target:-cpu}"
case "$target" in
    cpu) default_image="vllm-openvino:latest" ;;
    gpu) default_image="opea/vllm-arc:latest" ;;
    *) die "unknown device '$target': expected cpu or gpu" ;;
esac
image="${image:-$default_image}"
check_image "$image"

build_args=(--build-arg "VLLM_OPENVINO_TARGET=$target")
[[ -z "${VLLM_OPENVINO_REF:-}" ]] || build_args+=(--build-arg "VLLM_OPENVINO_REF=$VLLM_OPENVINO_REF")
add_proxy_build_args

cmd=(docker build "${build_no_cache[@]}" "${build_args[@]}" -f "$here/Dockerfile.vllm-openvino" -t "$image" "$here")
run_or_print "${cmd[@]}"
