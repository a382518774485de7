#!/usr/bin/env python3
"""What judging a resource's bytes costs a load: `switchyard validate` on clusters that each
trust a large CA bundle inline.

    benches/bytes-checks.py SWITCHYARD [CA_BUNDLE] [CLUSTERS] [RUNS]

CA_BUNDLE is a PEM bundle (Debian's /etc/ssl/certs/ca-certificates.crt by default: 144
certificates, 220 KB), put inline as `trusted_ca` in each of CLUSTERS clusters (100 by
default) of one file: once the same bundle in every cluster, once a different one in each (a
comment line before it differs), and once the bundle's text with its BEGIN lines spoiled (the
same load, its lines read but no certificate decoded; it fails, which is the point). Prints
the wall time of RUNS
(5) runs of each, in s. docs/benchmarks.md ("Judging a resource's bytes").
"""

import json
import os
import subprocess
import sys
import tempfile
import time


def cluster(i, ca):
    return {
        "name": f"c{i}",
        "connect_timeout": "1s",
        "type": "STATIC",
        "transport_socket": {
            "name": "tls",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
                "common_tls_context": {"validation_context": {"trusted_ca": {"inline_string": ca}}},
            },
        },
        "load_assignment": {
            "cluster_name": f"c{i}",
            "endpoints": [{"lb_endpoints": [{"endpoint": {"address": {"socket_address": {
                "address": "127.0.0.1", "port_value": 1}}}}]}],
        },
    }


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    switchyard = sys.argv[1]
    bundle = sys.argv[2] if len(sys.argv) > 2 else "/etc/ssl/certs/ca-certificates.crt"
    count = int(sys.argv[3]) if len(sys.argv) > 3 else 100
    runs = int(sys.argv[4]) if len(sys.argv) > 4 else 5
    ca = open(bundle).read()
    variants = {
        "same bundle in every cluster": lambda i: ca,
        "a different bundle in each": lambda i: f"# bundle {i}\n{ca}",
        "the bundle's text with no BEGIN line (lines read, nothing decoded)": lambda i: ca.replace("-----BEGIN", "-----BEGAN"),
    }
    with tempfile.TemporaryDirectory() as root:
        for name, text in variants.items():
            directory = os.path.join(root, str(abs(hash(name))))
            os.mkdir(directory)
            with open(os.path.join(directory, "clusters.json"), "w") as f:
                json.dump({"clusters": [cluster(i, text(i)) for i in range(count)]}, f)
            times = []
            for _ in range(runs):
                start = time.monotonic()
                subprocess.run([switchyard, "validate", "--config", directory],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
                times.append(time.monotonic() - start)
            shown = " ".join(f"{t:.2f}" for t in times)
            print(f"{name}: {shown} s (median {sorted(times)[len(times) // 2]:.2f})")


if __name__ == "__main__":
    main()
