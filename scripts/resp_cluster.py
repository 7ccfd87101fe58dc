#!/usr/bin/env python3
"""redis-py against one Roost database over three nodes (`roost node
--protocol ownership`): a cluster-unaware client, no hash tags.

KEY_i is first written at node i, so its owner is node i when a step starts
(the writer acquires what it writes). Each step then runs at another node:

1. MULTI/EXEC at node 0 over the three keys (three owners): one transaction,
   its effects read back at every node right after the reply.
2. FCALL transfer at node 0 between KEY_1 and KEY_2 (owned by nodes 1 and
   2): the total is conserved, read at every node; an overdraft is refused
   and changes nothing.
3. WATCH at node 0, a write of the key at node 1 (the same value even), and
   the EXEC at node 0 aborts (WatchError); without a write it commits.

Usage: resp_cluster.py PORT0 PORT1 PORT2 KEY0 KEY1 KEY2
"""
import sys

import redis

ports = [int(p) for p in sys.argv[1:4]]
keys = sys.argv[4:7]
nodes = [redis.Redis(host="127.0.0.1", port=p, socket_timeout=10) for p in ports]
errors = []


def check(what, got, want):
    if got != want:
        errors.append(f"{what}: got {got!r}, want {want!r}")


def own(values):
    """Write KEY_i at node i (node i becomes its owner)."""
    for i, value in enumerate(values):
        nodes[i].set(keys[i], value)


def read_everywhere(what, want):
    for n, node in enumerate(nodes):
        got = [None if v is None else int(v) for v in node.mget(keys)]
        check(f"{what}, read at node {n}", got, want)


# 1. One MULTI/EXEC over keys owned by three nodes.
own([100, 200, 300])
with nodes[0].pipeline(transaction=True) as p:
    p.incrby(keys[0], 1)
    p.incrby(keys[1], 2)
    p.incrby(keys[2], 3)
    p.mget(keys)
    replies = p.execute()
check("MULTI/EXEC replies", replies[:3], [101, 202, 303])
check("MULTI/EXEC read inside", [int(v) for v in replies[3]], [101, 202, 303])
read_everywhere("after MULTI/EXEC", [101, 202, 303])

# 2. FCALL transfer between keys owned by two other nodes.
own([100, 200, 300])
reply = nodes[0].fcall("transfer", 2, keys[1], keys[2], 50)
check("FCALL transfer", [int(v) for v in reply], [150, 350])
read_everywhere("after FCALL transfer", [100, 150, 350])
own([100, 200, 300])
try:
    nodes[0].fcall("transfer", 2, keys[1], keys[2], 201)
    errors.append("an overdraft across nodes was not refused")
except redis.ResponseError as e:
    if "insufficient funds" not in str(e):
        errors.append(f"overdraft refused with {e}")
read_everywhere("after a refused transfer", [100, 200, 300])

# 3. WATCH at node 0; the key written at node 1 meanwhile.
for value in ["changed", "same"]:
    own(["same", "same", "same"])
    with nodes[0].pipeline(transaction=True) as p:
        p.watch(keys[1])
        seen = p.get(keys[1])
        nodes[1].set(keys[1], value)
        p.multi()
        p.set(keys[1], "from-node-0")
        try:
            p.execute()
            errors.append(f"EXEC committed though node 1 wrote {value!r} after WATCH (saw {seen!r})")
        except redis.WatchError:
            pass
    check(f"after the aborted EXEC ({value})", nodes[2].get(keys[1]), value.encode())
own(["same", "same", "same"])
with nodes[0].pipeline(transaction=True) as p:
    p.watch(keys[1])
    p.get(keys[1])
    p.multi()
    p.set(keys[1], "from-node-0")
    check("EXEC with no write after WATCH", p.execute(), [True])
check("after the committed EXEC", nodes[2].get(keys[1]), b"from-node-0")

if errors:
    print("\n".join(errors))
    sys.exit(1)
print("resp_cluster: MULTI/EXEC over three owners, FCALL transfer across nodes, WATCH across nodes: ok")
