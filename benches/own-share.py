#!/usr/bin/env python3
"""The table of `benches/own-share.sh`'s series: per row, each server's server CPU in each
round (after the trigger: the push; to sync), and RSS per proxy with the small node, and
each Switchyard's ratio to the floor (the mean of its rounds over the floor's mean).

    benches/own-share.py < series.jsonl
"""
import json
import sys
from collections import defaultdict

runs = defaultdict(lambda: defaultdict(list))
servers = []
text, at, decoder = sys.stdin.read(), 0, json.JSONDecoder()
while True:
    while at < len(text) and text[at].isspace():
        at += 1
    if at >= len(text):
        break
    run, at = decoder.raw_decode(text, at)
    if run["server"] not in servers:
        servers.append(run["server"])
    node = "small node" if run["node_extensions"] == 0 else "Envoy's node"
    push = "every-CLA push" if run["trigger"] == "cla" else "every-cluster push"
    report = run["report"]
    if not report or report.get("synced") != report.get("clients"):
        runs[(run["protocol"], node, push)][run["server"]].append(None)
        continue
    p = report["server_process"]
    runs[(run["protocol"], node, push)][run["server"]].append(
        (p["cpu_s_after_trigger"], p["cpu_s_to_sync"],
         (p["rss_kib_synced"] - p["rss_kib_before"]) / report["clients"]))


def cell(values, i, unit, digits=2):
    shown = [f"{v[i]:.{digits}f}" if v else "failed" for v in values]
    return ", ".join(shown) + f" {unit}" if shown else ""


def mean(values, i):
    ok = [v[i] for v in values if v]
    return sum(ok) / len(ok) if ok else None


print("| 10,000 clients | " + " | ".join(servers) + " |")
print("|---|" + "---|" * len(servers))
for (protocol, node, push), by in sorted(runs.items()):
    name = "SotW" if protocol == "sotw" else "delta"
    rows = [(f"{name}, {node}: {push}", 0, "s", 2)]
    if push == "every-CLA push":
        rows.append((f"{name}, {node}: sync", 1, "s", 2))
        if node == "small node":
            rows.append((f"{name}, {node}: RSS per proxy", 2, "KiB", 1))
    for label, i, unit, digits in rows:
        floor = mean(by.get("floor", []), i)
        cells = []
        for server in servers:
            text = cell(by.get(server, []), i, unit, digits)
            m = mean(by.get(server, []), i)
            if server != "floor" and floor and m:
                text += f" ({m / floor:.2f}x)"
            cells.append(text)
        print(f"| {label} | " + " | ".join(cells) + " |")
