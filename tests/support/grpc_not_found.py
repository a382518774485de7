"""gRPC's own xDS client dialing a name Switchyard does not have, for tests/grpc_xds_e2e.rs.

Usage: grpc_not_found.py XDS_PORT TARGET DIR MODE

MODE "errors" turns on gRPC's handling of xDS resource errors (gRFC A88, behind
GRPC_EXPERIMENTAL_XDS_DATA_ERROR_HANDLING); "plain" leaves it off, so gRPC waits out its
15 s does-not-exist timer. Starts a gRPC upstream that answers "ok" and writes its port to
DIR/port, then calls /test.Echo/Say over xds:///TARGET and prints "FAILED_AFTER <seconds>
<code>" when the first call fails. Then it calls every 100 ms and prints "OK_AFTER
<seconds>" (from the failure) at the first success, or "NEVER_OK" after 30 s.
"""
import os
import sys
import time

xds_port, target, work, mode = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
if mode == "errors":
    os.environ["GRPC_EXPERIMENTAL_XDS_DATA_ERROR_HANDLING"] = "true"

import grpc  # noqa: E402 (after the environment it reads)
import grpc_upstream  # noqa: E402

server, port = grpc_upstream.start(b"ok")
grpc_upstream.publish(work, "port", str(port))

bootstrap = {
    "xds_servers": [
        {
            "server_uri": f"127.0.0.1:{xds_port}",
            "channel_creds": [{"type": "insecure"}],
            "server_features": ["xds_v3"],
        }
    ],
    "node": {"id": f"grpc-{mode}", "cluster": "grpc"},
}
grpc_upstream.use_bootstrap(work, bootstrap)

with grpc.insecure_channel(f"xds:///{target}") as channel:
    say = channel.unary_unary("/test.Echo/Say")
    started = time.monotonic()
    try:
        say(b"hi", timeout=40)
        print("NEVER_FAILED", flush=True)
        sys.exit(0)
    except grpc.RpcError as e:
        failed = time.monotonic()
        print(f"FAILED_AFTER {failed - started:.3f} {e.code()} {e.details()}", flush=True)
    while time.monotonic() - failed < 30:
        try:
            say(b"hi", timeout=2)
            print(f"OK_AFTER {time.monotonic() - failed:.3f}", flush=True)
            break
        except grpc.RpcError:
            time.sleep(0.1)
    else:
        print("NEVER_OK", flush=True)
server.stop(0)
