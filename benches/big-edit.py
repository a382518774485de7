#!/usr/bin/env python3
"""One edited file among many, to its generation published, from Switchyard's own log.

    benches/big-edit.py SWITCHYARD DIR [EDITS]

DIR is a snapshot directory (`benches/big-snapshot.py DIR 100 1000`: 100,000 clusters in 100
files). Starts `switchyard serve --config DIR --log-level debug --log-format json`, waits for
the first load, then EDITS times (5 by default) rewrites one cluster's timeout in `f050.yaml`,
renames it over, and reads the log for the next `Loaded snapshot files.` line. Prints, per
edit, from the rename: the change seen, the load's start, and the generation published
(`Loaded snapshot files.`, logged once it is published), in ms. docs/benchmarks.md
("Reloads at 100,000 clusters").
"""

import datetime
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stamp(line):
    return datetime.datetime.fromisoformat(line["timestamp"].replace("Z", "+00:00")).timestamp()


def main():
    binary, d = sys.argv[1], sys.argv[2]
    edits = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    log_path = tempfile.mktemp(suffix=".log")
    log = open(log_path, "w")
    server = subprocess.Popen(
        [binary, "serve", "--config", d, "--xds-addr", f"127.0.0.1:{free_port()}",
         "--admin-addr", f"127.0.0.1:{free_port()}", "--log-level", "debug", "--log-format", "json"],
        stderr=log)
    reader = open(log_path)
    lines = []
    partial = ""

    def until(message, after):
        nonlocal partial
        deadline = time.time() + 120
        while time.time() < deadline:
            # Whole lines only: the server may be writing one as it is read.
            partial += reader.read()
            *whole, partial = partial.split("\n")
            for raw in whole:
                try:
                    lines.append(json.loads(raw))
                except ValueError:
                    pass
            for line in lines:
                if line.get("message") == message and stamp(line) >= after:
                    return line
            time.sleep(0.01)
        sys.exit(f"no `{message}` in {log_path}")

    def found(message, after):
        return next((l for l in lines if l.get("message") == message and stamp(l) >= after), None)

    def ms(line, at):
        return "-" if line is None else f"{1000 * (stamp(line) - at):.1f}"

    try:
        until("Serving xDS.", 0)
        path = os.path.join(d, "f050.yaml")
        text = open(path).read()
        for n in range(edits):
            time.sleep(1)
            text = re.sub(r"connect_timeout: \d+s", f"connect_timeout: {n + 2}s", text, count=1)
            tmp = os.path.join(d, ".f050.tmp")
            with open(tmp, "w") as f:
                f.write(text)
            at = time.time()
            os.replace(tmp, path)
            loaded = until("Loaded snapshot files.", at)
            # Logged before it, if at all (a build without these debug lines).
            seen = found("A change to the config files was seen.", at - 0.05)
            start = found("Loading the config files.", at)
            print(f"edit {n + 1}: seen {ms(seen, at)} ms, load start {ms(start, at)} ms, "
                  f"published {ms(loaded, at)} ms "
                  f"(parsed {loaded.get('parsed')} file(s), {loaded.get('resources')} resources)",
                  flush=True)
    finally:
        server.terminate()
        server.wait(30)
        os.unlink(log_path)


if __name__ == "__main__":
    main()
