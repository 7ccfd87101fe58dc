#!/usr/bin/env python3
"""Sums a callgrind dump by function, code inlined into a function counted
as that function's (callgrind_annotate splits it by source file instead),
and prints the total Ir per request and the top functions by exclusive Ir.

    callgrind-by-function.py DUMP REQUESTS [TOP]
"""
import collections
import re
import sys


def main():
    path, requests = sys.argv[1], int(sys.argv[2])
    top = int(sys.argv[3]) if len(sys.argv) > 3 else 30
    names = {}
    exclusive = collections.Counter()
    inclusive = collections.Counter()
    fn = None
    in_call = False
    total = 0

    def name(kind, rest):
        # Name compression: "(id) name" defines an id, "(id)" reuses it.
        m = re.match(r"\((\d+)\)(?:\s+(.*))?", rest)
        if not m:
            return rest
        key = (kind, m.group(1))
        if m.group(2) is not None:
            names[key] = m.group(2)
        return names.get(key, rest)

    with open(path, errors="replace") as dump:
        for line in dump:
            line = line.rstrip("\n")
            if line.startswith("fn="):
                fn = name("fn", line[3:])
            elif line.startswith("cfn="):
                name("fn", line[4:])
            elif line.startswith(("cfi=", "cfl=", "cob=")):
                pass
            elif line.startswith(("fl=", "fi=", "fe=", "ob=")):
                name(line[:2], line[3:])
            elif line.startswith("calls="):
                in_call = True
            elif line and (line[0].isdigit() or line[0] in "+-*"):
                parts = line.split()
                if len(parts) < 2:
                    continue
                cost = int(parts[1])
                if in_call:
                    # The inclusive cost of the call just announced.
                    inclusive[fn] += cost
                    in_call = False
                else:
                    exclusive[fn] += cost
                    inclusive[fn] += cost
                    total += cost
    print(f"total {total:,} Ir, {requests:,} requests: {total / requests:,.0f} Ir/request")
    print(f"{'excl/req':>9} {'incl/req':>9}  function")
    for f, cost in exclusive.most_common(top):
        print(f"{cost / requests:9.0f} {inclusive[f] / requests:9.0f}  {f[:140]}")


if __name__ == "__main__":
    main()
