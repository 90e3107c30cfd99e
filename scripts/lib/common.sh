#!/usr/bin/env bash
# The one library of genmesh's shell scripts (sourced, never run): argument parsing, usage errors,
# DRY_RUN (print the exact command instead of running it), value checks, docker build with image
# naming and the environment handed to containers.
#   source "$here/../../scripts/lib/common.sh"     (services/*/)
#   source "$here/lib/common.sh"                   (scripts/)
# shellcheck shell=bash

# repo_root: the repository root (this file is scripts/lib/common.sh).
# shellcheck disable=SC2034  # used by the scripts that source this file
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

# --- usage errors and arguments ---------------------------------------------------------------

# die MESSAGE: print "error: MESSAGE" on stderr and exit 2 (a usage error).
die() {
    echo "error: $*" >&2
    exit 2
}

# is_dry_run: true with DRY_RUN=1.
is_dry_run() {
    [[ "${DRY_RUN:-0}" == "1" ]]
}

# have PROGRAM: true when PROGRAM is on PATH.
have() {
    command -v "$1" >/dev/null 2>&1
}

# need_value FLAG ARGS...: fail unless FLAG is followed by a non-empty value.
need_value() {
    [[ $# -ge 2 && -n "$2" ]] || die "$1 needs a value (see --help)"
}

# help_if_asked ARGS...: print the caller's usage and exit 0 when any argument is -h or --help.
help_if_asked() {
    local arg
    for arg in "$@"; do
        case "$arg" in
            -h | --help) usage; exit 0 ;;
        esac
    done
}

# no_arguments ARGS...: for a script that takes only --help.
no_arguments() {
    help_if_asked "$@"
    [[ $# -eq 0 ]] || die "unexpected argument '$1' (this script takes no arguments; see --help)"
}

# parse_options NOUN SPEC... -- ARGS...: parse long options by a table of SPECs:
#   --flag=VAR   takes a value, stored in VAR        --flag:VAR   a switch, sets VAR=1
# -h/--help prints the caller's usage and exits. With a NOUN the script takes at most one positional
# argument, stored in arg_target (empty when none); without one (""), any other word is an error.
# shellcheck disable=SC2034  # arg_target is this function's output
parse_options() {
    local noun="$1" spec taken
    local specs=()
    shift
    while [[ "$1" != "--" ]]; do
        specs+=("$1")
        shift
    done
    shift
    arg_target=""
    while [[ $# -gt 0 ]]; do
        [[ "$1" != "-h" && "$1" != "--help" ]] || { usage; exit 0; }
        taken=0
        for spec in "${specs[@]}"; do
            if [[ "$spec" == "$1="* ]]; then
                need_value "$@"
                printf -v "${spec#*=}" '%s' "$2"
                taken=2
            elif [[ "$spec" == "$1:"* ]]; then
                printf -v "${spec#*:}" '%s' 1
                taken=1
            fi
            ((taken == 0)) || break
        done
        if ((taken > 0)); then
            shift "$taken"
            continue
        fi
        [[ -n "$noun" ]] || die "unknown argument '$1' (see --help)"
        [[ "$1" != -* ]] || die "unknown option '$1' (see --help)"
        [[ -z "$arg_target" ]] || die "only one $noun may be given (got '$arg_target' and '$1')"
        arg_target="$1"
        shift
    done
}

# check_runtime: RUNTIME (default docker) is docker or native; sets runtime.
check_runtime() {
    runtime="${RUNTIME:-docker}"
    case "$runtime" in
        docker | native) ;;
        *) die "RUNTIME must be docker or native, got '$runtime'" ;;
    esac
}

# --- value checks (each a usage error) ----------------------------------------------------------

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

# --- running commands ---------------------------------------------------------------------------

# print_cmd CMD...: CMD shell-quoted on one line (exactly what would run).
print_cmd() {
    local out
    out="$(printf '%q ' "$@")"
    echo "${out% }"
}

# run_or_print CMD...: with DRY_RUN=1 print CMD (print_cmd), else exec it.
run_or_print() {
    if is_dry_run; then
        print_cmd "$@"
        return 0
    fi
    exec "$@"
}

# run_traced CMD...: print "+ CMD" (always) and run it unless DRY_RUN=1 (for multi-step scripts).
run_traced() {
    printf '+ %s\n' "$*"
    is_dry_run || "$@"
}

# --- paths and models ---------------------------------------------------------------------------

# abs_path PATH: absolute path of an existing file or folder.
abs_path() {
    local dir base
    dir="$(cd "$(dirname "$1")" && pwd)"
    base="$(basename "$1")"
    echo "$dir/$base"
}

# from_repo_root PATH: PATH, or the repository's PATH when PATH is relative, not here and there
# (models/... given from anywhere).
from_repo_root() {
    if [[ "$1" != /* && ! -e "$1" && -e "$repo_root/$1" ]]; then
        printf '%s\n' "$repo_root/$1"
    else
        printf '%s\n' "$1"
    fi
}

# split_words ARRAY_NAME STRING: ARRAY_NAME=(STRING split on spaces); empty for an empty STRING.
split_words() {
    local -n _words="$1"
    _words=()
    [[ -z "$2" ]] || read -r -a _words <<<"$2"
}

# --- environment handed to containers -----------------------------------------------------------

PROXY_VARS=(http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY)

# add_env_by_name ARRAY_NAME VAR...: append "-e VAR" for each VAR that is set (by name: the value
# stays out of the command line).
add_env_by_name() {
    local -n _named_cmd="$1"
    shift
    local var
    for var in "$@"; do
        if [[ -n "${!var:-}" ]]; then
            _named_cmd+=(-e "$var")
        fi
    done
}

# add_proxy_env ARRAY_NAME: add_env_by_name for each proxy variable.
add_proxy_env() {
    add_env_by_name "$1" "${PROXY_VARS[@]}"
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
    if export_hf_token; then
        add_env_by_name "$1" HF_TOKEN HUGGING_FACE_HUB_TOKEN
    fi
}

# add_set_env ARRAY_NAME PREFIX VAR...: append PREFIX and "VAR=value" for each variable that is set
# (PREFIX "-e" for docker run, "" for env).
add_set_env() {
    local -n _env_cmd="$1"
    local prefix="$2"
    shift 2
    local var
    for var in "$@"; do
        if [[ -n "${!var:-}" ]]; then
            [[ -z "$prefix" ]] || _env_cmd+=("$prefix")
            _env_cmd+=("$var=${!var}")
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
    if is_dry_run; then
        echo "warning: no /dev/dri/render* on this machine; set RENDER_GID (using 'render')" >&2
        echo render
        return 0
    fi
    echo "error: no GPU render node (/dev/dri/render*): is the Intel GPU driver installed? (or set RENDER_GID)" >&2
    exit 1
}

# --- docker build -------------------------------------------------------------------------------

# parse_build_options NOUN ARGS...: the options every build_docker_*.sh script takes (parse_options
# with --tag IMAGE and --no-cache). Sets arg_target, build_image (from --tag; keeps the value the
# caller set when there is no --tag) and build_no_cache (an array).
# shellcheck disable=SC2034  # build_no_cache is this function's output
parse_build_options() {
    local no_cache=""
    parse_options "$1" --tag=build_image --no-cache:no_cache -- "${@:2}"
    build_no_cache=()
    [[ -z "$no_cache" ]] || build_no_cache=(--no-cache)
}

# build_usage_footer IMAGE_VAR DEFAULT [ENV_LINE...]: the Options and Environment text every build
# script's usage ends with (ENV_LINEs: the script's own variables, already aligned).
build_usage_footer() {
    local var="$1" default="$2" line
    shift 2
    cat <<USAGE

Options:
  --tag IMAGE   image name (default: \$$var or $default)
  --no-cache    build without Docker's layer cache
  --help        show this help

Environment:
USAGE
    printf '  %-31s %s\n' "$var" "default for --tag"
    for line in "$@"; do
        printf '  %s\n' "$line"
    done
    printf '  %-31s %s\n' "http_proxy https_proxy no_proxy" "passed as build arguments when set" \
        "DRY_RUN=1" "print the docker command instead of running it"
}

# docker_build DOCKERFILE CONTEXT DEFAULT_IMAGE: build (or print, DRY_RUN=1) the image named
# build_image (--tag, else the caller's environment default), else DEFAULT_IMAGE, with the
# build_no_cache and build_args arrays and the proxy variables that are set as build arguments
# (by name: docker reads their values from the environment).
docker_build() {
    local image="${build_image:-$3}" var
    check_image "$image"
    for var in http_proxy https_proxy no_proxy; do
        if [[ -n "${!var:-}" ]]; then
            build_args+=(--build-arg "$var")
        fi
    done
    run_or_print docker build "${build_no_cache[@]}" "${build_args[@]}" -f "$1" -t "$image" "$2"
}
