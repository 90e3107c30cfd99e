#!/usr/bin/env bash
# Build the genmesh LLM microservice image (OPEA: "bash build_docker_microservice.sh").
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib/common.sh"

usage() {
    cat <<USAGE
Usage: $(basename "$0") [--tag IMAGE] [--no-cache] [--help]

Builds the LLM microservice image from the repository root with
services/Dockerfile (SERVICE=microservice).
USAGE
    build_usage_footer IMAGE opea/llm-genmesh:latest
}

build_image="${IMAGE:-}"
parse_build_options "" "$@"
build_args=(--build-arg SERVICE=microservice)
docker_build "$repo_root/services/Dockerfile" "$repo_root" opea/llm-genmesh:latest
