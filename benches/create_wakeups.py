#!/usr/bin/env python3
"""Context switches a task creation costs the gateway, by thread (issue #47, run 29).

Starts its own redis-server (unless --memory), plain_server and the gateway, makes
--creates sequential 2026-07-28 `tools/call`s of a long `sleep` with the tasks extension
(no task ends while it counts; with --echo, of `echo`, each task ending at once, counted
once all have ended), and reads each gateway thread's voluntary and
involuntary context switches from /proc before and after. Also prints Redis's
`usec_per_call` of the commands a create sends. Extra gateway flags go after `--`.

    python3 benches/create_wakeups.py --gateway target/release/mcp-task-gateway \\
        --plain-server target/release/plain_server [--memory] [-- --worker-threads 1]
"""

import argparse
import http.client
import json
import os
import re
import socket
import subprocess
import sys
import time

VERSION = "2026-07-28"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def announced(proc):
    line = proc.stdout.readline()
    if "listening on " not in line:
        sys.exit(f"no address announced: {line!r}")
    return line.split("listening on ", 1)[1].strip()


def switches(pid):
    """{thread id:name: voluntary + involuntary switches} of every thread of `pid`."""
    counts = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        status = open(f"/proc/{pid}/task/{tid}/status").read()
        name = open(f"/proc/{pid}/task/{tid}/comm").read().strip()
        total = sum(int(n) for n in re.findall(r"voluntary_ctxt_switches:\s+(\d+)", status))
        counts[f"{tid}:{name}"] = total
    return counts


def settle(pid, quiet_for=0.3, deadline=10.0):
    """Waits until no thread of `pid` switches for `quiet_for` seconds: the tasks' runs
    have ended."""
    end = time.time() + deadline
    last = switches(pid)
    while time.time() < end:
        time.sleep(quiet_for)
        now = switches(pid)
        if now == last:
            return
        last = now
    sys.exit("the gateway did not settle")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gateway", default="target/release/mcp-task-gateway")
    parser.add_argument("--plain-server", default="target/release/plain_server")
    parser.add_argument("--creates", type=int, default=2000)
    parser.add_argument("--memory", action="store_true", help="the memory store, no Redis")
    parser.add_argument("--echo", action="store_true",
                        help="each task calls `echo` and ends at once: a whole task's switches "
                             "(create, call, finish, announcement), counted once all have ended")
    parser.add_argument("gateway_flags", nargs="*")
    args = parser.parse_args()

    quiet = {**os.environ, "RUST_LOG": "error"}
    procs = []
    try:
        store = []
        redis_port = None
        if not args.memory:
            redis_port = free_port()
            procs.append(subprocess.Popen(
                ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1",
                 "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL))
            store = ["--redis", f"redis://127.0.0.1:{redis_port}"]
            deadline = time.time() + 10
            while subprocess.run(["redis-cli", "-p", str(redis_port), "ping"],
                                 capture_output=True, text=True).stdout.strip() != "PONG":
                if time.time() > deadline:
                    sys.exit("redis-server did not start")
                time.sleep(0.05)
        upstream = subprocess.Popen([args.plain_server, "--listen", "127.0.0.1:0"],
                                    stdout=subprocess.PIPE, text=True, env=quiet)
        procs.append(upstream)
        gateway = subprocess.Popen(
            [args.gateway, "--listen", "127.0.0.1:0", "--upstream", announced(upstream),
             "--request-state-key", "a" * 64, *store, *args.gateway_flags],
            stdout=subprocess.PIPE, text=True, env=quiet)
        procs.append(gateway)
        url = re.match(r"http://([^/]+)(/.*)", announced(gateway))
        conn = http.client.HTTPConnection(url.group(1), timeout=30)
        tool = "echo" if args.echo else "sleep"
        arguments = {"text": "x" * 1024} if args.echo else {"ms": 600000, "steps": 0}
        params = {"name": tool, "arguments": arguments, "_meta": {
            "io.modelcontextprotocol/protocolVersion": VERSION,
            "io.modelcontextprotocol/clientCapabilities": {
                "extensions": {"io.modelcontextprotocol/tasks": {}}},
            "io.modelcontextprotocol/clientInfo": {"name": "create-wakeups", "version": "0"}}}
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})
        headers = {"content-type": "application/json",
                   "accept": "application/json, text/event-stream",
                   "mcp-protocol-version": VERSION, "mcp-method": "tools/call",
                   "mcp-name": tool}

        def create():
            conn.request("POST", url.group(2), body, headers)
            reply = conn.getresponse().read()
            if b'"taskId"' not in reply:
                sys.exit(f"no task created: {reply[:200]!r}")

        for _ in range(200):  # warm: connections, scripts, pools
            create()
        if redis_port:
            subprocess.run(["redis-cli", "-p", str(redis_port), "config", "resetstat"],
                           capture_output=True, check=True)
        before = switches(gateway.pid)
        for _ in range(args.creates):
            create()
        if args.echo:
            settle(gateway.pid)
        after = switches(gateway.pid)
        per = {t: (after[t] - before.get(t, 0)) / args.creates for t in after}
        print(f"context switches a create: {sum(per.values()):.2f} in all")
        for thread, n in sorted(per.items()):
            if n > 0:
                print(f"  {thread}: {n:.2f}")
        if redis_port:
            stats = subprocess.run(["redis-cli", "-p", str(redis_port), "info", "commandstats"],
                                   capture_output=True, text=True).stdout
            for line in stats.splitlines():
                if line.startswith("cmdstat_") and "calls=" in line:
                    print(" ", line)
    finally:
        for proc in reversed(procs):
            proc.terminate()
            proc.wait()


if __name__ == "__main__":
    main()
