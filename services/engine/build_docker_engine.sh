#!/usr/bin/env bash
# Build the genmesh engine image (OpenVINO GenAI continuous batching).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
# shellcheck source=services/engine/_lib.sh
source "$here/_lib.sh"

usage() {
    cat <<USAGE
Usage: $(basename "$0") [cpu|gpu] [--tag IMAGE] [--no-cache] [--help]

Builds the engine image from the repository root with services/engine/Dockerfile:
  cpu (default)  -> opea/genmesh-engine:latest
  gpu            -> opea/genmesh-engine:gpu (adds Intel's OpenCL / Level Zero GPU runtime)

Options:
  --tag IMAGE   image name (default: \$ENGINE_IMAGE or the one above)
  --no-cache    build without Docker's layer cache
  --help        show this help

Environment:
  ENGINE_IMAGE                    default for --tag
  http_proxy https_proxy no_proxy passed as build arguments when set
  DRY_RUN=1                       print the docker command instead of running it
USAGE
}

build_image="${ENGINE_IMAGE:-}"
parse_build_options device "$@"
target="$build_target"
image="$build_image"
case "${target:-cpu}" in
    cpu) default_image="opea/genmesh-engine:latest"; gpu_runtime=0 ;;
    gpu) default_image="opea/genmesh-engine:gpu"; gpu_runtime=1 ;;
    *) die "unknown device '$target': expected cpu or gpu" ;;
esac
image="${image:-$default_image}"
check_image "$image"

build_args=(--build-arg "GPU_RUNTIME=$gpu_runtime")
add_proxy_build_args
cmd=(docker build "${build_no_cache[@]}" "${build_args[@]}" -f "$here/Dockerfile" -t "$image" "$root")
run_or_print "${cmd[@]}"
