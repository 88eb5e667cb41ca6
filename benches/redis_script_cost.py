#!/usr/bin/env python3
"""Redis's own time for a task's create and finish, as the gateway sends them
(docs/benchmarks.md, run 34). Starts its own redis-server on a free port, sends N
operations one at a time and reads `INFO commandstats`: microseconds of Redis's clock a
call, without the network. The scripts are read from crates/store/src/lua/.

    python3 benches/redis_script_cost.py [--tasks 20000] [--redis-server redis-server]
"""
import argparse
import os
import socket
import subprocess
import time
import uuid

LUA = os.path.join(os.path.dirname(__file__), "..", "crates", "store", "src", "lua")
# The fields of a new echo task, as `redis/codec.rs` writes them (sizes alike).
FIELDS = ["principal", "anonymous", "owner", "vm-1", "status", "working",
          "created", "0", "updated", "0", "ttl", "3600000", "poll", "1000",
          "next", "0", "out", "0",
          "request", '{"name":"echo","arguments":{"text":"hi"}}',
          "request_kept", '{"name":"echo"}', "resume", "r" * 60]
RESULT = ('{"content":[{"text":"hi","type":"text"}],"resultType":"complete",'
          '"structuredContent":{"echo":{"text":"hi"}}}')
KEY_TTL = 3602000


def encode(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class Redis:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.buf = b""

    def reply(self):
        """One RESP reply, nested arrays included."""
        while b"\r\n" not in self.buf:
            self.buf += self.sock.recv(65536)
        line, self.buf = self.buf.split(b"\r\n", 1)
        kind, rest = line[:1], line[1:]
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            while len(self.buf) < n + 2:
                self.buf += self.sock.recv(65536)
            data, self.buf = self.buf[:n], self.buf[n + 2:]
            return data
        if kind == b"*":
            return [self.reply() for _ in range(int(rest))]
        if kind == b"-":
            raise RuntimeError(rest.decode())
        return int(rest) if kind == b":" else rest

    def call(self, *commands):
        self.sock.sendall(b"".join(encode(*c) for c in commands))
        return [self.reply() for _ in commands]

    def stats(self):
        text = self.call(("INFO", "commandstats"))[0].decode()
        usec = {}
        for line in text.splitlines():
            if line.startswith("cmdstat_"):
                name, fields = line[len("cmdstat_"):].split(":", 1)
                parts = dict(f.split("=") for f in fields.split(","))
                usec[name] = (int(parts["calls"]), float(parts["usec_per_call"]))
        return usec


def script(name):
    with open(os.path.join(LUA, "prelude.lua")) as p, open(os.path.join(LUA, name)) as s:
        return p.read() + "\n" + s.read()


def measure(r, label, keys, send):
    r.call(("CONFIG", "RESETSTAT"))
    for key in keys:
        send(key)
    stats = r.stats()
    # A script's or a transaction's time includes the commands run inside it.
    outer = {"evalsha", "multi", "exec"}
    total = sum(c * u for n, (c, u) in stats.items() if n in outer)
    inner = ", ".join(f"{n} {u:.2f}" for n, (c, u) in sorted(stats.items())
                      if n not in outer and c >= len(keys))
    print(f"| {label} | {total / len(keys):.1f} | {inner} |")


def main():
    args = argparse.ArgumentParser()
    args.add_argument("--tasks", type=int, default=20000)
    args.add_argument("--redis-server", default="redis-server")
    a = args.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([a.redis_server, "--port", str(port), "--save", "",
                               "--appendonly", "no"], stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                r = Redis(port)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        create_sha, finish_sha = (r.call(("SCRIPT", "LOAD", script(f)))[0]
                                  for f in ("create.lua", "finish.lua"))
        now = str(int(time.time() * 1000))
        FIELDS[7] = FIELDS[9] = now
        print("| operation | Redis µs a call | commands inside (µs a call) |")
        print("|---|---:|---|")
        scripted = [f"mtg:ns:{{{uuid.uuid4()}}}" for _ in range(a.tasks)]
        measure(r, "create, `EVALSHA create`", scripted,
                lambda k: r.call(("EVALSHA", create_sha, 1, k, KEY_TTL, *FIELDS, "")))
        staged = [f"mtg:ns:{{{uuid.uuid4()}}}" for _ in range(a.tasks)]

        def create_unheard(k):
            replies = r.call(("MULTI",), ("HSET", k + ":new", *FIELDS),
                             ("PEXPIRE", k + ":new", KEY_TTL), ("RENAMENX", k + ":new", k),
                             ("DEL", k + ":new"), ("EXEC",))
            assert replies[-1][2] == 1, replies
        measure(r, "create, `MULTI` … `RENAMENX` … `EXEC`", staged, create_unheard)

        def finish(k, plan):
            moved = r.call(("EVALSHA", finish_sha, 1, k, str(int(now) + 5), "completed",
                            "result", RESULT, plan))[0]
            assert moved == 1, moved
        measure(r, "finish, no webhook", scripted, lambda k: finish(k, ""))
        # An empty subscription list takes the script's general path, the one a
        # webhook's event is written on, without writing one.
        plan = '{"t":"x","n":"0","s":[]}'
        measure(r, "finish, the general path (a plan that wants nothing)", staged,
                lambda k: finish(k, plan))
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
