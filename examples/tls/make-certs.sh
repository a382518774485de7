#!/usr/bin/env bash
# Make a CA, a certificate for Switchyard's xDS port, and one client certificate per node for
# mutual TLS with node identity binding (README "TLS and node identity"):
#
#   examples/tls/make-certs.sh OUT_DIR NODE_ID NODE_CLUSTER [NODE_ID NODE_CLUSTER ...]
#
# Each client certificate carries the SPIFFE ID spiffe://example.org/ns/<cluster>/sa/<id>, so
#   switchyard serve ... --tls-cert OUT/server.pem --tls-key OUT/server.key \
#     --client-ca OUT/ca.pem --node-identity 'spiffe://example.org/ns/{cluster}/sa/{id}'
# binds each node to its certificate. For a test setup only: keep real CA keys offline.
set -euo pipefail
out=${1:?usage: make-certs.sh OUT_DIR NODE_ID NODE_CLUSTER [...]}
shift
mkdir -p "$out"
cd "$out"

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 365 \
  -subj "/CN=switchyard example CA" -keyout ca.key -out ca.pem 2>/dev/null

sign() { # name subject san
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -subj "$2" -keyout "$1.key" -out "$1.csr" 2>/dev/null
  printf 'subjectAltName=%s\n' "$3" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 365 \
    -extfile "$1.ext" -out "$1.pem" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}

sign server "/CN=switchyard" "DNS:localhost,IP:127.0.0.1"
while [ $# -ge 2 ]; do
  sign "$1" "/CN=$1" "URI:spiffe://example.org/ns/$2/sa/$1"
  shift 2
done
echo "Wrote $(ls "$PWD" | tr '\n' ' ')"
