#!/usr/bin/env python3
"""One edit under an etcd prefix of many documents, to the new generation being served.

    benches/etcd-edit.py BINARY ETCD_HOST:PORT [DOCUMENTS] [EDITS]

Writes DOCUMENTS snapshot files (one cluster each, 5,000 by default) under a fresh prefix
with `switchyard apply`, starts `switchyard serve --source` on it, then makes EDITS edits
(10 by default), one key each, through etcd's JSON gateway. For each: the time from the
put to `/status` showing the new generation (polled every 2 ms), and what etcd sent its
clients meanwhile (its `etcd_network_client_grpc_sent_bytes_total`, the put's own small
answer included) and the Range requests it served. docs/benchmarks.md ("etcd: one edit
among 5,000 documents") has the figures. etcd must accept an apply of DOCUMENTS keys in
one transaction (`--max-txn-ops`).
"""

import base64
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def etcd_metrics(etcd):
    text = urllib.request.urlopen(f"http://{etcd}/metrics", timeout=5).read().decode()
    sent = ranges = 0.0
    for line in text.splitlines():
        if line.startswith("etcd_network_client_grpc_sent_bytes_total"):
            sent += float(line.rsplit(" ", 1)[1])
        if line.startswith("grpc_server_handled_total") and 'grpc_method="Range"' in line:
            ranges += float(line.rsplit(" ", 1)[1])
    return sent, ranges


def put(etcd, key, value):
    body = json.dumps(
        {
            "key": base64.b64encode(key.encode()).decode(),
            "value": base64.b64encode(value.encode()).decode(),
        }
    ).encode()
    urllib.request.urlopen(f"http://{etcd}/v3/kv/put", body, timeout=5).read()


def generation(admin):
    try:
        status = json.load(urllib.request.urlopen(f"http://{admin}/status", timeout=5))
    except OSError:
        return None
    config = status.get("config") or {}
    return config.get("generation") if config.get("ok") else None


def cluster(name, timeout):
    return f"clusters:\n  - name: {name}\n    connect_timeout: {timeout}\n"


def main():
    binary, etcd = sys.argv[1], sys.argv[2]
    documents = int(sys.argv[3]) if len(sys.argv) > 3 else 5000
    edits = int(sys.argv[4]) if len(sys.argv) > 4 else 10
    work = tempfile.mkdtemp()
    prefix = f"/edit-bench-{os.getpid()}"
    url = f"etcd://{etcd}{prefix}"
    try:
        for i in range(documents):
            with open(os.path.join(work, f"c{i:05}.yaml"), "w") as f:
                f.write(cluster(f"c{i:05}", "1s"))
        subprocess.run([binary, "apply", work, "--source", url], check=True,
                       stdout=subprocess.DEVNULL)
        admin = f"127.0.0.1:{free_port()}"
        server = subprocess.Popen(
            [binary, "serve", "--source", url, "--xds-addr", f"127.0.0.1:{free_port()}",
             "--admin-addr", admin, "--log-level", "warn"])
        try:
            deadline = time.monotonic() + 120
            while generation(admin) != 1:
                if time.monotonic() > deadline:
                    sys.exit("the first generation was never served")
                time.sleep(0.05)
            times, sent, ranges = [], [], []
            for n in range(edits):
                time.sleep(0.5)
                before = etcd_metrics(etcd)
                start = time.monotonic()
                put(etcd, f"{prefix}/c{(n * 37) % documents:05}.yaml",
                    cluster(f"c{(n * 37) % documents:05}", f"{n + 2}s"))
                while generation(admin) != n + 2:
                    if time.monotonic() - start > 60:
                        sys.exit(f"edit {n + 1} was never served")
                    time.sleep(0.002)
                times.append((time.monotonic() - start) * 1000)
                time.sleep(0.2)
                after = etcd_metrics(etcd)
                sent.append(after[0] - before[0])
                ranges.append(after[1] - before[1])
            print(f"{binary}: {documents} documents, {edits} edits of one key each")
            print("  to the new generation served: median %.0f ms, min %.0f, max %.0f"
                  % (statistics.median(times), min(times), max(times)))
            print("  bytes etcd sent per edit: median %.0f (min %.0f, max %.0f); "
                  "Range requests per edit: %s"
                  % (statistics.median(sent), min(sent), max(sent),
                     sorted(set(int(r) for r in ranges))))
        finally:
            server.terminate()
            server.wait()
    finally:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
