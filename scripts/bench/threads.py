#!/usr/bin/env python3
"""Server CPU by thread group, for bench.sh.

    threads.py snapshot PID > FILE
        user and system clock ticks of each of the process's threads, summed by group (the thread's
        name, with the numbered request threads `http-N` as one group `http`; tiny_http's own threads
        and the main thread have no name of their own and carry the process's)
    threads.py record TARGET ROUND MODE BEFORE AFTER REQUESTS CLK_TCK
        one JSON line for results.jsonl: µs of CPU per request of each group over the run
"""
import json
import os
import sys


def snapshot(pid):
    groups = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = open(f"/proc/{pid}/task/{tid}/stat").read()
        except OSError:
            continue  # the thread ended meanwhile
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        if name.startswith("http-") and name[5:].isdigit():
            name = "http"
        user, system = groups.get(name, (0, 0))
        groups[name] = (user + int(fields[11]), system + int(fields[12]))
    return groups


def record(target, rnd, mode, before, after, requests, hz):
    a, b = json.load(open(before)), json.load(open(after))
    us = 1e6 / int(hz) / max(int(requests), 1)
    per_req = {}
    for name, (user, system) in b.items():
        u0, s0 = a.get(name, (0, 0))
        if (user - u0) + (system - s0) > 0:
            per_req[name] = {"user_us": (user - u0) * us, "system_us": (system - s0) * us}
    return {"kind": "threads", "target": target, "round": int(rnd), "mode": mode,
            "per_request": per_req}


if __name__ == "__main__":
    if sys.argv[1] == "snapshot":
        print(json.dumps(snapshot(sys.argv[2])))
    elif sys.argv[1] == "record":
        print(json.dumps(record(*sys.argv[2:9])))
    else:
        sys.exit(__doc__)
