#!/usr/bin/env bash
# Make sure Redis is available for genmesh.
#
#   scripts/ensure_redis.sh install             install Debian's redis-server when missing (apt-get)
#   scripts/ensure_redis.sh start [URL] [DIR]   if nothing answers PING at URL (default $REDIS_URL or
#                                               redis://127.0.0.1:6379/0), start a private redis-server
#                                               on URL's port with its files in DIR (default .redis)
#                                               (maxmemory $GENMESH_REDIS_MAXMEMORY, default 2gb, noeviction)
#   scripts/ensure_redis.sh stop [DIR]          stop the private redis-server started in DIR
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

cmd="${1:-start}"
url="${2:-${REDIS_URL:-redis://127.0.0.1:6379/0}}"

install_redis() {
    if have redis-server; then
        return 0
    fi
    echo "==> installing redis-server (Debian package)"
    local sudo=""
    if [ "$(id -u)" -ne 0 ]; then
        have sudo || { echo "redis-server is missing and I am not root: install it (apt-get install redis-server)" >&2; exit 1; }
        sudo="sudo"
    fi
    $sudo apt-get update -q
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q -o Dpkg::Progress-Fancy=1 redis-server
}

host_port() {  # redis://[user:pass@]host:port/db -> "host port"
    local rest="${url#*://}"
    rest="${rest##*@}"
    rest="${rest%%/*}"
    local host="${rest%%:*}" port="6379"
    [ "$rest" != "$host" ] && port="${rest##*:}"
    echo "${host:-127.0.0.1} $port"
}

answers() {  # PING over bash's /dev/tcp: no redis-cli needed
    local host="$1" port="$2" reply=""
    { exec 3<>"/dev/tcp/$host/$port"; } 2>/dev/null || return 1
    printf 'PING\r\n' >&3
    IFS= read -r -t 2 reply <&3 || true
    exec 3>&- 3<&-
    [[ "$reply" == "+PONG"* || "$reply" == "-NOAUTH"* ]]
}

case "$cmd" in
    install)
        install_redis
        ;;
    start)
        dir="$(realpath -m "${3:-.redis}")"
        read -r host port <<<"$(host_port)"
        if answers "$host" "$port"; then
            echo "==> Redis answers at $host:$port"
            exit 0
        fi
        install_redis
        mkdir -p "$dir"
        echo "==> starting a private redis-server on 127.0.0.1:$port (files in $dir)"
        redis-server --bind 127.0.0.1 --port "$port" --dir "$dir" --daemonize yes \
            --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" --save "" --appendonly no \
            --maxmemory "${GENMESH_REDIS_MAXMEMORY:-2gb}" --maxmemory-policy noeviction
        for _ in $(seq 1 50); do
            answers 127.0.0.1 "$port" && exit 0
            sleep 0.1
        done
        echo "redis-server did not answer on port $port; see $dir/redis.log" >&2
        exit 1
        ;;
    stop)
        dir="$(realpath -m "${2:-.redis}")"
        if [ -f "$dir/redis.pid" ]; then
            kill "$(cat "$dir/redis.pid")" 2>/dev/null || true
            rm -f "$dir/redis.pid"
        fi
        ;;
    *)
        echo "usage: $0 install | start [URL] [DIR] | stop [DIR]" >&2
        exit 2
        ;;
esac
