#!/usr/bin/env python3
"""Gateway RSS per open client connection that has made one pass-through request.

Each connection is a 2025-11-25 session client's: it POSTs `initialize` (relayed to
the upstream on the connection's pinned upstream connection, docs/benchmarks.md run 26)
and stays open. What one connection costs is then the client connection's state on the
gateway plus its pinned upstream connection. Run from the repository's root after
`cargo build --release -p mcp-task-gateway -p fixture-servers --bins`:

    benches/connection_memory.py [--connections N] [--rounds R] GATEWAY_BIN [GATEWAY_BIN ...]

Several binaries are measured in turns (ABAB…), each against its own `plain_server`.
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURE = os.path.join(ROOT, "target", "release", "plain_server")
WARM_CONNECTIONS = 50


def start(command):
    """Starts a process that prints `listening on http://HOST:PORT/mcp`; it and its URL."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env={**os.environ, "RUST_LOG": "error"}, text=True)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.startswith("listening on "):
            return proc, line.split()[-1]
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise SystemExit(f"{command[0]} did not announce its address")


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise SystemExit("no VmRSS")


def initialize_request():
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "connection-memory", "version": "1"}}}).encode()
    head = ("POST /mcp HTTP/1.1\r\nhost: gateway\r\ncontent-type: application/json\r\n"
            "accept: application/json, text/event-stream\r\n"
            f"content-length: {len(body)}\r\n\r\n").encode()
    return head + body


def open_connection(address, request):
    """A keep-alive connection that made one request and read its whole answer."""
    sock = socket.create_connection(address)
    sock.sendall(request)
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, rest = data.split(b"\r\n\r\n", 1)
    if not head.startswith(b"HTTP/1.1 200"):
        raise SystemExit(f"initialize failed: {head!r}")
    lines = head.lower().split(b"\r\n")
    length = [int(l.split(b":")[1]) for l in lines if l.startswith(b"content-length:")]
    while (len(rest) < length[0]) if length else not rest.endswith(b"0\r\n\r\n"):
        rest += sock.recv(65536)
    return sock


def measure(gateway_bin, connections):
    fixture, upstream = start([FIXTURE, "--listen", "127.0.0.1:0"])
    gateway, url = start([gateway_bin, "--listen", "127.0.0.1:0", "--upstream", upstream])
    try:
        host, port = url.split("//")[1].split("/")[0].rsplit(":", 1)
        address, request = (host, int(port)), initialize_request()
        warm = [open_connection(address, request) for _ in range(WARM_CONNECTIONS)]
        time.sleep(0.5)  # settles the allocator's first growth; not a synchronisation
        before = rss_kib(gateway.pid)
        held = [open_connection(address, request) for _ in range(connections)]
        time.sleep(0.5)
        after = rss_kib(gateway.pid)
        for sock in warm + held:
            sock.close()
        return (after - before) * 1024 / connections
    finally:
        for proc in (gateway, fixture):
            proc.terminate()
            proc.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("gateways", nargs="+")
    args = parser.parse_args()
    results = {gateway: [] for gateway in args.gateways}
    for _ in range(args.rounds):
        for gateway in args.gateways:
            results[gateway].append(measure(gateway, args.connections))
    print(f"| gateway | bytes of RSS a connection ({args.connections} connections, median of {args.rounds}) | runs |")
    print("|---|---:|---|")
    for gateway, runs in results.items():
        print(f"| {gateway} | {statistics.median(runs):,.0f} | {', '.join(f'{r:,.0f}' for r in runs)} |")


if __name__ == "__main__":
    main()
