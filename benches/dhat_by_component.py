#!/usr/bin/env python3
"""Sums a dhat heap profile of the gateway by component, per task.

Usage: benches/dhat_by_component.py dhat-heap.json TASKS

The profile comes from a gateway built with `--features dhat-heap` (docs/benchmarks.md,
run 17); TASKS is how many tasks were in flight at the heap's peak ("t-gmax"). Each
allocation stack is put in one component by its allocation site and the gateway's
innermost frame; the rules are rough, and anything they miss is listed as "other".
"""
import json, sys, re, collections
path, n = sys.argv[1], int(sys.argv[2])
d = json.load(open(path)); ftbl = d['ftbl']
def cat(frames):
    s = frames[0] if frames else ''
    # The gateway's frames: its own crate's and its outbound transport's (mtg_transport).
    gw = next((f for f in frames if 'mcp_task_gateway' in f or 'mtg_transport' in f), '')
    allf = ' '.join(frames)
    # The lean HTTP/1.1 client (run 24): what an open call's connection keeps.
    if 'registration_set' in s: return 'socket: its registration with the runtime'
    if 'lean_http1::LeanPool::respond' in allf: return 'lean h1: the body (socket, framing state)'
    if 'ureq_proto' in allf: return 'lean h1: headers the framing state adds (host, length)'
    if 'HeaderMap' in s and 'session_http' in allf: return "upstream: the request's headers (kept by the framing state)"
    if 'forwarded_capabilities' in allf: return 'call: client capabilities (ToolCall)'
    if 'task_local' in s: return 'runner: boxed futures polled in the runner (task-local scope)'
    if 'spawn_runner' in gw and 'Cell<T,S>::new' in s: return 'runner: tokio task (the runner future)'
    if 'Instrumented' in s and (gw == '' or gw.endswith('::main')): return 'runner: the boxed runner future (instrumented)'
    # HTTP/2 to the upstream (--upstream-http2, run 20).
    if 'Cell<T,S>::new' in s and 'execute_h2_future' in allf: return 'hyper h2: task per request (body pipe or response wait)'
    if 'h2::' in allf or 'h2_pool' in allf: return 'h2: streams and connections (pool)'
    if 'RoundTrip>::send' in gw or 'TaskTrip' in s: return 'runner: send future (boxed) and its boxed waits'
    # async_trait's box of `send`, allocated where `drive_from` is inlined (run 32).
    if s.startswith('mcp_task_gateway::tasks::runner::run::') and gw == s: return 'runner: send future (boxed) and its boxed waits'
    if 'TaskLocalFuture' in s: return 'runner: boxed futures polled in the runner (exchange next, run)'
    if 'params_value' in gw: return 'runner: params as a Value tree (MRTR original)'
    if 'spawn_runner' in gw or 'request_digest' in gw: return 'runner: signals, channels, digest'
    if 'caller_of' in gw: return 'call: client capabilities (ToolCall)'
    if 'store::memory' in gw or 'new_record' in gw or 'store::redis' in allf or 'mtg_store::memory' in allf: return 'store: record and indexes'
    if 'runners::Runners' in gw: return 'runners registry'
    if 'mpsc::block::Block' in s and 'hyper' in allf or ('mpsc::block' in s and ('send_built' in gw or gw=='' or 'main' in gw)): return 'hyper: dispatch channel block (8,992 B)'
    if 'Buffered<T,B>::new' in s: return 'hyper: h1 write buffer (8 KiB)'
    if 'BytesMut::reserve_inner' in s: return 'hyper: h1 read buffer (--upstream-read-buffer-bytes)'
    if 'session_http' in gw or 'SessionHttpExchange' in allf or 'CallStream' in allf or 'SessionHttpUpstream::exchange' in gw: return 'upstream: exchange and SSE stream'
    if 'hyper' in allf or 'want::new' in s or 'registration_set' in s or 'send_built' in gw: return 'hyper: connection tasks, channels, registration, other'
    return 'other: ' + s[:60] + ' <= ' + gw[:60]
agg = collections.Counter(); blk = collections.Counter()
for pp in d['pps']:
    gb = pp.get('gb', 0)
    if not gb: continue
    frames = [re.sub(r' \(\?\?\?:0:0\)','',ftbl[i]) for i in pp['fs']]
    frames = [re.sub(r'^0x[0-9a-f]+: ','',f) for f in frames]
    frames = [f for f in frames if not f.startswith(('alloc::','<alloc','dhat::','__rust','core::ptr','<dhat','[root]'))]
    c = cat(frames); agg[c] += gb; blk[c] += pp.get('gbk',0)
tot = sum(agg.values())
print(f"heap at peak: {tot/n:.0f} B per task ({n} tasks)")
small = 0
for k, v in agg.most_common():
    if v/n < 40: small += v; continue
    print(f"{v/n:8.0f} B  {blk[k]/n:5.2f} blocks  {k}")
print(f"{small/n:8.0f} B  (items under 40 B each)")
