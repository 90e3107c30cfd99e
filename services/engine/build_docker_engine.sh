#!/usr/bin/env bash
# Build the genmesh engine image (OpenVINO GenAI continuous batching).
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib/common.sh"

usage() {
    cat <<USAGE
Usage: $(basename "$0") [cpu|gpu] [--tag IMAGE] [--no-cache] [--help]

Builds the engine image from the repository root with services/Dockerfile (SERVICE=engine):
  cpu (default)  -> opea/genmesh-engine:latest
  gpu            -> opea/genmesh-engine:gpu (adds Intel's OpenCL / Level Zero GPU runtime)
USAGE
    build_usage_footer ENGINE_IMAGE "the one above"
}

build_image="${ENGINE_IMAGE:-}"
parse_build_options device "$@"
case "${arg_target:-cpu}" in
    cpu) default_image="opea/genmesh-engine:latest"; gpu_runtime=0 ;;
    gpu) default_image="opea/genmesh-engine:gpu"; gpu_runtime=1 ;;
    *) die "unknown device '$arg_target': expected cpu or gpu" ;;
esac
build_args=(--build-arg SERVICE=engine --build-arg "GPU_RUNTIME=$gpu_runtime")
docker_build "$repo_root/services/Dockerfile" "$repo_root" "$default_image"
