#!/usr/bin/env python3
"""redis-py against `roost resp`: the shipped functions through FCALL and
FCALL_RO. Concurrent `transfer` calls conserve the total, concurrent
read-only `sum` calls always see it whole, a refused transfer changes
nothing, and FUNCTION LIST names the library.

Usage: resp_functions.py PORT [THREADS] [CALLS_PER_THREAD]
"""
import sys

import redis

from resp_bank import Bank

ACCOUNTS = 8
INITIAL = 500
bank = Bank("pyfn", ACCOUNTS, INITIAL)
keys, errors, setup, TOTAL = bank.keys, bank.errors, bank.client, bank.total
threads, per_thread = bank.threads, bank.per_thread
refused = [0]
sums = [0]



def as_dict(reply):
    # RESP2 carries maps as flat [key, value, ...] arrays.
    return reply if isinstance(reply, dict) else dict(zip(reply[::2], reply[1::2]))


libraries = [as_dict(lib) for lib in setup.function_list()]
names = {as_dict(f)[b"name"] for lib in libraries for f in lib[b"functions"]}
if not {b"transfer", b"sum", b"reserve"} <= names:
    errors.append(f"FUNCTION LIST: {libraries!r}")

before = [int(v) for v in setup.mget(keys[0], keys[1])]
try:
    setup.fcall("transfer", 2, keys[0], keys[1], INITIAL + 1)
    errors.append("an overdraft was not refused")
except redis.ResponseError as e:
    if "insufficient funds" not in str(e):
        errors.append(f"refusal text: {e}")
if [int(v) for v in setup.mget(keys[0], keys[1])] != before:
    errors.append("a refused transfer changed balances")
try:
    setup.fcall_ro("transfer", 2, keys[0], keys[1], 1)
    errors.append("FCALL_RO ran a function with writes")
except redis.ResponseError as e:
    if "write flag" not in str(e):
        errors.append(f"FCALL_RO refusal text: {e}")


def worker(r, n):
    for i in range(per_thread):
        if n % 4 == 3:
            total = r.fcall_ro("sum", ACCOUNTS, *keys)
            sums[0] += 1
            if total != TOTAL:
                errors.append(f"sum {total} != {TOTAL}")
            continue
        a = (n + i) % ACCOUNTS
        b = (a + 1 + (n * 3 + i) % (ACCOUNTS - 1)) % ACCOUNTS
        try:
            r.fcall("transfer", 2, keys[a], keys[b], (i * 37) % 250 + 1)
        except redis.ResponseError as e:
            if "insufficient funds" not in str(e):
                raise
            refused[0] += 1


bank.run(worker)
total = setup.fcall_ro("sum", ACCOUNTS, *keys)
print(f"threads={threads} calls/thread={per_thread} total={total} "
      f"sums={sums[0]} refused={refused[0]}")
if errors or total != TOTAL:
    print("FAIL:", errors[:5], "total", total)
    sys.exit(1)
print("redis-py FCALL transfers conserved the total; every FCALL_RO sum saw it")
