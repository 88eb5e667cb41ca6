#!/usr/bin/env python3
"""What a task costs in Redis, by part (issue #47, part 3).

Starts its own redis-server (no persistence) on a free port, plain_server and the
gateway on Redis, then creates --tasks tasks through 2026-07-28 `tools/call` with the
tasks extension, in two phases:

- working: `ask_name` tasks, which stay input_required (the upstream waits for an answer);
- finished: `echo` tasks whose text is --payload-bytes long, polled until completed.

After each phase it reads `MEMORY USAGE` of every key (SCAN, `SAMPLES 0`), groups the
keys by part (task hash, principal index, creation index, owner index, change feed,
other), and splits the task hashes by field (`HSTRLEN`: request, result, input
requests, the rest). It also gives `INFO memory`'s used_memory before and after. Bytes
per task = the phase's bytes / its tasks. Payload = the `tools/call` params (name and
arguments, compact JSON) plus the result as stored, the yardstick of the issue's goal (≤ 1.3 x payload).
An ended task keeps only its tool's name of the params unless the gateway runs with
`--admin-show-results` (`--keep-arguments` here).

    python3 benches/redis_footprint.py --gateway target/release/mcp-task-gateway \
        --plain-server target/release/plain_server --tasks 2000

Only the standard library and `redis-cli` / `redis-server` on PATH.
"""

import argparse
import http.client
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections import defaultdict

TASKS_EXT = "io.modelcontextprotocol/tasks"
VERSION = "2026-07-28"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def announced(proc, what, deadline=30):
    """The URL a child prints on its `listening on ...` line."""
    end = time.time() + deadline
    while time.time() < end:
        line = proc.stdout.readline()
        if not line:
            break
        m = re.search(r"listening on (\S+)", line)
        if m:
            return m.group(1)
    sys.exit(f"{what} did not announce its address")


class Redis:
    def __init__(self):
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="mtg-footprint-")
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no", "--dir", self.dir],
            stdout=subprocess.DEVNULL)
        end = time.time() + 10
        while self.cli("PING").strip() != "PONG":
            if time.time() > end:
                sys.exit("redis-server did not start")
            time.sleep(0.05)

    def url(self):
        return f"redis://127.0.0.1:{self.port}"

    def cli(self, *args):
        out = subprocess.run(["redis-cli", "-p", str(self.port), "--raw", *args],
                             capture_output=True, text=True)
        return out.stdout

    def batch(self, commands):
        """One output line per command (each answers one line)."""
        if not commands:
            return []
        text = "".join(" ".join(quote(a) for a in c) + "\n" for c in commands)
        out = subprocess.run(["redis-cli", "-p", str(self.port), "--raw"],
                             input=text, capture_output=True, text=True)
        return out.stdout.splitlines()

    def keys(self):
        found, cursor = [], "0"
        while True:
            lines = self.cli("SCAN", cursor, "COUNT", "1000").splitlines()
            cursor, batch = lines[0], lines[1:]
            found.extend(batch)
            if cursor == "0":
                return found

    def used_memory(self):
        m = re.search(r"used_memory:(\d+)", self.cli("INFO", "memory"))
        return int(m.group(1))

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


def quote(arg):
    return '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'


class Gateway:
    def __init__(self, url):
        m = re.match(r"http://([^/]+)(/.*)", url)
        self.host, self.path = m.group(1), m.group(2)
        self.conn = http.client.HTTPConnection(self.host, timeout=30)
        self.next_id = 0
        # Bytes of every tools/call's name and arguments, compact JSON (what the store
        # kept of the params before #47, without the client's `_meta`).
        self.params_sent = 0

    def request(self, method, params, name=None):
        self.next_id += 1
        params = dict(params)
        params["_meta"] = {
            "io.modelcontextprotocol/protocolVersion": VERSION,
            "io.modelcontextprotocol/clientCapabilities": {
                "extensions": {TASKS_EXT: {}}, "elicitation": {"form": {}}},
            "io.modelcontextprotocol/clientInfo": {"name": "redis-footprint", "version": "0"},
        }
        body = json.dumps({"jsonrpc": "2.0", "id": self.next_id, "method": method,
                           "params": params})
        if method == "tools/call":
            call = {k: v for k, v in params.items() if k != "_meta"}
            self.params_sent += len(json.dumps(call, separators=(",", ":")).encode())
        headers = {"content-type": "application/json",
                   "accept": "application/json, text/event-stream",
                   "mcp-protocol-version": VERSION, "mcp-method": method}
        if name:
            headers["mcp-name"] = name
        self.conn.request("POST", self.path, body, headers)
        reply = self.conn.getresponse()
        return json.loads(reply.read())

    def start_task(self, tool, arguments):
        reply = self.request("tools/call", {"name": tool, "arguments": arguments}, tool)
        task = reply.get("result", {}).get("task") or reply.get("result", {})
        task_id = task.get("taskId")
        if not task_id:
            sys.exit(f"no task from {tool}: {reply}")
        return task_id

    def status(self, task_id):
        reply = self.request("tasks/get", {"taskId": task_id}, task_id)
        result = reply.get("result", {})
        return (result.get("task") or result).get("status")


def part_of(key, prefix):
    rest = key[len(prefix):] if key.startswith(prefix) else key
    if rest.startswith("{"):
        return "task hash"
    for name, part in (("by-principal:", "principal index"), ("by-created", "creation index"),
                       ("owned:", "owner index"), ("changes", "change feed"),
                       ("lease:", "lease"), ("instances", "instances")):
        if rest.startswith(name):
            return part
    return "other: " + re.sub(r"\{.*", "{…}", rest)


FIELD_LENGTHS = (
    "local out = {} for _, k in ipairs(KEYS) do for _, n in ipairs(redis.call('HKEYS', k)) do "
    "out[#out + 1] = n out[#out + 1] = redis.call('HSTRLEN', k, n) end end return out")


def footprint(redis, prefix):
    """Bytes by part over the keys under `prefix`, bytes by task-hash field, task count."""
    keys = [k for k in redis.keys() if k.startswith(prefix)]
    sizes = redis.batch([["MEMORY", "USAGE", k, "SAMPLES", "0"] for k in keys])
    parts = defaultdict(int)
    task_keys = []
    for key, size in zip(keys, sizes):
        part = part_of(key, prefix)
        parts[part] += int(size or 0)
        if part == "task hash":
            task_keys.append(key)
    # Field bytes over every task hash; `ir:*` fields are input requests.
    fields = defaultdict(int)
    for start in range(0, len(task_keys), 500):
        chunk = task_keys[start:start + 500]
        lines = redis.cli("EVAL", FIELD_LENGTHS, str(len(chunk)), *chunk).splitlines()
        for name, length in zip(lines[0::2], lines[1::2]):
            fields["input requests" if name.startswith("ir:") else name] += int(length)
    return dict(parts), dict(fields), len(task_keys)


def report(title, tasks, parts, fields, used_before, used_after, params_sent):
    total = sum(parts.values())
    payload = params_sent + fields.get("result", 0)
    print(f"\n### {title}: {tasks} tasks\n")
    print("| part | bytes (MEMORY USAGE) | per task |")
    print("|---|---:|---:|")
    for part, size in sorted(parts.items(), key=lambda p: -p[1]):
        print(f"| {part} | {size:,} | {size / tasks:,.0f} |")
    print(f"| **all keys** | **{total:,}** | **{total / tasks:,.0f}** |")
    print(f"| used_memory after − before | {used_after - used_before:,} | "
          f"{(used_after - used_before) / tasks:,.0f} |")
    print("\n| task hash field | bytes (HSTRLEN) | per task |")
    print("|---|---:|---:|")
    for name, size in sorted(fields.items(), key=lambda p: -p[1]):
        print(f"| {name} | {size:,} | {size / tasks:,.0f} |")
    if payload:
        print(f"\npayload (params + result) per task: {payload / tasks:,.0f} B; "
              f"all keys / payload = {total / payload:.2f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gateway", default="target/release/mcp-task-gateway")
    parser.add_argument("--plain-server", default="target/release/plain_server")
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--payload-bytes", type=int, default=1024)
    parser.add_argument("--keep-arguments", action="store_true",
                        help="run the gateway with --admin-show-results")
    args = parser.parse_args()
    keep = ["--admin-show-results"] if args.keep_arguments else []

    redis = Redis()
    procs = []
    try:
        upstream = subprocess.Popen([args.plain_server, "--listen", "127.0.0.1:0"],
                                    stdout=subprocess.PIPE, text=True,
                                    env={**os.environ, "RUST_LOG": "error"})
        procs.append(upstream)
        upstream_url = announced(upstream, "plain_server")

        def gateway_on(namespace):
            """A gateway of its own on a namespace of its own, so phases do not mix."""
            gateway = subprocess.Popen(
                [args.gateway, "--listen", "127.0.0.1:0", "--upstream", upstream_url,
                 "--redis", redis.url(), "--store-namespace", namespace,
                 "--request-state-key", "a" * 64, *keep],
                stdout=subprocess.PIPE, text=True, env={**os.environ, "RUST_LOG": "error"})
            procs.append(gateway)
            return Gateway(announced(gateway, "mcp-task-gateway")), f"mtg:{namespace}:"

        client, prefix = gateway_on("working")
        base = redis.used_memory()
        waiting = [client.start_task("ask_name", {}) for _ in range(args.tasks)]
        deadline = time.time() + 120
        while any(client.status(t) != "input_required" for t in waiting):
            if time.time() > deadline:
                sys.exit("ask_name tasks did not reach input_required")
            time.sleep(0.1)
        parts, fields, count = footprint(redis, prefix)
        report("In flight (ask_name, input_required)", count, parts, fields, base,
               redis.used_memory(), client.params_sent)
        for task_id in waiting:
            client.request("tasks/cancel", {"taskId": task_id}, task_id)

        client, prefix = gateway_on("finished")
        base = redis.used_memory()
        text = "x" * args.payload_bytes
        done = [client.start_task("echo", {"text": text}) for _ in range(args.tasks)]
        deadline = time.time() + 120
        for task_id in done:
            while client.status(task_id) != "completed":
                if time.time() > deadline:
                    sys.exit(f"{task_id} did not complete")
                time.sleep(0.01)
        parts, fields, count = footprint(redis, prefix)
        report(f"Finished (echo of {args.payload_bytes} B, completed)", count, parts,
               fields, base, redis.used_memory(), client.params_sent)
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait()
        redis.stop()


if __name__ == "__main__":
    main()
