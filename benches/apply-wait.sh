#!/bin/sh
# How long `switchyard apply --wait` of a one-document change takes to return, through one
# of REPLICAS replicas on a fresh etcd, each with CLIENTS simulated proxies (switchyard
# loadgen, ACKing every update): RUNS applies, one after another, each timed as a whole
# process (the write, the load on every replica, the push, the ACKs, every replica's
# summary, the wait's next look).
#   benches/apply-wait.sh [REPLICAS] [CLIENTS] [RUNS]
# docs/benchmarks.md ("apply --wait") has the figures. Run from the repository, after
# `cargo build --release` (BIN points elsewhere); needs etcd (Debian's etcd-server) and
# curl. Everything listens on 127.0.0.1; every loop is bounded.
set -eu
replicas=${1:-3}
clients=${2:-20}
runs=${3:-10}
bin=${BIN:-target/release/switchyard}
work=$(mktemp -d)
port=$((25000 + $$ % 1000))
etcd="127.0.0.1:$port"
etcd --data-dir "$work/etcd" --listen-client-urls "http://$etcd" --advertise-client-urls "http://$etcd" \
  --listen-peer-urls "http://127.0.0.1:$((port + 1000))" --log-level error > "$work/etcd.log" 2>&1 &
pids=$!
cleanup() { kill $pids 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
for _ in $(seq 50); do curl -sf "http://$etcd/health" >/dev/null && break; sleep 0.2; done
mkdir "$work/cfg"
printf 'clusters:\n  - name: backend\n    connect_timeout: 1s\n' > "$work/cfg/clusters.yaml"
url="etcd://$etcd/wait"
"$bin" apply "$work/cfg" --source "$url" >/dev/null
for i in $(seq 0 $((replicas - 1))); do
  "$bin" serve --source "$url" --xds-addr "127.0.0.1:$((18800 + i))" --admin-addr "127.0.0.1:$((19800 + i))" \
    --log-level warn &
  pids="$pids $!"
done
sleep 3
for i in $(seq 0 $((replicas - 1))); do
  "$bin" loadgen --xds-addr "127.0.0.1:$((18800 + i))" --clients "$clients" --node-prefix "r$i" \
    --trigger "sleep 600" --max-time 700s -o json > /dev/null 2>&1 &
  pids="$pids $!"
done
sleep 10
for run in $(seq "$runs"); do
  printf 'clusters:\n  - name: backend\n    connect_timeout: %ss\n' "$((run + 1))" > "$work/cfg/clusters.yaml"
  start=$(date +%s.%N)
  "$bin" apply "$work/cfg" --source "$url" --wait --wait-timeout 60s --admin-addr 127.0.0.1:19800 \
    >/dev/null 2>"$work/err" || { cat "$work/err"; exit 1; }
  end=$(date +%s.%N)
  awk "BEGIN { printf \"apply --wait %d: %.2f s\\n\", $run, $end - $start }"
done
