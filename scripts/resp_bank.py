"""What the redis-py scripts share: their arguments (PORT [THREADS]
[PER_THREAD]), a bank of accounts set up on the server, and threads that run a
worker each, collecting its exceptions as errors."""
import sys
import threading

import redis


class Bank:
    def __init__(self, prefix, accounts, initial):
        self.port = int(sys.argv[1])
        self.threads = int(sys.argv[2]) if len(sys.argv) > 2 else 8
        self.per_thread = int(sys.argv[3]) if len(sys.argv) > 3 else 200
        self.total = accounts * initial
        self.keys = [f"{prefix}:acct:{i}" for i in range(accounts)]
        self.client = redis.Redis(port=self.port)
        self.client.mset({k: initial for k in self.keys})
        self.errors = []

    def run(self, worker):
        """Runs worker(client, n) on `threads` threads, each its own client."""
        def guarded(n):
            try:
                worker(redis.Redis(port=self.port), n)
            except Exception as e:  # reported by the script
                self.errors.append(repr(e))

        ts = [threading.Thread(target=guarded, args=(n,)) for n in range(self.threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
