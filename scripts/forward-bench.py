"""What a forward between two ownership nodes adds to a request, next to a plain loopback
round trip, measured in one run: GET /healthz on node A (the ceiling: one HTTP round trip),
GET /v1/conversations/{id} on A for conversations A owns (served), and the same GETs sent to
B (forwarded to A). Sequential requests on keep-alive connections; p50 and p99 in µs.

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


def call(c, method, path, body=None):
    headers = {"X-Agent-Id": "alice", "content-type": "application/json"}
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


def timed(c, path):
    samples = []
    for i in range(ROUNDS):
        p = path(i)
        t = time.perf_counter_ns()
        status, node, _ = call(c, "GET", p)
        samples.append((time.perf_counter_ns() - t) / 1000)
        assert status == 200, (status, p)
    samples.sort()
    return samples


for label, c, path in [
    ("plain round trip (GET /healthz on A)", a, lambda i: "/healthz"),
    ("served by the owner (GET conversation on A)", a,
     lambda i: f"/v1/conversations/{owned[i % len(owned)][0]}"),
    ("forwarded (GET the same on B)", b,
     lambda i: f"/v1/conversations/{owned[i % len(owned)][0]}"),
]:
    s = timed(c, path)
    print(f"{label}: p50 {statistics.median(s):.0f} µs, p99 {s[int(len(s) * 0.99)]:.0f} µs")
