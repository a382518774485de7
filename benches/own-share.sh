#!/usr/bin/env bash
# Switchyard's own share of a push and of a sync, against the transport's floor: one
# alternating series, a fresh server per run (docs/benchmarks.md, "Switchyard's own share,
# before and after").
#
#   benches/own-share.sh ROUNDS LOADGEN FLOOR NAME=SWITCHYARD... > series.jsonl
#
# ROUNDS rounds; in each, for every row (SotW and delta; the small node and Envoy's; the
# every-CLA push, and with the small node the every-cluster push), every server in turn:
# FLOOR (`cargo bench --bench floor --no-run` builds it: target/release/deps/floor-<hash>)
# and each NAME=BINARY given (`cargo build --release` copies, say before=/tmp/sy-before).
# LOADGEN is the `switchyard` binary whose `loadgen` drives every run (the same for all).
# Each run is 10,000 clients on the reference snapshot (benches/reference-snapshot.py),
# bounded by --max-time 150s; it prints one JSON line: the server, the row, and the load
# generator's report. `benches/own-share.py` makes the table from those lines.
# ROWS (in the environment), rows separated by commas, each "PROTOCOL NODE_EXTENSIONS
# TRIGGER" as below, runs those alone: ROWS="delta 0 cluster,sotw 0 cluster".
set -euo pipefail
rounds=$1 loadgen=$2 floor=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
run() { # NAME BINARY PROTOCOL NODE_EXTENSIONS TRIGGER(cla|cluster)
    local name=$1 bin=$2 protocol=$3 ext=$4 kind=$5 work pid hup="" timeout=1s
    work=$(mktemp -d)
    "$here/reference-snapshot.py" "$work/cfg" 8080 1s
    if [ "$name" = floor ]; then
        "$bin" "$work/cfg" 127.0.0.1:18600 >"$work/server.log" 2>&1 &
        pid=$!
        hup="; kill -HUP $pid"
        for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/18600) 2>/dev/null && break; sleep 0.1; done
    else
        "$bin" serve -c "$work/cfg" --xds-addr 127.0.0.1:18600 --admin-addr 127.0.0.1:19600 \
            >"$work/server.log" 2>&1 &
        pid=$!
        for _ in $(seq 100); do curl -sf -o /dev/null 127.0.0.1:19600/readyz && break; sleep 0.1; done
    fi
    local port=8081
    [ "$kind" = cluster ] && { port=8080; timeout=2s; }
    local report
    report=$("$loadgen" loadgen --protocol "$protocol" --xds-addr 127.0.0.1:18600 --clients 10000 \
        --node-extensions "$ext" --server-pid "$pid" --max-time 150s -o json \
        --trigger "$here/reference-snapshot.py $work/cfg $port $timeout$hup" 2>/dev/null |
        python3 -c 'import json, sys; print(json.dumps(json.load(sys.stdin)))' || true)
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    rm -rf "$work"
    printf '{"server":"%s","protocol":"%s","node_extensions":%s,"trigger":"%s","report":%s}\n' \
        "$name" "$protocol" "$ext" "$kind" "${report:-null}"
}
IFS=, read -ra rows <<<"${ROWS:-sotw 0 cla,delta 0 cla,sotw 516 cla,delta 516 cla,sotw 0 cluster,delta 0 cluster}"
for _ in $(seq "$rounds"); do
    for row in "${rows[@]}"; do
        run floor "$floor" $row
        for named in "$@"; do
            run "${named%%=*}" "${named#*=}" $row
        done
    done
done
