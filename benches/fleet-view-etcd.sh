#!/bin/sh
# What the fleet's view costs etcd: REPLICAS replicas on one prefix of a fresh etcd, each with
# CLIENTS simulated proxies (switchyard loadgen, ACKing every update), measured from etcd's
# own /metrics over two windows of WINDOW seconds: idle, then with one change a second (a
# put of one document through etcd's JSON gateway, the same as a one-document apply: its own
# message is taken out, its own bytes, about 100 B a put, are not). Prints, per replica per
# minute (of the window's measured time), the gRPC messages etcd
# received (requests, stream messages included: lease renewals, watch requests) and the
# bytes it received and sent (every watch event it delivered included).
#   benches/fleet-view-etcd.sh REPLICAS [CLIENTS] [WINDOW]
# docs/scaling.md ("The fleet's view in etcd") has the figures and the estimate beyond them.
# Run from the repository, after `cargo build --release` (BIN points elsewhere); needs etcd
# (Debian's etcd-server) and curl. Everything listens on 127.0.0.1; every loop is bounded.
set -eu
replicas=$1
clients=${2:-20}
window=${3:-60}
bin=${BIN:-target/release/switchyard}
work=$(mktemp -d)
port=$((24000 + $$ % 1000))
etcd="127.0.0.1:$port"
etcd --data-dir "$work/etcd" --listen-client-urls "http://$etcd" --advertise-client-urls "http://$etcd" \
  --listen-peer-urls "http://127.0.0.1:$((port + 1000))" --log-level error > "$work/etcd.log" 2>&1 &
etcd_pid=$!
pids=""
cleanup() { kill $pids "$etcd_pid" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
for _ in $(seq 50); do curl -sf "http://$etcd/health" >/dev/null && break; sleep 0.2; done
mkdir "$work/cfg"
printf 'clusters:\n  - name: backend\n    connect_timeout: 1s\n' > "$work/cfg/clusters.yaml"
url="etcd://$etcd/view"
"$bin" apply "$work/cfg" --source "$url" >/dev/null
for i in $(seq 0 $((replicas - 1))); do
  "$bin" serve --source "$url" --replica-name "replica-$i" --xds-addr "127.0.0.1:$((18700 + i))" --admin-addr "127.0.0.1:$((19700 + i))" \
    --log-level warn &
  pids="$pids $!"
done
sleep 3
for i in $(seq 0 $((replicas - 1))); do
  "$bin" loadgen --xds-addr "127.0.0.1:$((18700 + i))" --clients "$clients" --node-prefix "r$i" \
    --trigger "sleep $((window * 2 + 30))" --max-time "$((window * 2 + 60))s" -o json > /dev/null 2>&1 &
  pids="$pids $!"
done
sleep 15
# messages received, bytes received, bytes sent
metrics() {
  curl -s "http://$etcd/metrics" | awk '
    /^grpc_server_msg_received_total/ { m += $NF }
    /^etcd_network_client_grpc_received_bytes_total/ { r = $NF }
    /^etcd_network_client_grpc_sent_bytes_total/ { s = $NF }
    END { printf "%d %d %d\n", m, r, s }'
}
put() {
  key=$(printf '/view/clusters.yaml' | base64 -w0)
  value=$(printf 'clusters:\n  - name: backend\n    connect_timeout: %ss\n' "$1" | base64 -w0)
  curl -s -X POST "http://$etcd/v3/kv/put" -d "{\"key\":\"$key\",\"value\":\"$value\"}" >/dev/null
}
report() {
  # $1 what, $2 before, $3 after, $4 puts made (their messages taken out), $5 seconds
  echo "$2 $3" | awk -v what="$1" -v n="$replicas" -v w="$5" -v puts="$4" '{
    per = 60 / w / n
    printf "%s, %d replicas: %.0f messages, %.1f KB received, %.1f KB sent, per replica per minute\n",
      what, n, ($4 - $1 - puts) * per, ($5 - $2) * per / 1000, ($6 - $3) * per / 1000 }'
}
t0=$(date +%s.%N)
m0=$(metrics)
sleep "$window"
m1=$(metrics)
t1=$(date +%s.%N)
report idle "$m0" "$m1" 0 "$(awk "BEGIN { print $t1 - $t0 }")"
for i in $(seq "$window"); do
  put "$((i % 7 + 2))"
  sleep 1
done
m2=$(metrics)
t2=$(date +%s.%N)
report "one change a second" "$m1" "$m2" "$window" "$(awk "BEGIN { print $t2 - $t1 }")"
