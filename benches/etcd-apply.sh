#!/bin/sh
# `switchyard apply` of N documents (one cluster each) to a fresh prefix of an etcd at its
# default limits, then RUNS applies of one changed document among them, each timed (wall
# clock, the whole command: connect, read the prefix, load and check the N documents twice,
# diff, write). Also the apply of all N changed at once (switched over in several
# transactions).
#   benches/etcd-apply.sh ETCD_HOST:PORT [N] [RUNS]
# docs/benchmarks.md ("5,000 documents on an etcd at its defaults") has the figures. Run from
# the repository, after `cargo build --release`.
set -eu
etcd=$1
n=${2:-5000}
runs=${3:-5}
bin=target/release/switchyard
work=$(mktemp -d)
url="etcd://$etcd/apply-bench-$$"
write() {
  i=0
  while [ "$i" -lt "$n" ]; do
    printf 'clusters:\n  - name: c%05d\n    connect_timeout: %s\n' "$i" "$1" >"$work/c$(printf %05d "$i").yaml"
    i=$((i + 1))
  done
}
seconds() {
  start=$(date +%s.%N)
  "$@" >/dev/null
  end=$(date +%s.%N)
  echo "$end - $start" | bc
}
write 1s
echo "apply of $n new documents: $(seconds "$bin" apply "$work" --source "$url") s"
write 2s
echo "apply of $n changed documents: $(seconds "$bin" apply "$work" --source "$url") s"
r=1
while [ "$r" -le "$runs" ]; do
  printf 'clusters:\n  - name: c00042\n    connect_timeout: %ss\n' "$((r + 2))" >"$work/c00042.yaml"
  echo "apply of 1 changed document among $n, run $r: $(seconds "$bin" apply "$work" --source "$url") s"
  r=$((r + 1))
done
rm -rf "$work"
