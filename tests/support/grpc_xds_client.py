"""gRPC's own xDS client against Switchyard, for tests/grpc_xds_e2e.rs.

Usage: grpc_xds_client.py XDS_PORT TARGET DIR

Starts two gRPC upstreams that answer "a" and "b", writes their ports to DIR/ports ("A B"),
waits for DIR/go (the test writes the snapshot files meanwhile), then calls
/test.Echo/Say over the channel xds:///TARGET every 100 ms and prints "ANSWER x" each time
the answer changes, until DIR/stop appears or 60 s pass. The gRPC library finds the upstream
only through xDS: LDS (an API listener), RDS, CDS and EDS, each subscribed by name.
"""
import os
import sys
import time

import grpc
import grpc_upstream

xds_port, target, work = sys.argv[1], sys.argv[2], sys.argv[3]


servers = [grpc_upstream.start(b"a"), grpc_upstream.start(b"b")]
grpc_upstream.publish(work, "ports", " ".join(str(port) for _, port in servers))

deadline = time.time() + 30
while not os.path.exists(os.path.join(work, "go")):
    if time.time() > deadline:
        sys.exit("never told to go")
    time.sleep(0.05)

bootstrap = {
    "xds_servers": [
        {
            "server_uri": f"127.0.0.1:{xds_port}",
            "channel_creds": [{"type": "insecure"}],
            "server_features": ["xds_v3"],
        }
    ],
    "node": {"id": "grpc-client-1", "cluster": "grpc"},
}
grpc_upstream.use_bootstrap(work, bootstrap)

last = None
deadline = time.time() + 60
with grpc.insecure_channel(f"xds:///{target}") as channel:
    say = channel.unary_unary("/test.Echo/Say")
    while time.time() < deadline and not os.path.exists(os.path.join(work, "stop")):
        try:
            answer = say(b"hi", timeout=2).decode()
        except grpc.RpcError as e:
            answer = f"error {e.code()}"
        if answer != last:
            print(f"ANSWER {answer}", flush=True)
            last = answer
        time.sleep(0.1)
for server, _ in servers:
    server.stop(0)
