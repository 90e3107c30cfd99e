#!/usr/bin/env bash
# Launch the genmesh engine (OpenVINO GenAI continuous batching) in Docker or natively.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib/common.sh"

DEFAULT_MODEL="models/SmolLM2-135M-Instruct.Q4_1.gguf"

usage() {
    cat <<USAGE
Usage: $(basename "$0") [port] [model] [device]
       $(basename "$0") --help

Starts the genmesh engine: an OpenAI-compatible server (/v1/chat/completions, /v1/completions,
/v1/models, /health, /metrics) over OpenVINO GenAI continuous batching.

Positional parameters (all optional, in this order):
  port    host port                                  (default 8008)
  model   GGUF file or OpenVINO IR folder on this host (default \$ENGINE_MODEL or $DEFAULT_MODEL)
  device  cpu or gpu (Intel GPU: --device /dev/dri and the host's render group) (default cpu)

Environment:
  RUNTIME=docker|native   docker (default) runs the image; native runs genmesh-engine from this checkout
  DRY_RUN=1               print the exact command instead of running it
  ENGINE_CACHE_SIZE       KV cache GB (default 2)
  ENGINE_MAX_NUM_SEQS ENGINE_MAX_NUM_BATCHED_TOKENS ENGINE_PLUGIN_CONFIG  passed on when set
  SERVED_MODEL_NAME       name clients use in "model" (default: from the file name)
  Docker only:  ENGINE_IMAGE (opea/genmesh-engine:latest, gpu: opea/genmesh-engine:gpu), ENGINE_CONTAINER_NAME (genmesh-engine),
                RENDER_GID (gpu: group of /dev/dri/render*, default read from it)
  Native only:  ENGINE_HOST (default 127.0.0.1), GENMESH_ENGINE (the genmesh-engine program, default .venv/bin/genmesh-engine
                or the one on PATH)
USAGE
}

help_if_asked "$@"
[[ $# -le 3 ]] || die "at most 3 parameters (port model device), got $#"

check_runtime

port="${1:-8008}"
model="${2:-${ENGINE_MODEL:-$DEFAULT_MODEL}}"
device="${3:-cpu}"
check_port "$port"
case "$device" in
    cpu | CPU) device=cpu; ov_device=CPU ;;
    gpu | GPU) device=gpu; ov_device=GPU ;;
    GPU.[0-9]*) ov_device="$device"; device=gpu ;;
    *) die "unknown device '$device': expected cpu or gpu" ;;
esac
cache_size="${ENGINE_CACHE_SIZE:-2}"
[[ "$cache_size" =~ ^[0-9]+$ ]] || die "ENGINE_CACHE_SIZE '$cache_size' is not a whole number of GB"

# The engine reads a local GGUF file or OpenVINO IR folder; relative paths are from the repo root.
model="$(from_repo_root "$model")"
if [[ ! -e "$model" ]]; then
    if is_dry_run; then
        echo "warning: model '$model' does not exist here (run 'make model')" >&2
    else
        echo "error: model '$model' not found: a GGUF file or OpenVINO IR folder (run 'make model')" >&2
        exit 1
    fi
fi

engine_args=(--device "$ov_device" --cache-size "$cache_size")
[[ -z "${SERVED_MODEL_NAME:-}" ]] || engine_args+=(--served-model-name "$SERVED_MODEL_NAME")
[[ -z "${ENGINE_MAX_NUM_SEQS:-}" ]] || engine_args+=(--max-num-seqs "$ENGINE_MAX_NUM_SEQS")
[[ -z "${ENGINE_MAX_NUM_BATCHED_TOKENS:-}" ]] || engine_args+=(--max-num-batched-tokens "$ENGINE_MAX_NUM_BATCHED_TOKENS")
[[ -z "${ENGINE_PLUGIN_CONFIG:-}" ]] || engine_args+=(--plugin-config "$ENGINE_PLUGIN_CONFIG")

if [[ "$runtime" == native ]]; then
    program="${GENMESH_ENGINE:-}"
    if [[ -z "$program" ]]; then
        if [[ -x "$repo_root/.venv/bin/genmesh-engine" ]]; then
            program="$repo_root/.venv/bin/genmesh-engine"
        elif have genmesh-engine; then
            program="$(command -v genmesh-engine)"
        elif is_dry_run; then
            program="genmesh-engine"
        else
            echo "error: genmesh-engine not found (run 'make venv', or set GENMESH_ENGINE)" >&2
            exit 1
        fi
    fi
    run_or_print "$program" --model "$model" --host "${ENGINE_HOST:-127.0.0.1}" --port "$port" "${engine_args[@]}"
    exit 0
fi

name="${ENGINE_CONTAINER_NAME:-genmesh-engine}"
check_name "$name"
if [[ "$device" == gpu ]]; then
    image="${ENGINE_IMAGE:-opea/genmesh-engine:gpu}"
else
    image="${ENGINE_IMAGE:-opea/genmesh-engine:latest}"
fi
check_image "$image"
local_path="$model"
[[ ! -e "$model" ]] || local_path="$(abs_path "$model")"
base="$(basename "$local_path")"

cmd=(docker run -d --rm --name "$name" -p "$port:8008")
if [[ "$device" == gpu ]]; then
    gid="$(render_group)"
    cmd+=(--device /dev/dri --group-add "$gid")
fi
add_proxy_env cmd
cmd+=(-v "$local_path:/models/$base:ro" "$image" --model "/models/$base" --host 0.0.0.0 --port 8008 "${engine_args[@]}")
run_or_print "${cmd[@]}"
