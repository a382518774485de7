#!/bin/sh
# Two replicas with CLIENTS simulated proxies each (switchyard loadgen), and one change to the
# reference snapshot (every ClusterLoadAssignment's port): as a file edit, both replicas
# serving the same directory, or as `switchyard apply` to etcd, both replicas on one prefix.
# Prints each replica's server CPU after the change (loadgen's report), and for etcd the
# requests etcd served during the run (from its /metrics) and its watchers.
#   benches/etcd-fleet.sh files|etcd ETCD_HOST:PORT [CLIENTS]
# SERVE_FLAGS adds flags to both replicas (a canary policy, say).
# docs/benchmarks.md ("etcd") has the figures. Run from the repository, after
# `cargo build --release`.
set -eu
mode=$1
etcd=$2
clients=${3:-5000}
bin=target/release/switchyard
work=$(mktemp -d)
benches/reference-snapshot.py "$work/cfg" 8080 1s
benches/reference-snapshot.py "$work/next" 8081 1s
if [ "$mode" = etcd ]; then
  url="etcd://$etcd/bench-$$"
  "$bin" apply "$work/cfg" --source "$url" >/dev/null
  set -- --source "$url"
  change="$bin apply $work/next --source $url >/dev/null"
else
  set -- --config "$work/cfg"
  change="benches/reference-snapshot.py $work/cfg 8081 1s"
fi
metrics() {
  curl -s "http://$etcd/metrics" | awk '
    /^grpc_server_handled_total/ { split($0, a, "grpc_method=\""); split(a[2], m, "\""); n[m[1]] += $NF }
    /^etcd_debugging_mvcc_watcher_total/ { w = $NF }
    END { for (k in n) if (n[k] > 0) printf "%s=%d ", k, n[k]; printf "watchers=%d\n", w }'
}
"$bin" serve "$@" --xds-addr 127.0.0.1:18600 --admin-addr 127.0.0.1:19600 --log-level warn ${SERVE_FLAGS:-} &
a=$!
"$bin" serve "$@" --xds-addr 127.0.0.1:18601 --admin-addr 127.0.0.1:19601 --log-level warn ${SERVE_FLAGS:-} &
b=$!
sleep 2
[ "$mode" = etcd ] && echo "etcd before: $(metrics)"
# Replica B's load generator waits (its trigger is a sleep) while A's makes the change.
"$bin" loadgen --xds-addr 127.0.0.1:18601 --clients "$clients" --server-pid "$b" \
  --trigger "sleep 15" --max-time 120s -o json > "$work/b.json" &
lb=$!
"$bin" loadgen --xds-addr 127.0.0.1:18600 --clients "$clients" --server-pid "$a" \
  --trigger "$change" --settle 5s --max-time 120s -o json > "$work/a.json"
wait "$lb"
[ "$mode" = etcd ] && echo "etcd after:  $(metrics)"
kill "$a" "$b"
for r in a b; do
  python3 -c "
import json, sys
r = json.load(open('$work/$r.json'))
s, t = r['server_process'], r['trigger']
print('$r: synced %d, updated %d, server CPU to sync %.2f s, after the change %.2f s, convergence p99 %s' % (
    r['synced'], t['proxies_updated'], s['cpu_s_to_sync'], s['cpu_s_after_trigger'], t['convergence'].get('p99_ms')))"
done
rm -rf "$work"
