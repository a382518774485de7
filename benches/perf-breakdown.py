#!/usr/bin/env python3
"""Where a server's CPU went, by layer, from a `perf record --call-graph dwarf` of it.

    perf record -F 999 --call-graph dwarf,16384 -p PID -o push.data -- sleep 3
    perf script -i push.data -F tid,ip,sym,dso | benches/perf-breakdown.py
    benches/perf-breakdown.py --callgrind callgrind.out.PID.1-02 ...   (instructions instead)

Each sample is given to two things:
- what ran: Rust code, libc's copies and compares, the allocator (jemalloc), or the kernel
  inside a system call (by the call: write, read, epoll_wait, futex, ...; "interrupts" when
  no call is on the stack: loopback TCP delivered in a softirq, timers);
- whose it was: the innermost Rust frame's crate (h2, hyper, tonic, prost, bytes, tokio,
  Switchyard's own), walking past the standard library, libc, the allocator and the
  kernel. A copy h2 asks for is h2's; a `writev` hyper makes is hyper's.
Switchyard's own samples are also given to the innermost Switchyard module on their stack
(`server::body`, `protocol::delta`, `fleet`, ...). Generic code is named for the crate that
defines it (`<h2::... as tokio::...>` is h2's); a function inlined into another counts as
the other. docs/benchmarks.md "Where a push's CPU
goes, by layer" reads this output.
"""

import re
import sys
from collections import Counter

OWNERS = {
    "h2": "h2 (HTTP/2 frames, flow control, HPACK)",
    "hyper": "hyper (connection and stream dispatch)",
    "hyper_util": "hyper (connection and stream dispatch)",
    "tonic": "tonic (gRPC codec and service)",
    "prost": "prost (protobuf)",
    "bytes": "bytes (buffers)",
    "tokio": "tokio (tasks, wake-ups, IO driver)",
    "mio": "tokio (tasks, wake-ups, IO driver)",
    "switchyard": "Switchyard's own",
    "foldhash": "Switchyard's own",
    "http_body_util": "hyper (connection and stream dispatch)",
}
# Crates whose frames are skipped to find the owner.
PASS = {"core", "alloc", "std", "hashbrown", "slab", "http_body", "http", "tower", "futures_util",
        "futures_core", "pin_project_lite", "smallvec", "indexmap", "tracing", "tracing_core"}

def crate_of(sym):
    s = sym.lstrip("<&*( ")
    for prefix in ("mut ", "const ", "dyn "):
        if s.startswith(prefix):
            s = s[len(prefix):]
    m = re.match(r"([A-Za-z_][A-Za-z0-9_]*)::", s)
    return m.group(1) if m else None


# The system call a kernel sample is in, by the kernel's own functions (outermost first):
# a write's share includes the loopback delivery to the reader it pays for in its softirq.
KERNEL_CALLS = [
    ("write", r"^(__x64_sys_(writev|write|sendmsg|sendto)|do_writev|vfs_writev|sock_write_iter|tcp_sendmsg)"),
    ("read", r"^(__x64_sys_(recvfrom|read|readv|recvmsg)|__sys_recvfrom|sock_recvmsg|sock_read_iter|tcp_recvmsg)"),
    ("epoll_wait", r"^(__x64_sys_epoll_(p)?wait|do_epoll_wait|ep_poll)"),
    ("futex (wake-ups)", r"^(__x64_sys_futex|do_futex|futex_)"),
    ("madvise (the allocator)", r"^(__x64_sys_madvise|do_madvise)"),
]
# Tokio's IO wrappers: a read or write through them is their caller's.
TOKIO_IO = {"tokio", "mio", "tokio_util"}


def classify(frames):
    """(what ran, whose) for one sample; frames leaf first, as (symbol, dso)."""
    kernel = [sym for sym, dso in frames if dso.startswith("[kernel")]
    if kernel:
        call = None
        for sym in reversed(kernel):
            for name, pattern in KERNEL_CALLS:
                if re.match(pattern, sym):
                    call = name
                    break
            if call:
                break
        what = "kernel: " + (call or "interrupts, page faults, other")
    else:
        leaf_sym, leaf_dso = frames[0] if frames else ("", "")
        if re.search(r"_rjem_|\bje_|jemalloc|rallocx|mallocx|sdallocx", leaf_sym):
            what = "allocator"
        elif re.search(r"mem(move|cpy|set|cmp)|strlen", leaf_sym):
            what = "libc copies and compares"
        elif "libc" in leaf_dso:
            what = "libc other"
        else:
            what = "code"
    # IO and copies are charged past tokio's wrappers to who asked; tokio's own code is
    # tokio's.
    skip_tokio = what != "code"
    whose, tokio_seen = "no Rust frame", False
    for sym, dso in frames:
        if dso.startswith("[kernel") or "libc" in dso:
            continue
        crate = crate_of(sym)
        if crate is None or crate in PASS:
            continue
        if skip_tokio and crate in TOKIO_IO:
            tokio_seen = True
            continue
        whose = OWNERS.get(crate, f"other ({crate})")
        break
    else:
        if tokio_seen:
            whose = OWNERS["tokio"]
    return what, whose


def module_of(frames):
    """The innermost Switchyard frame's module, two levels deep (`server::body`,
    `protocol::sotw`), for a sample that is Switchyard's own."""
    for sym, _ in frames:
        s = sym.lstrip("<&*( ")
        m = re.match(r"switchyard::([a-z_0-9]+)(?:::([a-z_0-9]+))?", s)
        if m:
            return "::".join(x for x in m.groups() if x)
    return "(foldhash, no Switchyard frame)"


def samples(lines):
    frames = []
    for line in lines:
        if not line.strip():
            if frames:
                yield frames
            frames = []
            continue
        m = re.match(r"^\s+[0-9a-f]+\s+(.*?)\s+\((.*)\)\s*$", line)
        if m:
            frames.append((re.sub(r"\+0x[0-9a-f]+$", "", m.group(1)), m.group(2)))
    if frames:
        yield frames


def callgrind(paths):
    """Each function's own instructions in callgrind output files, summed by layer; and who
    calls `memcpy` (a call's cost line follows its `calls=` line and is not the caller's
    own)."""
    names, own, copies = {}, Counter(), Counter()
    for path in paths:
        fn = cfn = None
        call = False
        for line in open(path):
            m = re.match(r"(c?fn)=\((\d+)\)(?: (.*))?", line.strip())
            if m:
                if m.group(3):
                    names[m.group(2)] = m.group(3)
                if m.group(1) == "fn":
                    fn = names.get(m.group(2))
                else:
                    cfn = names.get(m.group(2))
                continue
            if line.startswith("calls="):
                call = True
                continue
            if re.match(r"^[+\-*]?\d", line) and fn:
                parts = line.split()
                cost = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
                if call:
                    if cfn and "memcpy" in cfn:
                        copies[fn] += cost
                    call = False
                else:
                    own[fn] += cost
    total = sum(own.values())
    layers = Counter()
    for f, cost in own.items():
        if re.search(r"mem(move|cpy|set|cmp)", f):
            layer = "libc copies and compares"
        elif re.search(r"_rjem_|je_|rallocx|mallocx", f):
            layer = "allocator"
        else:
            crate = crate_of(f)
            layer = OWNERS.get(crate, "std, core and the rest" if crate in PASS or crate is None else f"other ({crate})")
        layers[layer] += cost
    print(f"{total:,} instructions")
    for layer, cost in layers.most_common():
        print(f"{100 * cost / total:6.1f}%  {cost:>12,}  {layer}")
    print("\nmemcpy's callers:")
    for f, cost in copies.most_common(8):
        print(f"{cost:>12,}  {f[:120]}")


def main():
    if sys.argv[1:2] == ["--callgrind"]:
        return callgrind(sys.argv[2:])
    both, whats, whoses, modules = Counter(), Counter(), Counter(), Counter()
    n = 0
    for frames in samples(sys.stdin):
        what, whose = classify(frames)
        if whose == OWNERS["switchyard"]:
            modules[module_of(frames)] += 1
        both[(whose, what)] += 1
        whats[what] += 1
        whoses[whose] += 1
        n += 1
    if not n:
        sys.exit("no samples read")
    print(f"{n} samples\n\nwhose (the innermost Rust frame's crate):")
    for k, v in whoses.most_common():
        print(f"{100 * v / n:6.1f}%  {k}")
    print("\nwhat ran:")
    for k, v in whats.most_common():
        print(f"{100 * v / n:6.1f}%  {k}")
    print("\nwhose, what (over 0.5%):")
    for (whose, what), v in both.most_common():
        if 100 * v / n >= 0.5:
            print(f"{100 * v / n:6.1f}%  {whose}: {what}")
    print("\nSwitchyard's own, by its innermost module (over 0.3%; code, copies and allocations):")
    for module, v in modules.most_common():
        if 100 * v / n >= 0.3:
            print(f"{100 * v / n:6.1f}%  {module}")


if __name__ == "__main__":
    main()
