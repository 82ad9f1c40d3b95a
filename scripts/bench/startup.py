#!/usr/bin/env python3
"""Start-up to healthy: starts `convapi serve` on an existing database N times and measures, for
each, the time from spawning the process to its first 200 on /healthz (used by bench.sh).

    startup.py CONVAPI DB N      -> one JSON line per start: {"kind": "startup", "ms": ..., "listening_ms": ...}
"""
import http.client
import json
import signal
import subprocess
import sys
import time

convapi, db, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
for _ in range(n):
    t0 = time.perf_counter()
    p = subprocess.Popen([convapi, "--db", db, "serve", "--addr", "127.0.0.1:0"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = p.stdout.readline()
        if not line.startswith("listening on http://"):
            sys.exit("startup.py: convapi printed %r" % line)
        t_listen = time.perf_counter()
        host, port = line.strip()[len("listening on http://"):].rsplit(":", 1)
        deadline = t0 + 30
        while True:
            try:
                c = http.client.HTTPConnection(host, int(port), timeout=5)
                c.request("GET", "/healthz")
                status = c.getresponse().status
                c.close()
                if status == 200:
                    break
            except OSError:
                pass
            if time.perf_counter() > deadline:
                sys.exit("startup.py: not healthy within 30 s")
        t_ok = time.perf_counter()
        print(json.dumps({"kind": "startup", "ms": (t_ok - t0) * 1000,
                          "listening_ms": (t_listen - t0) * 1000}))
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait()
