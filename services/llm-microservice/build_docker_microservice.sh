#!/usr/bin/env bash
# Build the genmesh LLM microservice image (OPEA: "bash build_docker_microservice.sh").
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/../../scripts/lib/common.sh"

usage() {
    cat <<USAGE
Usage: $(basename "$0") [--tag IMAGE] [--no-cache] [--help]

Builds the LLM microservice image from the repository root with
services/llm-microservice/Dockerfile.
USAGE
    build_usage_footer IMAGE opea/llm-genmesh:latest
}

build_image="${IMAGE:-}"
parse_build_options "" "$@"
build_args=()
docker_build "$here/Dockerfile" "$repo_root" opea/llm-genmesh:latest
