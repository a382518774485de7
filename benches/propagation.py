#!/usr/bin/env python3
"""From an edit to Envoy answering with it: route propagation as a user feels it.

    benches/propagation.py SWITCHYARD [--envoy PATH] [--etcd PATH] [--edits N]
                           [--sources files,etcd] [--transports sotw,delta]
                           [--loads idle,300] [--changes move,route,cluster]
                           [--control] [--churn MS] [--serve-args FLAGS] [--json OUT]

The method of a public benchmark of Envoy control planes (gateway-api-bench, part 2: route
propagation and route changes), from the file or the etcd key instead of a Kubernetes
object. One Envoy over ADS (State of the World or Delta) takes everything from Switchyard:
a listener, its route configuration `main` (RDS), and EDS clusters whose endpoints are a
second, static Envoy answering with its upstream's name. The whole snapshot is one document
(`snapshot.yaml`), so each edit is one change: renamed over in a directory (`--config`), or
put under an etcd prefix (`--source`).

Each edit is one of:
- move:    the route `/app` moves between upstreams `blue` and `green`;
- route:   a new route `/rK` to `blue`;
- cluster: a new EDS cluster `freshK` (actively health-checked) with its endpoints and a
           route `/cK` to it, in one change (make-before-break: the route must not reach
           Envoy before the cluster is warm).
A probe on one keep-alive connection asks the edited path every 1.7 ms from the moment of
the edit (the rename or the put) until the answer is the new one; a 404 before that is "not
yet" (no route), any other failure counts (a 503: a route to a cluster Envoy cannot use
yet). After the change answers, the probe goes on for 50 ms, counting failures. Under load,
another process sends 300 requests/s to `/app` on its own connection for the whole run,
counting every failed request too.

For each variant it prints p50/p90/p99/max of edit-to-answer (ms), the failed requests, and
the timeline split from Switchyard's own debug log (JSON lines), medians: edit -> change
seen (the file or watch event), -> load start, -> generation published, -> first response
written, -> last ACK of the change. `--churn 50` rewrites another file (renamed over) every 50 ms meanwhile, from
files. `--control` adds the negative control: the cluster
variant with `serve --ordering off`, which must show failures (it proves the probe sees
them). docs/benchmarks.md ("Edit to Envoy answering") has figures and the command.
"""

import argparse
import datetime
import http.client
import json
import multiprocessing
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

PROBE_EVERY = 0.0017
AFTER = 0.05
TIMEOUT = 5.0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, deadline):
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return True
        except OSError:
            time.sleep(0.02)
    return False


# ---- the upstreams: a static Envoy, one listener per upstream, answering its name ----


def upstream_bootstrap(ports, admin):
    listeners = []
    for name, port in ports.items():
        listeners.append(
            {
                "name": name,
                "address": {"socket_address": {"address": "127.0.0.1", "port_value": port}},
                "filter_chains": [
                    {
                        "filters": [
                            {
                                "name": "envoy.filters.network.http_connection_manager",
                                "typed_config": {
                                    "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
                                    "stat_prefix": name,
                                    "route_config": {
                                        "virtual_hosts": [
                                            {
                                                "name": name,
                                                "domains": ["*"],
                                                "routes": [
                                                    {
                                                        "match": {"prefix": "/"},
                                                        "direct_response": {
                                                            "status": 200,
                                                            "body": {"inline_string": name},
                                                        },
                                                    }
                                                ],
                                            }
                                        ]
                                    },
                                    "http_filters": [
                                        {
                                            "name": "envoy.filters.http.router",
                                            "typed_config": {
                                                "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
                                            },
                                        }
                                    ],
                                },
                            }
                        ]
                    }
                ],
            }
        )
    return {
        "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": admin}}},
        "static_resources": {"listeners": listeners},
    }


# ---- the Envoy under test ----


def proxy_bootstrap(xds, admin, delta):
    return {
        "node": {"id": "edge-1", "cluster": "bench"},
        "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": admin}}},
        "dynamic_resources": {
            "ads_config": {
                "api_type": "DELTA_GRPC" if delta else "GRPC",
                "transport_api_version": "V3",
                "set_node_on_first_message_only": True,
                "grpc_services": [{"envoy_grpc": {"cluster_name": "switchyard"}}],
            },
            "cds_config": {"resource_api_version": "V3", "ads": {}},
            "lds_config": {"resource_api_version": "V3", "ads": {}},
        },
        "static_resources": {
            "clusters": [
                {
                    "name": "switchyard",
                    "type": "STATIC",
                    "connect_timeout": "1s",
                    "typed_extension_protocol_options": {
                        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                            "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                            "explicit_http_config": {"http2_protocol_options": {}},
                        }
                    },
                    "load_assignment": {
                        "cluster_name": "switchyard",
                        "endpoints": [
                            {
                                "lb_endpoints": [
                                    {
                                        "endpoint": {
                                            "address": {
                                                "socket_address": {
                                                    "address": "127.0.0.1",
                                                    "port_value": xds,
                                                }
                                            }
                                        }
                                    }
                                ]
                            }
                        ],
                    },
                }
            ]
        },
    }


# ---- the snapshot ----


class State:
    """What the snapshot holds: where /app goes, the extra routes, the fresh clusters."""

    def __init__(self, upstreams, listen):
        self.upstreams = upstreams
        self.listen = listen
        self.app = "blue"
        self.routes = []
        self.fresh = []

    def document(self):
        def eds(name, health):
            c = {
                "name": name,
                "connect_timeout": "1s",
                "type": "EDS",
                "eds_cluster_config": {"eds_config": {"ads": {}, "resource_api_version": "V3"}},
            }
            if health:
                c["health_checks"] = [
                    {
                        "timeout": "1s",
                        "interval": "5s",
                        "unhealthy_threshold": 1,
                        "healthy_threshold": 1,
                        "http_health_check": {"path": "/healthz"},
                    }
                ]
            return c

        def cla(name, port):
            return {
                "cluster_name": name,
                "endpoints": [
                    {
                        "lb_endpoints": [
                            {
                                "endpoint": {
                                    "address": {
                                        "socket_address": {"address": "127.0.0.1", "port_value": port}
                                    }
                                }
                            }
                        ]
                    }
                ],
            }

        clusters = [eds("blue", False), eds("green", False)]
        endpoints = [cla("blue", self.upstreams["blue"]), cla("green", self.upstreams["green"])]
        routes = [{"match": {"path": "/app"}, "route": {"cluster": self.app}}]
        for r in self.routes:
            routes.append({"match": {"path": f"/r{r}"}, "route": {"cluster": "blue"}})
        for f in self.fresh:
            clusters.append(eds(f"fresh{f}", True))
            endpoints.append(cla(f"fresh{f}", self.upstreams["fresh"]))
            routes.append({"match": {"path": f"/c{f}"}, "route": {"cluster": f"fresh{f}"}})
        listener = {
            "name": "http",
            "address": {"socket_address": {"address": "127.0.0.1", "port_value": self.listen}},
            "filter_chains": [
                {
                    "filters": [
                        {
                            "name": "envoy.filters.network.http_connection_manager",
                            "typed_config": {
                                "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
                                "stat_prefix": "ingress",
                                "rds": {
                                    "route_config_name": "main",
                                    "config_source": {"ads": {}, "resource_api_version": "V3"},
                                },
                                "http_filters": [
                                    {
                                        "name": "envoy.filters.http.router",
                                        "typed_config": {
                                            "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
                                        },
                                    }
                                ],
                            },
                        }
                    ]
                }
            ],
        }
        return json.dumps(
            {
                "clusters": clusters,
                "endpoints": endpoints,
                "listeners": [listener],
                "routes": [
                    {
                        "name": "main",
                        "virtual_hosts": [{"name": "all", "domains": ["*"], "routes": routes}],
                    }
                ],
            },
            indent=1,
        )


# ---- where the snapshot lives ----


class Files:
    def __init__(self, root):
        self.dir = os.path.join(root, "config")
        os.makedirs(self.dir)

    def args(self):
        return ["--config", self.dir]

    def write(self, text):
        """Write a temporary file, then rename it over (an editor's save); the rename's time."""
        tmp = os.path.join(self.dir, ".snapshot.yaml.tmp")
        with open(tmp, "w") as f:
            f.write(text)
        at = time.time()
        os.rename(tmp, os.path.join(self.dir, "snapshot.yaml"))
        return at


class Etcd:
    def __init__(self, root, binary):
        self.client = free_port()
        peer = free_port()
        self.log = open(os.path.join(root, "etcd.log"), "w")
        self.proc = subprocess.Popen(
            [
                binary,
                "--data-dir",
                os.path.join(root, "etcd"),
                "--listen-client-urls",
                f"http://127.0.0.1:{self.client}",
                "--advertise-client-urls",
                f"http://127.0.0.1:{self.client}",
                "--listen-peer-urls",
                f"http://127.0.0.1:{peer}",
                "--initial-advertise-peer-urls",
                f"http://127.0.0.1:{peer}",
                "--initial-cluster",
                f"default=http://127.0.0.1:{peer}",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        if not wait_port(self.client, time.time() + 10):
            raise SystemExit("etcd did not start; see etcd.log")
        # The JSON gateway answers once etcd has a leader.
        deadline = time.time() + 10
        while True:
            try:
                self.put("/bench/.probe", "{}")
                break
            except OSError:
                if time.time() > deadline:
                    raise SystemExit("etcd did not answer; see etcd.log")
                time.sleep(0.05)

    def args(self):
        return ["--source", f"etcd://127.0.0.1:{self.client}/bench", "--replica-name", "bench"]

    def put(self, key, value):
        import base64

        body = json.dumps(
            {
                "key": base64.b64encode(key.encode()).decode(),
                "value": base64.b64encode(value.encode()).decode(),
            }
        ).encode()
        urllib.request.urlopen(f"http://127.0.0.1:{self.client}/v3/kv/put", body, timeout=5).read()

    def write(self, text):
        at = time.time()
        self.put("/bench/snapshot.yaml", text)
        return at

    def stop(self):
        self.proc.terminate()
        self.proc.wait(10)
        self.log.close()


# ---- probing ----


class Probe:
    def __init__(self, port):
        self.port = port
        self.conn = None

    def get(self, path):
        for _ in range(2):
            try:
                if self.conn is None:
                    self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                self.conn.request("GET", path)
                r = self.conn.getresponse()
                body = r.read()
                return r.status, body.decode(errors="replace")
            except (OSError, http.client.HTTPException):
                self.conn = None
        return None, ""


def load_loop(port, stop, ok, failed, per_second):
    probe = Probe(port)
    every = 1.0 / per_second
    next_at = time.time()
    while not stop.is_set():
        status, _ = probe.get("/app")
        if status == 200:
            ok.value += 1
        else:
            failed.value += 1
        next_at += every
        pause = next_at - time.time()
        if pause > 0:
            time.sleep(pause)


def churn_loop(directory, every, stop):
    """Rewrite another file (renamed over) every `every` seconds: a tool writing without a
    pause beside the edits measured."""
    n = 0
    while not stop.is_set():
        n += 1
        tmp = os.path.join(directory, ".other.yaml.tmp")
        with open(tmp, "w") as f:
            f.write(f"clusters: [{{name: other, connect_timeout: {n % 50 + 1}s}}]\n")
        os.rename(tmp, os.path.join(directory, "other.yaml"))
        time.sleep(every)


def watch_change(probe, path, answered, at):
    """Probe `path` every PROBE_EVERY from now until `answered(status, body)`, then AFTER
    more: (seconds from `at` to the first new answer, or None; failed requests)."""
    failed = 0
    seen = None
    next_at = time.time()
    deadline = at + TIMEOUT
    while True:
        status, body = probe.get(path)
        now = time.time()
        verdict = answered(status, body)
        if verdict == "new":
            if seen is None:
                seen = now - at
        elif verdict == "failed":
            failed += 1
        elif seen is not None:
            failed += 1  # the old answer back after the new one
        if seen is not None and now >= at + seen + AFTER:
            return seen, failed
        if now > deadline:
            return None, failed
        next_at += PROBE_EVERY
        pause = next_at - time.time()
        if pause > 0:
            time.sleep(pause)


# ---- Switchyard's log: the timeline ----

SEEN = ("A change to the config files was seen.", "etcd: a change arrived on the watch.")
LOADING = ("Loading the config files.", "etcd: documents changed; loading them.")
LOADED = ("Loaded snapshot files.",)


def log_events(path):
    events = []
    with open(path) as f:
        for line in f:
            try:
                e = json.loads(line)
            except ValueError:
                continue
            ts = e.get("timestamp")
            if not ts:
                continue
            t = datetime.datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()
            events.append((t, e.get("message", ""), e))
    return events


def timeline(events, edits):
    """Per edit (its time, the next edit's time): the offsets (ms) of each step from the edit
    (the change seen: the last event that started a change before the load)."""
    steps = {"seen": [], "load": [], "published": [], "pushed": [], "acked": []}
    for at, until in edits:
        # A change may start before the edit's moment: an editor's temporary file, written
        # before the rename, is a file being written.
        window = [(t, m) for t, m, _ in events if at - 0.05 <= t < until]

        def first(messages, after=at):
            for t, m in window:
                if t >= after and m in messages:
                    return t
            return None

        load = first(LOADING)
        seen = None
        for t, m in window:
            if m in SEEN and load is not None and t <= load:
                seen = t
        published = first(LOADED)
        pushed = first(("Sending response.",), published or at) if published else None
        acks = [t for t, m in window if m == "ACK." and pushed and t >= pushed]
        for name, t in (
            ("seen", seen),
            ("load", load),
            ("published", published),
            ("pushed", pushed),
            ("acked", acks[-1] if acks else None),
        ):
            if t is not None:
                steps[name].append((t - at) * 1000)
    return {k: statistics.median(v) if v else None for k, v in steps.items()}


def percentile(values, p):
    values = sorted(values)
    if not values:
        return None
    k = min(len(values) - 1, max(0, round(p / 100 * len(values) + 0.5) - 1))
    return values[k]


# ---- one variant ----


def new_path(upstream):
    """How a new path's answers read: 404 (no route yet) is the old state, `upstream`'s
    answer the new one, anything else a failure."""

    def answered(status, body):
        if status == 200 and body == upstream:
            return "new"
        return "old" if status == 404 else "failed"

    return answered


def run_variant(args, source_kind, transport, load, change, ordering):
    root = tempfile.mkdtemp(prefix="propagation-")
    procs = []
    etcd = None
    ended = False
    try:
        upstreams = {"blue": free_port(), "green": free_port(), "fresh": free_port()}
        up_boot = os.path.join(root, "upstreams.json")
        with open(up_boot, "w") as f:
            json.dump(upstream_bootstrap(upstreams, free_port()), f)
        procs.append(
            subprocess.Popen(
                [args.envoy, "-c", up_boot, "--disable-hot-restart", "-l", "error"],
                stdout=subprocess.DEVNULL,
                stderr=open(os.path.join(root, "upstreams.log"), "w"),
            )
        )
        listen, xds, admin, proxy_admin = free_port(), free_port(), free_port(), free_port()
        state = State(upstreams, listen)
        if source_kind == "files":
            source = Files(root)
        else:
            etcd = source = Etcd(root, args.etcd)
        source.write(state.document())
        log_path = os.path.join(root, "switchyard.log")
        serve = [
            args.switchyard,
            "serve",
            *source.args(),
            "--xds-addr",
            f"127.0.0.1:{xds}",
            "--admin-addr",
            f"127.0.0.1:{admin}",
            "--log-level",
            "debug",
            "--log-format",
            "json",
            "--ordering",
            ordering,
            *args.serve_args.split(),
        ]
        procs.append(subprocess.Popen(serve, stdout=subprocess.DEVNULL, stderr=open(log_path, "w")))
        if not wait_port(xds, time.time() + 20):
            raise SystemExit(f"switchyard did not start; see {log_path}")
        boot = os.path.join(root, "proxy.json")
        with open(boot, "w") as f:
            json.dump(proxy_bootstrap(xds, proxy_admin, transport == "delta"), f)
        procs.append(
            subprocess.Popen(
                [args.envoy, "-c", boot, "--disable-hot-restart", "-l", "warning"],
                stdout=subprocess.DEVNULL,
                stderr=open(os.path.join(root, "proxy.log"), "w"),
            )
        )
        probe = Probe(listen)
        deadline = time.time() + 20
        while probe.get("/app") != (200, "blue"):
            if time.time() > deadline:
                raise SystemExit(f"the Envoy never answered /app; see {root}")
            time.sleep(0.05)

        stop = multiprocessing.Event()
        ok, failed_load = multiprocessing.Value("l", 0), multiprocessing.Value("l", 0)
        loader = None
        if load:
            loader = multiprocessing.Process(target=load_loop, args=(listen, stop, ok, failed_load, load))
            loader.start()
            time.sleep(0.5)

        churn = None
        if args.churn and source_kind == "files":
            churn = multiprocessing.Process(target=churn_loop, args=(source.dir, args.churn / 1000, stop))
            churn.start()
            time.sleep(0.2)

        latencies, failed, edits, missed = [], 0, [], 0
        for k in range(1, args.edits + 1):
            if change == "move":
                old = state.app
                state.app = "green" if old == "blue" else "blue"
                path, new = "/app", state.app

                def answered(status, body, old=old, new=new):
                    if status == 200 and body == new:
                        return "new"
                    return "old" if status == 200 and body == old else "failed"

            elif change == "route":
                state.routes.append(k)
                path, answered = f"/r{k}", new_path("blue")
            else:
                state.fresh.append(k)
                path, answered = f"/c{k}", new_path("fresh")

            text = state.document()
            at = source.write(text)
            seen, f = watch_change(probe, path, answered, at)
            failed += f
            if seen is None:
                missed += 1
            else:
                latencies.append(seen * 1000)
            edits.append(at)
            time.sleep(0.2)  # the change's last ACKs, before the next edit
        stop.set()
        if loader:
            loader.join(5)
        if churn:
            churn.join(5)
        windows = list(zip(edits, edits[1:] + [time.time()]))
        split = timeline(log_events(log_path), windows)
        ended = True
        return {
            "source": source_kind,
            "transport": transport,
            "load": load or 0,
            "change": change,
            "ordering": ordering,
            "edits": args.edits,
            "missed": missed,
            "p50": percentile(latencies, 50),
            "p90": percentile(latencies, 90),
            "p99": percentile(latencies, 99),
            "max": max(latencies) if latencies else None,
            "failed_probe": failed,
            "failed_load": failed_load.value,
            "load_requests": ok.value + failed_load.value,
            "split": split,
        }
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        if etcd:
            etcd.stop()
        if args.keep or not ended:
            print(f"  (kept {root})", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)


def fmt(v):
    return "-" if v is None else f"{v:.1f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("switchyard")
    ap.add_argument("--envoy", default=os.environ.get("ENVOY_BIN") or shutil.which("envoy") or ".venv/bin/envoy")
    ap.add_argument("--etcd", default=shutil.which("etcd") or "etcd")
    ap.add_argument("--edits", type=int, default=30)
    ap.add_argument("--sources", default="files,etcd")
    ap.add_argument("--transports", default="sotw,delta")
    ap.add_argument("--loads", default="idle,300")
    ap.add_argument("--changes", default="move,route,cluster")
    ap.add_argument("--control", action="store_true")
    ap.add_argument("--churn", type=int, metavar="MS", help="files: rewrite another file every MS ms meanwhile")
    ap.add_argument("--serve-args", default="", help="more flags for `switchyard serve`")
    ap.add_argument("--json")
    ap.add_argument("--keep", action="store_true", help="keep each run's directory (logs)")
    args = ap.parse_args()
    variants = []
    for s in args.sources.split(","):
        for t in args.transports.split(","):
            for l in args.loads.split(","):
                for c in args.changes.split(","):
                    variants.append((s, t, 0 if l == "idle" else int(l), c, "on"))
    if args.control:
        variants.append(("files", "sotw", 0, "cluster", "off"))
    print(
        "| source | transport | load | change | ordering | p50 | p90 | p99 | max (ms) | failed | "
        "seen | load start | published | pushed | last ACK (ms, medians) |"
    )
    print("|" + "---|" * 15)
    results = []
    for v in variants:
        r = run_variant(args, *v)
        results.append(r)
        sp = r["split"]
        failed = r["failed_probe"] + r["failed_load"]
        missed = f" ({r['missed']} never answered)" if r["missed"] else ""
        print(
            f"| {r['source']} | {r['transport']} | {'idle' if not r['load'] else str(r['load']) + ' req/s'} "
            f"| {r['change']} | {r['ordering']} | {fmt(r['p50'])} | {fmt(r['p90'])} | {fmt(r['p99'])} "
            f"| {fmt(r['max'])}{missed} | {failed} | {fmt(sp['seen'])} | {fmt(sp['load'])} "
            f"| {fmt(sp['published'])} | {fmt(sp['pushed'])} | {fmt(sp['acked'])} |",
            flush=True,
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
