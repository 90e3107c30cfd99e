#!/usr/bin/env bash
# Build the genmesh LLM microservice image (OPEA: "bash build_docker_microservice.sh").
set -euo pipefail

usage() {
    cat <<USAGE
Usage: $(basename "$0") [--tag IMAGE] [--no-cache] [--help]

Builds the LLM microservice image from the repository root with
services/llm-microservice/Dockerfile.

Options:
  --tag IMAGE   image name (default: \$IMAGE or opea/llm-genmesh:latest)
  --no-cache    build without Docker's layer cache
  --help        show this help

Environment:
  IMAGE                           default for --tag
  http_proxy https_proxy no_proxy passed as build arguments when set
  DRY_RUN=1                       print the docker command instead of running it
USAGE
}

image="${IMAGE:-opea/llm-genmesh:latest}"
no_cache=()

while [[ $# -gt 0 ]]; do
    case "$1" in
        --tag)
            [[ $# -ge 2 && -n "$2" ]] || { echo "error: --tag needs an image name" >&2; exit 2; }
            image="$2"
            shift 2
            ;;
        --no-cache) no_cache=(--no-cache); shift ;;
        -h | --help) usage; exit 0 ;;
        *) echo "error: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done

if [[ ! "$image" =~ ^[a-z0-9][a-z0-9._/:-]*$ ]]; then
    echo "error: '$image' is not a valid image name" >&2
    exit 2
fi

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"

cmd=(docker build "${no_cache[@]}" -f "$here/Dockerfile" -t "$image")
for var in http_proxy https_proxy no_proxy; do
    if [[ -n "${!var:-}" ]]; then
        cmd+=(--build-arg "$var")
    fi
done
cmd+=("$root")

if [[ "${DRY_RUN:-0}" == "1" ]]; then
    printf '%q ' "${cmd[@]}"
    printf '\n'
    exit 0
fi
exec "${cmd[@]}"
