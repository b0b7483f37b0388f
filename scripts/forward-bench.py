"""What a forward between two ownership nodes adds to a request, next to a plain loopback
round trip, measured in one run: GET /healthz on node A (the ceiling: one HTTP round trip),
GET /v1/conversations/{id} on A for conversations A owns (served), and the same GETs sent to
B (forwarded to A); then the same for A2A: a v1.0 `GetTask` for tasks opened on A, sent to A
(served) and to B (the router reads the task id in the JSON-RPC params, then forwards).
Sequential requests on keep-alive connections; p50 and p99 in µs.

    python3 scripts/forward-bench.py HOST:PORT_A HOST:PORT_B [ROUNDS]

A and B: two `colloquy serve` nodes of a release build, in open mode, on one Postgres database with
`--cluster-secret-file` (docs/scale.md, "Running it"), settled (a few ticks after B
started). Figures from this machine are in docs/scale.md."""

import http.client
import json
import statistics
import sys
import time

A, B = sys.argv[1], sys.argv[2]  # host:port of each node
ROUNDS = int(sys.argv[3]) if len(sys.argv) > 3 else 2000


def conn(addr):
    host, port = addr.split(":")
    return http.client.HTTPConnection(host, int(port))


def call(c, method, path, body=None, extra=None):
    headers = {"X-Agent-Id": "alice", "content-type": "application/json", **(extra or {})}
    c.request(method, path, body=json.dumps(body) if body else None, headers=headers)
    r = c.getresponse()
    data = r.read()
    return r.status, r.getheader("x-colloquy-node"), data


a, b = conn(A), conn(B)
# Conversations started on A land in A's partitions (their ids are drawn there).
owned = []
while len(owned) < 50:
    status, node, data = call(a, "POST", "/v1/conversations",
                              {"template": "fipa-request", "participants": ["bob"]})
    assert status == 201, (status, data)
    owned.append((json.loads(data)["id"], node))
node_a = owned[0][1]
assert all(node == node_a for _, node in owned)


# A2A tasks opened on A are in A's partitions too (their ids are drawn there).
V1 = {"A2A-Version": "1.0"}
tasks = []
while len(tasks) < 50:
    status, node, data = call(a, "POST", "/a2a/bob", {
        "jsonrpc": "2.0", "id": 1, "method": "SendMessage",
        "params": {"message": {"messageId": f"m-{len(tasks)}", "role": "ROLE_USER",
                               "parts": [{"text": "hello"}]},
                   "configuration": {"returnImmediately": True}}}, V1)
    assert status == 200 and node == node_a, (status, node, data)
    tasks.append(json.loads(data)["result"]["task"]["id"])


def get_task(i):
    return {"jsonrpc": "2.0", "id": i, "method": "GetTask",
            "params": {"id": tasks[i % len(tasks)]}}


def timed(c, path, body=None):
    samples = []
    for i in range(ROUNDS):
        p = path(i)
        method, sent = ("POST", body(i)) if body else ("GET", None)
        t = time.perf_counter_ns()
        status, node, data = call(c, method, p, sent, V1 if body else None)
        samples.append((time.perf_counter_ns() - t) / 1000)
        # /healthz names no node; every conversation and task is A's.
        assert status == 200 and node in (None, node_a), (status, node, p, data)
        assert not body or "error" not in json.loads(data), data
    samples.sort()
    return samples


for label, c, path, *rest in [
    ("plain round trip (GET /healthz on A)", a, lambda i: "/healthz"),
    ("served by the owner (GET conversation on A)", a,
     lambda i: f"/v1/conversations/{owned[i % len(owned)][0]}"),
    ("forwarded (GET the same on B)", b,
     lambda i: f"/v1/conversations/{owned[i % len(owned)][0]}"),
    ("A2A GetTask served by the owner (on A)", a, lambda i: "/a2a/bob", get_task),
    ("A2A GetTask forwarded (the same on B)", b, lambda i: "/a2a/bob", get_task),
]:
    s = timed(c, path, *rest)
    print(f"{label}: p50 {statistics.median(s):.0f} µs, p99 {s[int(len(s) * 0.99)]:.0f} µs")
