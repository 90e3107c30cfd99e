#!/usr/bin/env bash
# Start the genmesh LLM microservice container (OPEA: "bash launch_microservice.sh").
set -euo pipefail

usage() {
    cat <<USAGE
Usage: $(basename "$0") [--endpoint URL] [--model ID] [--port PORT] [--image IMAGE] [--name NAME] [--help]

Runs the LLM microservice image detached, publishing PORT (default 9000) to the
container's :9000. The engine URL must be reachable from inside the container
(e.g. http://\${host_ip}:8008, not 127.0.0.1).

Options:
  --endpoint URL  engine base URL (default: \$LLM_ENDPOINT, else \$vLLM_ENDPOINT)
  --model ID      model name sent when a request names none (default: \$LLM_MODEL_ID, else \$LLM_MODEL)
  --port PORT     host port (default: \$PORT or 9000)
  --image IMAGE   image (default: \$IMAGE or opea/llm-genmesh:latest)
  --name NAME     container name (default: llm-genmesh-server)
  --help          show this help

Environment:
  OPENAI_API_KEY                  passed by name (its value is never printed) when set
  http_proxy https_proxy no_proxy passed by name when set
  DRY_RUN=1                       print the docker command instead of running it
USAGE
}

endpoint="${LLM_ENDPOINT:-${vLLM_ENDPOINT:-}}"
model="${LLM_MODEL_ID:-${LLM_MODEL:-}}"
port="${PORT:-9000}"
image="${IMAGE:-opea/llm-genmesh:latest}"
name="llm-genmesh-server"

need_value() {
    [[ $# -ge 2 && -n "$2" ]] || { echo "error: $1 needs a value (see --help)" >&2; exit 2; }
}

while [[ $# -gt 0 ]]; do
    case "$1" in
        --endpoint) need_value "$@"; endpoint="$2"; shift 2 ;;
        --model) need_value "$@"; model="$2"; shift 2 ;;
        --port) need_value "$@"; port="$2"; shift 2 ;;
        --image) need_value "$@"; image="$2"; shift 2 ;;
        --name) need_value "$@"; name="$2"; shift 2 ;;
        -h | --help) usage; exit 0 ;;
        *) echo "error: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done

if [[ -z "$endpoint" ]]; then
    echo "error: no engine URL: set LLM_ENDPOINT (or vLLM_ENDPOINT) or pass --endpoint http://HOST:8008" >&2
    exit 2
fi
if [[ ! "$endpoint" =~ ^https?://[^[:space:]/]+(/[^[:space:]]*)?$ ]]; then
    echo "error: endpoint '$endpoint' is not an http(s) URL" >&2
    exit 2
fi
if [[ ! "$port" =~ ^[0-9]+$ ]] || ((port < 1 || port > 65535)); then
    echo "error: port '$port' is not a number from 1 to 65535" >&2
    exit 2
fi
if [[ ! "$name" =~ ^[a-zA-Z0-9][a-zA-Z0-9_.-]*$ ]]; then
    echo "error: '$name' is not a valid container name" >&2
    exit 2
fi

cmd=(docker run -d --rm --name "$name" -p "$port:9000" --ipc=host -e "LLM_ENDPOINT=$endpoint")
if [[ -n "$model" ]]; then
    cmd+=(-e "LLM_MODEL_ID=$model")
fi
for var in OPENAI_API_KEY http_proxy https_proxy no_proxy; do
    if [[ -n "${!var:-}" ]]; then
        cmd+=(-e "$var")
    fi
done
cmd+=("$image")

if [[ "${DRY_RUN:-0}" == "1" ]]; then
    printf '%q ' "${cmd[@]}"
    printf '\n'
    exit 0
fi
exec "${cmd[@]}"
