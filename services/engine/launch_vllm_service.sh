#!/usr/bin/env bash
# Launch vLLM's OpenAI server (OPEA: "bash launch_vllm_service.sh [port] [model] [hw_mode] [parallel_number]
# [block_size] [max_num_seqs] [max_seq_len_to_capture]"), in Docker or natively (RUNTIME=native).
#
# What this fixes in OPEA's script: all seven documented parameters are accepted and used (OPEA
# rejects more than four); the CPU container publishes PORT without also asking for --network=host
# (the two contradict each other); the KV cache size comes from VLLM_CPU_KVCACHE_SPACE (OPEA
# hard-codes 40 GB); the Hugging Face token is passed only when one is set.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib/common.sh"

DEFAULT_MODEL="meta-llama/Meta-Llama-3-8B-Instruct"
NATIVE_DEFAULT_MODEL="models/SmolLM2-135M-Instruct-hf"
# vLLM-CPU's tuning variables, passed on when set.
CPU_TUNING_VARS=(VLLM_CPU_OMP_THREADS_BIND VLLM_CPU_NUM_OF_RESERVED_CPU VLLM_LOGGING_LEVEL)

# cpu_dtype CPUINFO: vLLM-CPU's dtype for this CPU, as scripts/bench's vllm_dtype picks it: bfloat16
# where the first "flags" line of CPUINFO has avx512_bf16 or amx_bf16 (native bf16 matmuls), else
# float32 (AVX2 only: vLLM-CPU falls back to torch's emulated bf16 linear, ~0.9 tok/s for a 1.5B
# model, and it timed out at 8 concurrent requests). Says which and why on stderr.
cpu_dtype() {
    local cpuinfo="$1" line flag
    local flags=()
    if [[ -r "$cpuinfo" ]]; then
        while IFS= read -r line || [[ -n "$line" ]]; do
            if [[ "$line" =~ ^flags[[:space:]]*: ]]; then
                read -r -a flags <<<"${line#*:}"
                break
            fi
        done <"$cpuinfo"
    fi
    for flag in "${flags[@]}"; do
        if [[ "$flag" == avx512_bf16 || "$flag" == amx_bf16 ]]; then
            echo "note: --dtype bfloat16: the CPU has $flag ($cpuinfo); set VLLM_DTYPE to override" >&2
            echo bfloat16
            return
        fi
    done
    echo "note: --dtype float32: no avx512_bf16 or amx_bf16 in $cpuinfo's flags, so vLLM-CPU's bf16 would be emulated (slow); set VLLM_DTYPE to override" >&2
    echo float32
}

usage() {
    cat <<USAGE
Usage: $(basename "$0") [port] [model] [hw_mode] [parallel_number] [block_size] [max_num_seqs] [max_seq_len_to_capture]
       $(basename "$0") --help

Starts vLLM's OpenAI-compatible server (/v1/chat/completions, /v1/completions, /v1/models, /health).

Positional parameters (all optional, in this order):
  port                    host port of the endpoint                    (default 8008)
  model                   Hugging Face id or local folder               (default \$LLM_MODEL_ID, \$LLM_MODEL,
                                                                          else $DEFAULT_MODEL;
                                                                          natively $NATIVE_DEFAULT_MODEL)
  hw_mode                 cpu, hpu (Gaudi) or xpu (Intel GPU, IPEX-LLM) (default cpu)
  parallel_number         tensor-parallel size: cards for hpu/xpu       (default 1)
  block_size              KV cache block size in tokens                 (default 128)
  max_num_seqs            sequences batched at once                     (default 256)
  max_seq_len_to_capture  longest sequence run as a captured graph      (default 2048; hpu and xpu:
                          vLLM-CPU >= 0.11 captures no graphs and has no such flag, so on cpu it
                          is validated and reported, not passed)

Examples (from the OPEA guide):
  $(basename "$0")                                                  # CPU, port 8008
  $(basename "$0") 8008 meta-llama/Meta-Llama-3-70b hpu 8           # Gaudi, 8 cards
  $(basename "$0") 8008 meta-llama/Meta-Llama-3-8B-Instruct hpu 1 128 256 2048
  RUNTIME=native $(basename "$0") 8008 models/SmolLM2-135M-Instruct-hf cpu   # no Docker (make vllm-cpu)

Environment:
  RUNTIME=docker|native           docker (default) runs the image; native runs vLLM from \$VLLM_VENV (cpu only)
  DRY_RUN=1                       print the exact command instead of running it
  HUGGINGFACEHUB_API_TOKEN / HF_TOKEN  passed (by name) only when set
  VLLM_CPU_KVCACHE_SPACE          KV cache GB for cpu, a whole number (default 4; OPEA hard-coded 40)
  VLLM_CPU_OMP_THREADS_BIND VLLM_CPU_NUM_OF_RESERVED_CPU VLLM_LOGGING_LEVEL  passed through when set
  VLLM_DTYPE                      --dtype, always used when set (default on cpu: bfloat16 where the CPU has
                                  avx512_bf16 or amx_bf16, else float32, since vLLM-CPU's bf16 is then
                                  emulated and very slow; on hpu: vLLM's own; on xpu: float16)
  GENMESH_CPUINFO                 the file whose "flags" line picks cpu's dtype (default /proc/cpuinfo)
  SERVED_MODEL_NAME               name clients use in "model" (default: the model id, or a local folder's name)
  VLLM_EXTRA_ARGS                 more server flags, split on spaces (e.g. "--max-model-len 4096")
  Docker only:
    VLLM_IMAGE                    image (default opea/vllm:cpu, opea/vllm:hpu, opea/vllm:xpu)
    VLLM_CONTAINER_NAME           container name (default vllm-service)
    DOCKER_NETWORK=host           host networking: the server listens on PORT itself, no -p
    HF_CACHE_DIR                  Hugging Face cache mounted at /data (default \$HOME/.cache/huggingface)
    ENFORCE_EAGER=1               hpu: disable HPU graphs (then max_seq_len_to_capture has no effect)
    PIPELINE_PARALLEL_SIZE        xpu: pipeline stages (default 1)
    LOAD_IN_LOW_BIT               xpu: IPEX-LLM weight format (default sym_int4)
    GPU_MEMORY_UTILIZATION        xpu: fraction of GPU memory (default 0.9)
  Native only:
    VLLM_VENV                     virtualenv with vllm-cpu (default .venv-vllm, see 'make vllm-cpu')
    VLLM_HOST                     bind address (default 127.0.0.1)
USAGE
}

help_if_asked "$@"
if [[ $# -gt 7 ]]; then
    die "at most 7 parameters (port model hw_mode parallel_number block_size max_num_seqs max_seq_len_to_capture), got $#"
fi

check_runtime

if [[ "$runtime" == native ]]; then
    default_model="${LLM_MODEL_ID:-${LLM_MODEL:-$NATIVE_DEFAULT_MODEL}}"
else
    default_model="${LLM_MODEL_ID:-${LLM_MODEL:-$DEFAULT_MODEL}}"
fi
port="${1:-8008}"
model="${2:-$default_model}"
hw_mode="${3:-cpu}"
parallel_number="${4:-1}"
block_size="${5:-128}"
max_num_seqs="${6:-256}"
max_seq_len_to_capture="${7:-2048}"

check_port "$port"
[[ -n "$model" ]] || die "model must not be empty"
case "$hw_mode" in
    cpu | hpu | xpu) ;;
    openvino) die "hw_mode 'openvino' has its own script: launch_vllm_service_openvino.sh [-d gpu]" ;;
    *) die "unknown hw_mode '$hw_mode': expected cpu, hpu or xpu" ;;
esac
check_positive parallel_number "$parallel_number"
check_positive block_size "$block_size"
check_positive max_num_seqs "$max_num_seqs"
check_positive max_seq_len_to_capture "$max_seq_len_to_capture"

if [[ "$hw_mode" == cpu && $# -ge 7 ]]; then
    echo "note: max_seq_len_to_capture=$max_seq_len_to_capture has no effect on cpu (vLLM-CPU captures no graphs); used on hpu and xpu" >&2
fi

kv_space="${VLLM_CPU_KVCACHE_SPACE:-4}"
check_gb VLLM_CPU_KVCACHE_SPACE "$kv_space"
dtype="${VLLM_DTYPE:-}"
split_words extra "${VLLM_EXTRA_ARGS:-}"

# The model as the server sees it: a local folder is mounted read-only at /models/NAME.
# A relative folder that is not here may be meant from the repository root (models/...).
model="$(from_repo_root "$model")"
served_name="${SERVED_MODEL_NAME:-}"
mount=()
server_model="$model"
if [[ -e "$model" ]]; then
    local_path="$(abs_path "$model")"
    base="$(basename "$local_path")"
    served_name="${served_name:-$base}"
    if [[ "$runtime" == docker ]]; then
        mount=(-v "$local_path:/models/$base:ro")
        server_model="/models/$base"
    else
        server_model="$local_path"
    fi
elif [[ "$model" == /* || "$model" == ./* || "$model" == models/* ]]; then
    die "model folder '$model' does not exist (for the default model run 'make vllm-cpu')"
fi
served_name="${served_name:-$model}"

# vLLM-CPU's dtype, unless VLLM_DTYPE says: bf16 only where the CPU multiplies bf16 natively.
if [[ "$hw_mode" == cpu && -z "$dtype" ]]; then
    dtype="$(cpu_dtype "${GENMESH_CPUINFO:-/proc/cpuinfo}")"
fi

# Server flags shared by every mode; the seven positional parameters all land here.
server_args=(--model "$server_model" --served-model-name "$served_name"
    --tensor-parallel-size "$parallel_number" --block-size "$block_size" --max-num-seqs "$max_num_seqs")

if [[ "$runtime" == native ]]; then
    [[ "$hw_mode" == cpu ]] || die "RUNTIME=native runs vLLM-CPU only; hw_mode '$hw_mode' needs its Docker image (RUNTIME=docker)"
    venv="${VLLM_VENV:-$repo_root/.venv-vllm}"
    python="$venv/bin/python"
    if [[ ! -x "$python" ]] && ! is_dry_run; then
        echo "error: no vLLM virtualenv at $venv (run 'make vllm-cpu' first)" >&2
        exit 1
    fi
    host="${VLLM_HOST:-127.0.0.1}"
    export_hf_token || true
    cmd=(env "VLLM_CPU_KVCACHE_SPACE=$kv_space")
    add_set_env cmd "" "${CPU_TUNING_VARS[@]}"
    # vLLM >= 0.11 has no --max-seq-len-to-capture and captures no graphs on CPU: validated above only.
    cmd+=("$python" -m vllm.entrypoints.openai.api_server "${server_args[@]}"
        --host "$host" --port "$port" --dtype "$dtype" "${extra[@]}")
    run_or_print "${cmd[@]}"
    exit 0
fi

name="${VLLM_CONTAINER_NAME:-vllm-service}"
check_name "$name"
network="${DOCKER_NETWORK:-}"
if [[ "$network" == host ]]; then
    net=(--network=host -e "GENMESH_VLLM_PORT=$port")
    listen_port="$port"
else
    [[ -z "$network" ]] || die "DOCKER_NETWORK may only be 'host' (or unset for a published port)"
    net=(-p "$port:80")
    listen_port=80
fi
hf_cache="${HF_CACHE_DIR:-${HOME:-/root}/.cache/huggingface}"

cmd=(docker run -d --rm --name "$name" "${net[@]}" --ipc=host)
case "$hw_mode" in
    cpu)
        image="${VLLM_IMAGE:-opea/vllm:cpu}"
        cmd+=(-e "VLLM_CPU_KVCACHE_SPACE=$kv_space")
        add_set_env cmd -e "${CPU_TUNING_VARS[@]}"
        mode_args=(--dtype "$dtype")
        ;;
    hpu)
        image="${VLLM_IMAGE:-opea/vllm:hpu}"
        cmd+=(--runtime=habana -e HABANA_VISIBLE_DEVICES=all -e OMPI_MCA_btl_vader_single_copy_mechanism=none
            --cap-add=sys_nice -e PT_HPU_ENABLE_LAZY_COLLECTIVES=true)
        add_set_env cmd -e VLLM_LOGGING_LEVEL
        mode_args=(--max-seq-len-to-capture "$max_seq_len_to_capture")
        [[ -z "$dtype" ]] || mode_args+=(--dtype "$dtype")
        if [[ "${ENFORCE_EAGER:-0}" == "1" ]]; then
            mode_args+=(--enforce-eager)
        fi
        ;;
    xpu)
        image="${VLLM_IMAGE:-opea/vllm:xpu}"
        pp="${PIPELINE_PARALLEL_SIZE:-1}"
        check_positive PIPELINE_PARALLEL_SIZE "$pp"
        cmd+=(--group-add video --device=/dev/dri --shm-size=16g -e "no_proxy=localhost,127.0.0.1")
        add_set_env cmd -e VLLM_LOGGING_LEVEL
        # IPEX-LLM runs eagerly (its guide); max_seq_len_to_capture is still passed on.
        mode_args=(--device xpu --dtype "${dtype:-float16}" --enforce-eager --trust-remote-code
            --load-in-low-bit "${LOAD_IN_LOW_BIT:-sym_int4}"
            --gpu-memory-utilization "${GPU_MEMORY_UTILIZATION:-0.9}"
            --pipeline-parallel-size "$pp" --max-seq-len-to-capture "$max_seq_len_to_capture")
        if ((parallel_number * pp > 1)); then
            mode_args+=(--distributed-executor-backend ray)
        fi
        ;;
esac
check_image "$image"
add_hf_token cmd
add_proxy_env cmd
cmd+=(-v "$hf_cache:/data" -e HF_HOME=/data "${mount[@]}" "$image"
    "${server_args[@]}" --host 0.0.0.0 --port "$listen_port" "${mode_args[@]}" "${extra[@]}")
run_or_print "${cmd[@]}"
