#!/usr/bin/env bash
# Launch vLLM with the OpenVINO backend on Intel CPU or GPU
# (OPEA: "bash launch_vllm_service_openvino.sh [-d gpu]").
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib/common.sh"

usage() {
    cat <<USAGE
Usage: $(basename "$0") [-d cpu|gpu] [-p PORT] [-m MODEL] [-h|--help]

Runs the vLLM OpenVINO image (build it with build_docker_vllm_openvino.sh [gpu]) detached,
publishing PORT to the server's :80.

Options:
  -d DEVICE   cpu (default, image vllm-openvino:latest) or gpu (image opea/vllm-arc:latest,
              with --device /dev/dri and the render group of the host)
  -p PORT     host port (default 8008)
  -m MODEL    Hugging Face id or local folder (default \$LLM_MODEL_ID, \$LLM_MODEL,
              else meta-llama/Meta-Llama-3-8B-Instruct)
  -h, --help  show this help

Environment (passed into the container):
  VLLM_OPENVINO_DEVICE                     CPU, GPU, GPU.1, ... (default: CPU, or GPU with -d gpu)
  VLLM_OPENVINO_KVCACHE_SPACE              KV cache GB (default 8 on cpu; on gpu unset = automatic)
  VLLM_OPENVINO_CPU_KV_CACHE_PRECISION     e.g. u8 (when set)
  VLLM_OPENVINO_ENABLE_QUANTIZED_WEIGHTS   ON for U8 weight compression at load (when set)
  HUGGINGFACEHUB_API_TOKEN / HF_TOKEN      passed by name only when set
  RENDER_GID                               gpu: group id of /dev/dri/render* (default: read from it)
  MAX_MODEL_LEN                            --max-model-len (default: 1024 on gpu, the model's on cpu)
  VLLM_EXTRA_ARGS                          more server flags, e.g. "--enable-chunked-prefill --max-num-batched-tokens 256"
  VLLM_IMAGE VLLM_CONTAINER_NAME HF_CACHE_DIR  image, container name (vllm-openvino-server), HF cache folder
  DRY_RUN=1                                print the docker command instead of running it
USAGE
}

device="cpu"
port=8008
model="${LLM_MODEL_ID:-${LLM_MODEL:-meta-llama/Meta-Llama-3-8B-Instruct}}"
# Long options first (getopts knows only short ones).
args=()
for arg in "$@"; do
    case "$arg" in
        --help) usage; exit 0 ;;
        --*) die "unknown option '$arg' (see --help)" ;;
        *) args+=("$arg") ;;
    esac
done
set -- "${args[@]}"
OPTIND=1
while getopts ":hd:p:m:" opt; do
    case "$opt" in
        h) usage; exit 0 ;;
        d) device="$OPTARG" ;;
        p) port="$OPTARG" ;;
        m) model="$OPTARG" ;;
        :) die "-$OPTARG needs a value (see --help)" ;;
        *) die "unknown option '-$OPTARG' (see --help)" ;;
    esac
done
shift $((OPTIND - 1))
[[ $# -eq 0 ]] || die "unexpected argument '$1' (see --help)"

check_port "$port"
[[ -n "$model" ]] || die "model must not be empty"
case "$device" in
    cpu)
        image="${VLLM_IMAGE:-vllm-openvino:latest}"
        ov_device="${VLLM_OPENVINO_DEVICE:-CPU}"
        kv_space="${VLLM_OPENVINO_KVCACHE_SPACE:-8}"
        max_model_len="${MAX_MODEL_LEN:-}"
        ;;
    gpu)
        image="${VLLM_IMAGE:-opea/vllm-arc:latest}"
        ov_device="${VLLM_OPENVINO_DEVICE:-GPU}"
        kv_space="${VLLM_OPENVINO_KVCACHE_SPACE:-}"
        max_model_len="${MAX_MODEL_LEN:-1024}"
        ;;
    *) die "unknown device '$device': expected cpu or gpu" ;;
esac
check_image "$image"
[[ -z "$kv_space" ]] || check_gb VLLM_OPENVINO_KVCACHE_SPACE "$kv_space"
[[ -z "$max_model_len" ]] || check_positive MAX_MODEL_LEN "$max_model_len"
name="${VLLM_CONTAINER_NAME:-vllm-openvino-server}"
check_name "$name"
split_words extra "${VLLM_EXTRA_ARGS:-}"

mount=()
server_model="$model"
served_name="${SERVED_MODEL_NAME:-$model}"
if [[ -e "$model" ]]; then
    local_path="$(abs_path "$model")"
    base="$(basename "$local_path")"
    mount=(-v "$local_path:/models/$base:ro")
    server_model="/models/$base"
    served_name="${SERVED_MODEL_NAME:-$base}"
fi
hf_cache="${HF_CACHE_DIR:-${HOME:-/root}/.cache/huggingface}"

cmd=(docker run -d --rm --name "$name" -p "$port:80" --ipc=host -e "VLLM_OPENVINO_DEVICE=$ov_device")
if [[ "$device" == gpu ]]; then
    gid="$(render_group)"
    cmd+=(--device /dev/dri --group-add "$gid" -v /dev/dri/by-path:/dev/dri/by-path)
fi
[[ -z "$kv_space" ]] || cmd+=(-e "VLLM_OPENVINO_KVCACHE_SPACE=$kv_space")
add_set_env cmd -e VLLM_OPENVINO_CPU_KV_CACHE_PRECISION VLLM_OPENVINO_ENABLE_QUANTIZED_WEIGHTS VLLM_LOGGING_LEVEL
add_hf_token cmd
add_proxy_env cmd
cmd+=(-v "$hf_cache:/root/.cache/huggingface" "${mount[@]}" "$image"
    --model "$server_model" --served-model-name "$served_name" --host 0.0.0.0 --port 80)
[[ -z "$max_model_len" ]] || cmd+=(--max-model-len "$max_model_len")
cmd+=("${extra[@]}")
run_or_print "${cmd[@]}"
