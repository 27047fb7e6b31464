#!/usr/bin/env bash
# Starts and stops the Redis servers tollgate's Redis integration tests run against: one standalone
# server and a cluster of 3 primaries with 1 replica each, all on free loopback ports, all owned by
# this script (no Docker, no system service).
#
#   bash scripts/redis.sh start DIR   start the 7 servers; state, data and logs go under DIR
#   bash scripts/redis.sh env DIR     print DIR/env (the variables below), e.g. for eval
#   bash scripts/redis.sh stop DIR    stop every server start DIR started; safe to repeat
#
# `start` installs Debian's redis-server and redis-tools with apt-get when redis-server or
# redis-cli is missing (through sudo when not root). It returns once every server answers and the
# cluster is settled: every node reports cluster_state:ok, knows the 3 primaries and the 3
# replicas, lists all 6 in CLUSTER SLOTS, and every replica's link to its primary is up. If
# anything fails it stops what it started, prints the tail of the relevant server log and exits
# non-zero.
#
# DIR/env, for `source`:
#   TOLLGATE_REDIS_URL       redis://127.0.0.1:PORT/ of the standalone server
#   TOLLGATE_REDIS_PID       the standalone server's PID (tests stop, resume or kill it)
#   TOLLGATE_REDIS_CLUSTER   redis://127.0.0.1:P/ of all 6 cluster nodes, comma-separated
#   TOLLGATE_REDIS_PIDS      PORT:PID of all 7 servers, standalone first, comma-separated
#   TOLLGATE_REDIS_SERVER    path of redis-server (tests may start throwaway servers of their own)
#   TOLLGATE_REDIS_CLI       path of redis-cli
# DIR/pids holds one "PORT PID" line per server; `stop` reads it and removes it.
#
# The servers run in the foreground of background processes (--daemonize no), so they outlive this
# script but not a `stop`. Nothing is persisted: --save '' and --appendonly no.

set -euo pipefail

PING_TIMEOUT=10    # seconds each server has to start answering PING
CLUSTER_TIMEOUT=30 # seconds the cluster has to settle after `redis-cli --cluster create`
STOP_TIMEOUT=5     # seconds the servers have to exit on SIGTERM before SIGKILL
PORT_ATTEMPTS=20   # ports tried per server before giving up
CLUSTER_NODES=6    # 3 primaries, 1 replica each

usage() {
    echo "usage: bash scripts/redis.sh start|stop|env DIR" >&2
    exit 2
}

die() {
    echo "redis.sh: error: $*" >&2
    exit 1
}

# --- processes -------------------------------------------------------------------------------------

# True while PID runs: it exists and is not a zombie (an exited process its parent has not reaped
# yet, which holds no port and on which signals have no effect).
alive() {
    local state
    # The state is the field after the parenthesised command name, which may itself hold spaces.
    state=$(sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) || return 1
    [[ -n $state && $state != Z ]]
}

# True while PID is a live redis-server serving PORT (not a PID the system has since reused for
# another program).
is_ours() {
    local pid=$1 port=$2 args
    alive "$pid" || return 1
    args=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
    # Redis retitles itself "redis-server 127.0.0.1:PORT"; before that, its arguments hold
    # "--port PORT".
    [[ $args == *redis-server* && ($args == *":$port"* || $args == *" $port "*) ]]
}

# Stops the servers listed in DIR/pids and removes the file. Never fails on servers already gone.
stop_servers() {
    local pidfile=$1/pids
    [[ -f $pidfile ]] || return 0
    local pids=() ports=() port pid i
    while read -r port pid; do
        [[ $port =~ ^[0-9]+$ && $pid =~ ^[0-9]+$ ]] || continue
        if is_ours "$pid" "$port"; then
            pids+=("$pid")
            ports+=("$port")
        fi
    done <"$pidfile"
    if ((${#pids[@]} > 0)); then
        # A test may have left a server stopped with SIGSTOP: a stopped process acts on SIGTERM only
        # once continued.
        kill -CONT "${pids[@]}" 2>/dev/null || true
        kill -TERM "${pids[@]}" 2>/dev/null || true
        local deadline=$((SECONDS + STOP_TIMEOUT)) left
        while :; do
            left=()
            for i in "${!pids[@]}"; do
                if is_ours "${pids[i]}" "${ports[i]}"; then left+=("${pids[i]}"); fi
            done
            ((${#left[@]} > 0)) || break
            if ((SECONDS >= deadline)); then
                echo "redis.sh: killing ${left[*]}: still running ${STOP_TIMEOUT}s after SIGTERM" >&2
                kill -KILL "${left[@]}" 2>/dev/null || true
                sleep 0.2
                break
            fi
            sleep 0.1
        done
    fi
    rm -f "$pidfile"
}

# --- installation ----------------------------------------------------------------------------------

ensure_installed() {
    if command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1; then
        return 0
    fi
    command -v apt-get >/dev/null 2>&1 ||
        die "redis-server or redis-cli is missing and there is no apt-get to install them with"
    local sudo=()
    if (($(id -u) != 0)); then
        command -v sudo >/dev/null 2>&1 || die "redis-server or redis-cli is missing; installing them needs root or sudo"
        sudo=(sudo)
    fi
    echo "redis.sh: installing redis-server and redis-tools"
    local install=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y redis-server redis-tools)
    if ! "${install[@]}"; then
        # A fresh image may have no package lists yet.
        echo "redis.sh: install failed; running apt-get update and retrying"
        "${sudo[@]}" apt-get update
        "${install[@]}"
    fi
    if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
        die "redis-server and redis-cli are still not on PATH after installing redis-server and redis-tools"
    fi
}

# --- starting --------------------------------------------------------------------------------------

DIR=""
SERVER=""
CLI=""
USED_PORTS=" "  # ports this run has handed out, space-separated
LOGS=()         # every server log of this run, for the failure report
STARTED=()      # PORT:PID of every server this run started and saw answer, in start order
FAILED_LOGS=()  # the logs a failure is about, when known (else every log is shown)

# Sets PICKED to a port not handed out yet on which nothing answers on 127.0.0.1. Cluster nodes
# need PORT+10000 too (their bus port), so ports come from 10000-22767: both PORT and its bus port
# then lie below Linux's default ephemeral range (32768-60999), which outgoing connections use.
# A port can still be taken between this check and the server's bind; start_server retries then.
# (A variable, not output: a command substitution's subshell would lose USED_PORTS.)
PICKED=""
pick_port() {
    local port tries=0
    while ((tries < 1000)); do
        tries=$((tries + 1))
        port=$((10000 + RANDOM % 12768))
        [[ $USED_PORTS != *" $port "* ]] || continue
        if port_answers "$port" || port_answers $((port + 10000)); then
            continue
        fi
        USED_PORTS+="$port "
        PICKED=$port
        return 0
    done
    die "found no free loopback port in 10000-22767 after 1000 tries"
}

port_answers() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

cli() {
    local port=$1
    shift
    timeout 5 "$CLI" -h 127.0.0.1 -p "$port" "$@"
}

# Starts one redis-server on a free port and waits until it answers. Sets STARTED_PORT and
# STARTED_PID and appends "PORT PID" to DIR/pids. Extra arguments go to redis-server; the literal
# word PORT in them is replaced by the port.
STARTED_PORT=""
STARTED_PID=""
start_server() {
    local attempt port pid sdir log args a
    for ((attempt = 1; attempt <= PORT_ATTEMPTS; attempt++)); do
        pick_port
        port=$PICKED
        sdir=$DIR/$port
        log=$sdir/redis.log
        mkdir -p "$sdir"
        LOGS+=("$log")
        args=()
        for a in "$@"; do args+=("${a//PORT/$port}"); done
        # Output from before the server opens its logfile (a bad argument, say) goes to the same
        # file; both it and the server append.
        # shellcheck disable=SC2094
        "$SERVER" --port "$port" --bind 127.0.0.1 --daemonize no --save '' --appendonly no \
            --protected-mode no --dir "$sdir" --logfile "$log" "${args[@]}" \
            </dev/null >>"$log" 2>&1 &
        pid=$!
        echo "$port $pid" >>"$DIR/pids"
        local deadline=$((SECONDS + PING_TIMEOUT))
        while :; do
            # Our own child: until it has exec'd redis-server, is_ours would not recognise it.
            if ! alive "$pid"; then
                if grep -qi 'address already in use' "$log" 2>/dev/null; then
                    echo "redis.sh: port $port (or its bus port) was taken; trying another" >&2
                    sed -i "/^$port $pid\$/d" "$DIR/pids"
                    continue 2
                fi
                FAILED_LOGS=("$log")
                die "redis-server on port $port (pid $pid) exited during startup"
            fi
            # The PID check makes sure the answer comes from this server, not from another program
            # that grabbed the port first.
            if [[ $(timeout 1 "$CLI" -h 127.0.0.1 -p "$port" INFO server 2>/dev/null | tr -d '\r' | sed -n 's/^process_id://p') == "$pid" ]]; then
                STARTED_PORT=$port
                STARTED_PID=$pid
                STARTED+=("$port:$pid")
                return 0
            fi
            if ((SECONDS >= deadline)); then
                FAILED_LOGS=("$log")
                die "redis-server on port $port (pid $pid) did not answer within ${PING_TIMEOUT}s"
            fi
            sleep 0.05
        done
    done
    die "no redis-server could bind a free port in $PORT_ATTEMPTS attempts"
}

# Why the cluster, seen from the node on PORT, is not settled yet; empty once it is.
cluster_problem() {
    local port=$1 info nodes slots
    info=$(cli "$port" CLUSTER INFO 2>&1 | tr -d '\r') || { echo "CLUSTER INFO failed: $info"; return; }
    grep -qx 'cluster_state:ok' <<<"$info" || { grep '^cluster_state' <<<"$info"; return; }
    grep -qx "cluster_known_nodes:$CLUSTER_NODES" <<<"$info" ||
        { echo "$(grep '^cluster_known_nodes' <<<"$info") (want $CLUSTER_NODES)"; return; }

    # CLUSTER NODES: <id> <ip:port@bus> <flags> <master id or -> <ping> <pong> <epoch> <link> <slots...>
    nodes=$(cli "$port" CLUSTER NODES 2>&1 | tr -d '\r') || { echo "CLUSTER NODES failed: $nodes"; return; }
    local summary
    summary=$(awk '
        { flags = "," $3 "," }
        flags ~ /,(fail\??|handshake|noaddr),/ || $8 != "connected" { bad++ }
        flags ~ /,master,/ && NF > 8 { primary[$1] = 1; primaries++ }
        flags ~ /,slave,/ { replicas++; of[$4]++ }
        END {
            covered = 0
            for (id in primary) if (of[id] == 1) covered++
            printf "%d %d %d %d", primaries, replicas, covered, bad
        }' <<<"$nodes")
    local primaries replicas covered bad
    read -r primaries replicas covered bad <<<"$summary"
    if ((primaries != 3 || replicas != 3 || covered != 3 || bad != 0)); then
        echo "CLUSTER NODES shows $primaries primaries with slots, $replicas replicas, $covered primaries with exactly one replica, $bad nodes failing or disconnected"
        return
    fi

    # CLUSTER SLOTS, flattened by redis-cli: the line after each node's address is its port.
    slots=$(cli "$port" CLUSTER SLOTS 2>&1 | tr -d '\r') || { echo "CLUSTER SLOTS failed: $slots"; return; }
    local listed
    listed=$(awk 'prev == "127.0.0.1" { print } { prev = $0 }' <<<"$slots" | sort -u | wc -l)
    ((listed == CLUSTER_NODES)) || { echo "CLUSTER SLOTS lists $listed of the $CLUSTER_NODES nodes"; return; }

    # A replica holds its primary's data, and can take over from it, only once its link is up.
    local role
    role=$(cli "$port" INFO replication 2>&1 | tr -d '\r') || { echo "INFO replication failed: $role"; return; }
    if grep -qx 'role:slave' <<<"$role" && ! grep -qx 'master_link_status:up' <<<"$role"; then
        echo "$(grep '^master_link_status' <<<"$role") (replica not synced with its primary)"
    fi
}

write_env() {
    local standalone_port=$1 standalone_pid=$2
    shift 2
    local cluster=() port
    for port in "$@"; do cluster+=("redis://127.0.0.1:$port/"); done
    local IFS=,
    {
        env_line TOLLGATE_REDIS_URL "redis://127.0.0.1:$standalone_port/"
        env_line TOLLGATE_REDIS_PID "$standalone_pid"
        env_line TOLLGATE_REDIS_CLUSTER "${cluster[*]}"
        env_line TOLLGATE_REDIS_PIDS "${STARTED[*]}"
        env_line TOLLGATE_REDIS_SERVER "$SERVER"
        env_line TOLLGATE_REDIS_CLI "$CLI"
    } >"$DIR/env"
}

# One `export NAME=VALUE` line, the value quoted only when the shell needs it (a path with spaces),
# so the plain values read the same to a person or a non-shell parser as to `source`.
env_line() {
    if [[ $2 =~ ^[A-Za-z0-9_./:,@+-]+$ ]]; then
        printf 'export %s=%s\n' "$1" "$2"
    else
        printf 'export %s=%q\n' "$1" "$2"
    fi
}

# On a failed start: stop everything this run started and show why.
on_start_exit() {
    local status=$?
    ((status != 0)) || return 0
    trap - EXIT
    echo "redis.sh: start failed; stopping the servers it started" >&2
    local log shown=("${LOGS[@]}") lines=10
    if ((${#FAILED_LOGS[@]} > 0)); then
        shown=("${FAILED_LOGS[@]}")
    fi
    if ((${#shown[@]} == 1)); then lines=30; fi
    for log in "${shown[@]}"; do
        if [[ -s $log ]]; then
            echo "--- last $lines lines of $log" >&2
            tail -n "$lines" "$log" >&2
        fi
    done
    stop_servers "$DIR" || true
    rm -f "$DIR/env"
    exit "$status"
}

start() {
    DIR=$1
    if ! mkdir -p "$DIR" 2>/dev/null || [[ ! -w $DIR ]]; then
        die "cannot create or write to $DIR"
    fi
    DIR=$(cd "$DIR" && pwd)
    if [[ -s $DIR/pids ]]; then
        die "$DIR/pids exists: servers from an earlier start may still run; run 'bash scripts/redis.sh stop $DIR' first"
    fi
    ensure_installed
    SERVER=$(command -v redis-server)
    CLI=$(command -v redis-cli)
    : >"$DIR/pids"
    trap on_start_exit EXIT

    local began=$SECONDS
    start_server
    local standalone_port=$STARTED_PORT standalone_pid=$STARTED_PID

    local ports=() cluster_logs=() i
    for ((i = 0; i < CLUSTER_NODES; i++)); do
        # Two defaults only delay readiness here. A primary waits repl-diskless-sync-delay (5 s)
        # for more replicas before the first full sync, and each has just one. And CLUSTER SLOTS
        # lists a replica only once its replication offset is past 0, which, with no writes yet,
        # takes the primary's first ping to it: every repl-ping-replica-period (10 s).
        start_server --cluster-enabled yes --cluster-config-file nodes-PORT.conf --cluster-node-timeout 2000 \
            --repl-diskless-sync-delay 0 --repl-ping-replica-period 1
        ports+=("$STARTED_PORT")
        cluster_logs+=("$DIR/$STARTED_PORT/redis.log")
    done

    local addrs=() out
    for i in "${ports[@]}"; do addrs+=("127.0.0.1:$i"); done
    if ! out=$(timeout 60 "$CLI" --cluster create "${addrs[@]}" --cluster-replicas 1 --cluster-yes 2>&1); then
        echo "$out" >&2
        FAILED_LOGS=("${cluster_logs[@]}")
        die "redis-cli --cluster create failed"
    fi

    local deadline=$((SECONDS + CLUSTER_TIMEOUT)) problem port
    while :; do
        problem=""
        for port in "${ports[@]}"; do
            problem=$(cluster_problem "$port")
            if [[ -n $problem ]]; then
                problem="node $port: $problem"
                break
            fi
        done
        [[ -n $problem ]] || break
        if ((SECONDS >= deadline)); then
            FAILED_LOGS=("${cluster_logs[@]}")
            die "the cluster did not settle within ${CLUSTER_TIMEOUT}s; last seen: $problem"
        fi
        sleep 0.2
    done

    write_env "$standalone_port" "$standalone_pid" "${ports[@]}"
    trap - EXIT

    echo "redis.sh: $("$SERVER" --version)"
    echo "redis.sh: standalone on 127.0.0.1:$standalone_port (pid $standalone_pid)"
    echo "redis.sh: cluster on 127.0.0.1:{$(
        IFS=,
        echo "${ports[*]}"
    )} (3 primaries, 1 replica each), ready in $((SECONDS - began))s"
    echo "redis.sh: variables in $DIR/env; stop with: bash scripts/redis.sh stop $DIR"
}

# --- main ------------------------------------------------------------------------------------------

(($# == 2)) || usage
case $1 in
    start) start "$2" ;;
    stop) stop_servers "$2" ;;
    env)
        [[ -f $2/env ]] || die "$2/env is missing: run 'bash scripts/redis.sh start $2' first"
        cat "$2/env"
        ;;
    *) usage ;;
esac
