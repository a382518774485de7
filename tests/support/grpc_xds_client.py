"""gRPC's own xDS client against Switchyard, for tests/grpc_xds_e2e.rs.

Usage: grpc_xds_client.py XDS_PORT TARGETS DIR [strict]

Starts two gRPC upstreams that answer "a" and "b", writes their ports to DIR/ports ("A B"),
waits for DIR/go (the test writes the snapshot files meanwhile), then calls
/test.Echo/Say over the channel xds:///TARGET of each of TARGETS (comma-separated) every
100 ms and prints "ANSWER x" (one target) or "ANSWER TARGET x" (several) each time a
target's answer changes, until DIR/stop appears or 60 s pass. The gRPC library finds the
upstream only through xDS: LDS (an API listener), RDS, CDS and EDS, each subscribed by name.

"strict" makes gRPC act on what a response says is gone (gRFC A88: the server feature
fail_on_data_errors, behind GRPC_EXPERIMENTAL_XDS_DATA_ERROR_HANDLING): a listener or
cluster it asked for that a LDS or CDS response leaves out is deleted. Without it gRPC
keeps what it has and reports the omission as an error it does not act on.
"""
import os
import sys
import time

xds_port, target, work = sys.argv[1], sys.argv[2], sys.argv[3]
strict = sys.argv[4:] == ["strict"]
if strict:
    os.environ["GRPC_EXPERIMENTAL_XDS_DATA_ERROR_HANDLING"] = "true"

import grpc  # noqa: E402 (after the environment it reads)
import grpc_upstream  # noqa: E402


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
            "server_features": ["xds_v3"] + (["fail_on_data_errors"] if strict else []),
        }
    ],
    "node": {"id": "grpc-client-1", "cluster": "grpc"},
}
grpc_upstream.use_bootstrap(work, bootstrap)

targets = target.split(",")
channels = [grpc.insecure_channel(f"xds:///{t}") for t in targets]
calls = [c.unary_unary("/test.Echo/Say") for c in channels]
last = [None] * len(targets)
deadline = time.time() + 60
while time.time() < deadline and not os.path.exists(os.path.join(work, "stop")):
    for i, say in enumerate(calls):
        try:
            answer = say(b"hi", timeout=2).decode()
        except grpc.RpcError as e:
            answer = f"error {e.code()}"
        if answer != last[i]:
            label = "" if len(targets) == 1 else f"{targets[i]} "
            print(f"ANSWER {label}{answer}", flush=True)
            last[i] = answer
    time.sleep(0.1)
for channel in channels:
    channel.close()
for server, _ in servers:
    server.stop(0)
