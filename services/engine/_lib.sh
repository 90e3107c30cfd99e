#!/usr/bin/env bash
# Helpers sourced by the build/launch scripts of services/engine (not run on its own).
# shellcheck shell=bash

# die MESSAGE: print "error: MESSAGE" on stderr and exit 2 (a usage error).
die() {
    echo "error: $*" >&2
    exit 2
}

# need_value FLAG ARGS...: fail unless FLAG is followed by a non-empty value.
need_value() {
    [[ $# -ge 2 && -n "$2" ]] || die "$1 needs a value (see --help)"
}

# check_port VALUE: an integer from 1 to 65535.
check_port() {
    if [[ ! "$1" =~ ^[0-9]+$ ]] || ((10#$1 < 1 || 10#$1 > 65535)); then
        die "port '$1' is not a number from 1 to 65535"
    fi
}

# check_positive NAME VALUE: a positive integer.
check_positive() {
    if [[ ! "$2" =~ ^[0-9]+$ ]] || ((10#$2 < 1)); then
        die "$1 '$2' is not a positive integer"
    fi
}

# check_gb NAME VALUE: a whole number of GB (vLLM parses these variables with int()).
check_gb() {
    if [[ ! "$2" =~ ^[0-9]+$ ]]; then
        die "$1 '$2' is not a whole number of GB"
    fi
}

# check_image VALUE: a plausible Docker image reference.
check_image() {
    if [[ ! "$1" =~ ^[a-z0-9][a-z0-9._/:@-]*$ ]]; then
        die "'$1' is not a valid image name"
    fi
}

# check_name VALUE: a valid container name.
check_name() {
    if [[ ! "$1" =~ ^[a-zA-Z0-9][a-zA-Z0-9_.-]*$ ]]; then
        die "'$1' is not a valid container name"
    fi
}

# run_or_print CMD...: with DRY_RUN=1 print CMD shell-quoted (exactly what would run), else exec it.
run_or_print() {
    if [[ "${DRY_RUN:-0}" == "1" ]]; then
        local out
        out="$(printf '%q ' "$@")"
        echo "${out% }"
        return 0
    fi
    exec "$@"
}

# add_proxy_env ARRAY_NAME: append "-e VAR" (by name: the value stays out of the command line)
# for each proxy variable that is set.
add_proxy_env() {
    local -n _proxy_cmd="$1"
    local var
    for var in http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY; do
        if [[ -n "${!var:-}" ]]; then
            _proxy_cmd+=(-e "$var")
        fi
    done
}

# export_hf_token: when HF_TOKEN or HUGGINGFACEHUB_API_TOKEN is set, export it as HF_TOKEN and
# HUGGING_FACE_HUB_TOKEN (the names vLLM and huggingface_hub read); returns 1 when neither is set.
export_hf_token() {
    local token="${HF_TOKEN:-${HUGGINGFACEHUB_API_TOKEN:-}}"
    [[ -n "$token" ]] || return 1
    export HF_TOKEN="$token" HUGGING_FACE_HUB_TOKEN="$token"
}

# add_hf_token ARRAY_NAME: pass the token into the container by name (its value never appears
# on the command line) when one is set; nothing at all when none is.
add_hf_token() {
    local -n _hf_cmd="$1"
    if export_hf_token; then
        _hf_cmd+=(-e HF_TOKEN -e HUGGING_FACE_HUB_TOKEN)
    fi
}

# add_set_env ARRAY_NAME VAR...: append "-e VAR=value" for each tuning variable that is set.
add_set_env() {
    local -n _env_cmd="$1"
    shift
    local var
    for var in "$@"; do
        if [[ -n "${!var:-}" ]]; then
            _env_cmd+=(-e "$var=${!var}")
        fi
    done
}

# render_group: the group id owning the host's GPU render node (OVMS: stat -c %g /dev/dri/render*),
# or $RENDER_GID when set. Without a render node: an error, unless DRY_RUN=1 ("render" then).
render_group() {
    if [[ -n "${RENDER_GID:-}" ]]; then
        echo "$RENDER_GID"
        return 0
    fi
    local node
    for node in /dev/dri/render*; do
        if [[ -e "$node" ]]; then
            stat -c '%g' "$node"
            return 0
        fi
    done
    if [[ "${DRY_RUN:-0}" == "1" ]]; then
        echo "warning: no /dev/dri/render* on this machine; set RENDER_GID (using 'render')" >&2
        echo render
        return 0
    fi
    echo "error: no GPU render node (/dev/dri/render*): is the Intel GPU driver installed? (or set RENDER_GID)" >&2
    exit 1
}

# abs_path PATH: absolute path of an existing file or folder.
abs_path() {
    local dir base
    dir="$(cd "$(dirname "$1")" && pwd)"
    base="$(basename "$1")"
    echo "$dir/$base"
}

# parse_build_options NOUN ARGS...: the options every build_docker_*.sh script takes.
# Sets build_target (its one positional argument, empty when none), build_image (from --tag;
# keeps the value the caller set when there is no --tag) and build_no_cache (an array).
# Prints the caller's usage and exits on --help.
# shellcheck disable=SC2034  # build_image and build_no_cache are this function's outputs
parse_build_options() {
    local noun="$1"
    shift
    build_target=""
    build_no_cache=()
    while [[ $# -gt 0 ]]; do
        case "$1" in
            -h | --help) usage; exit 0 ;;
            --tag) need_value "$@"; build_image="$2"; shift 2 ;;
            --no-cache) build_no_cache=(--no-cache); shift ;;
            -*) die "unknown option '$1' (see --help)" ;;
            *)
                [[ -z "$build_target" ]] || die "only one $noun may be given (got '$build_target' and '$1')"
                build_target="$1"
                shift
                ;;
        esac
    done
}

# add_proxy_build_args: append --build-arg NAME to the build_args array for each proxy
# variable that is set (docker then reads its value from the environment).
add_proxy_build_args() {
    local var
    for var in http_proxy https_proxy no_proxy; do
        if [[ -n "${!var:-}" ]]; then
            build_args+=(--build-arg "$var")
        fi
    done
}
