#!/usr/bin/env bash
# Start the genmesh LLM microservice container (OPEA: "bash launch_microservice.sh").
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib/common.sh"

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

parse_options "" --endpoint=endpoint --model=model --port=port --image=image --name=name -- "$@"

[[ -n "$endpoint" ]] || die "no engine URL: set LLM_ENDPOINT (or vLLM_ENDPOINT) or pass --endpoint http://HOST:8008"
[[ "$endpoint" =~ ^https?://[^[:space:]/]+(/[^[:space:]]*)?$ ]] || die "endpoint '$endpoint' is not an http(s) URL"
check_port "$port"
check_name "$name"

cmd=(docker run -d --rm --name "$name" -p "$port:9000" --ipc=host -e "LLM_ENDPOINT=$endpoint")
if [[ -n "$model" ]]; then
    cmd+=(-e "LLM_MODEL_ID=$model")
fi
add_env_by_name cmd OPENAI_API_KEY http_proxy https_proxy no_proxy
cmd+=("$image")
run_or_print "${cmd[@]}"
