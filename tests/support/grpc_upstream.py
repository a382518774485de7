"""What the grpcio test scripts share (tests/support/grpc_*.py): an upstream gRPC server
answering /test.Echo/Say, and writing files for the Rust test to read.

Imported after a script sets the GRPC_* environment it wants: grpc is imported here only
when a function is called.
"""
import concurrent.futures
import json
import os
import tempfile


def start(answer):
    """A gRPC server on 127.0.0.1 answering /test.Echo/Say with `answer`: (server, port)."""
    import grpc

    server = grpc.server(concurrent.futures.ThreadPoolExecutor(2))
    handler = grpc.unary_unary_rpc_method_handler(lambda request, context: answer)
    server.add_generic_rpc_handlers(
        [grpc.method_handlers_generic_handler("test.Echo", {"Say": handler})]
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, port


def publish(work, name, text):
    """Write DIR/name whole (aside, then renamed), for the test polling for it."""
    with open(os.path.join(work, name + ".tmp"), "w") as f:
        f.write(text)
    os.rename(os.path.join(work, name + ".tmp"), os.path.join(work, name))


def use_bootstrap(work, bootstrap):
    """Write `bootstrap` to a file in DIR and point GRPC_XDS_BOOTSTRAP at it."""
    fd, path = tempfile.mkstemp(suffix=".json", dir=work)
    with os.fdopen(fd, "w") as f:
        json.dump(bootstrap, f)
    os.environ["GRPC_XDS_BOOTSTRAP"] = path
