#!/usr/bin/env python3
"""redis-py against `roost resp`: concurrent MULTI/EXEC transfers (with
WATCH-based optimistic retries on half the threads) conserve the total.

Usage: resp_transfers.py PORT [THREADS] [TRANSFERS_PER_THREAD]
"""
import sys

import redis

from resp_bank import Bank

ACCOUNTS = 10
INITIAL = 1000
bank = Bank("py", ACCOUNTS, INITIAL)
keys, errors, setup = bank.keys, bank.errors, bank.client
threads, per_thread = bank.threads, bank.per_thread
watch_retries = [0]


def transfer_multi(r, a, b, amount):
    with r.pipeline(transaction=True) as p:
        p.decrby(keys[a], amount)
        p.incrby(keys[b], amount)
        p.execute()


def transfer_watch(r, a, b, amount):
    # Read, check funds, write: retried when a watched key changed.
    while True:
        with r.pipeline(transaction=True) as p:
            try:
                p.watch(keys[a], keys[b])
                balance = int(p.get(keys[a]))
                if balance < amount:
                    p.unwatch()
                    return
                p.multi()
                p.set(keys[a], balance - amount)
                p.incrby(keys[b], amount)
                p.execute()
                return
            except redis.WatchError:
                watch_retries[0] += 1


def worker(r, n):
    for i in range(per_thread):
        a = (n + i) % ACCOUNTS
        b = (n * 7 + i * 3 + 1) % ACCOUNTS
        if a == b:
            continue
        amount = i % 7 + 1
        if n % 2 == 0:
            transfer_multi(r, a, b, amount)
        else:
            transfer_watch(r, a, b, amount)
        if i % 25 == 0:
            with r.pipeline(transaction=True) as p:
                p.mget(keys)
                (values,) = p.execute()
            total = sum(int(v) for v in values)
            if total != INITIAL * ACCOUNTS:
                errors.append(f"snapshot total {total}")


bank.run(worker)
total = sum(int(v) for v in setup.mget(keys))
print(f"threads={threads} transfers/thread={per_thread} total={total} watch_retries={watch_retries[0]}")
if errors or total != INITIAL * ACCOUNTS:
    print("FAIL:", errors[:5], "total", total)
    sys.exit(1)
print("redis-py transfers conserved the total")
