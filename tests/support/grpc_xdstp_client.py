"""gRPC's own xDS client reaching a service by xdstp names (federation, gRFC A47), for
tests/grpc_xds_e2e.rs.

Usage: grpc_xdstp_client.py XDS_PORT DIR

Starts a gRPC upstream that answers "ok" and writes its port to DIR/port, waits for DIR/go,
then calls /test.Echo/Say over three targets, printing "RESULT <target> <answer>" for each:
- xds:///echo, mapped by client_default_listener_resource_name_template to
  xdstp://switchyard.test/envoy.config.listener.v3.Listener/echo;
- xds://switchyard.test/echo, through that authority's template, to the same listener;
- xds://other.test/echo: an authority the server does not answer for (answered as not
  existing; resource errors are on, so it fails at once).
"""
import os
import sys
import time

os.environ["GRPC_EXPERIMENTAL_XDS_DATA_ERROR_HANDLING"] = "true"
os.environ["GRPC_EXPERIMENTAL_XDS_FEDERATION"] = "true"

import grpc  # noqa: E402 (after the environment it reads)
import grpc_upstream  # noqa: E402

xds_port, work = sys.argv[1], sys.argv[2]

server, port = grpc_upstream.start(b"ok")
grpc_upstream.publish(work, "port", str(port))

deadline = time.time() + 30
while not os.path.exists(os.path.join(work, "go")):
    if time.time() > deadline:
        sys.exit("never told to go")
    time.sleep(0.05)

xds_server = {
    "server_uri": f"127.0.0.1:{xds_port}",
    "channel_creds": [{"type": "insecure"}],
    "server_features": ["xds_v3"],
}
template = "xdstp://switchyard.test/envoy.config.listener.v3.Listener/%s"
bootstrap = {
    "xds_servers": [xds_server],
    "node": {"id": "grpc-xdstp", "cluster": "grpc"},
    "client_default_listener_resource_name_template": template,
    "authorities": {
        "switchyard.test": {
            "xds_servers": [xds_server],
            "client_listener_resource_name_template": template,
        },
        "other.test": {"xds_servers": [xds_server]},
    },
}
grpc_upstream.use_bootstrap(work, bootstrap)

for target in ["xds:///echo", "xds://switchyard.test/echo", "xds://other.test/echo"]:
    with grpc.insecure_channel(target) as channel:
        say = channel.unary_unary("/test.Echo/Say")
        started = time.monotonic()
        try:
            answer = say(b"hi", timeout=20).decode()
        except grpc.RpcError as e:
            answer = f"error {e.code()} after {time.monotonic() - started:.3f} s: {e.details()}"
        print(f"RESULT {target} {answer}", flush=True)
server.stop(0)
