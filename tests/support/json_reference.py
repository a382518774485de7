"""Protobuf's reference JSON parser, for tests/json_envoy.rs.

Reads JSON lines from stdin, each {"type": "<full message name>", "json": <value>}, and
writes one JSON line per input: {"ok": true, "json": <the message's canonical proto3 JSON>}
or {"ok": false, "error": "..."}. The messages come from Switchyard's own descriptor set
(argv[1]), so the two sides read with the same descriptors.
"""

import json
import sys

from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory


def main():
    fds = descriptor_pb2.FileDescriptorSet()
    with open(sys.argv[1], "rb") as f:
        fds.ParseFromString(f.read())
    pool = descriptor_pool.DescriptorPool()
    for file in fds.file:
        pool.Add(file)
    for line in sys.stdin:
        case = json.loads(line)
        try:
            cls = message_factory.GetMessageClass(pool.FindMessageTypeByName(case["type"]))
            message = cls()
            json_format.ParseDict(case["json"], message, descriptor_pool=pool)
            out = json_format.MessageToDict(message, descriptor_pool=pool)
            print(json.dumps({"ok": True, "json": out}), flush=True)
        except Exception as e:  # the verdict is the point: any refusal is an answer
            print(json.dumps({"ok": False, "error": f"{type(e).__name__}: {e}"}), flush=True)


if __name__ == "__main__":
    main()
