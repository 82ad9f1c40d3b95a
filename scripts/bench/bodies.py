#!/usr/bin/env python3
"""Request bodies for the open-loop run (oha -Z takes one body per line, picked at random).

    BENCH_RUN=tag bodies.py IDS_FILE COUNT > bodies.txt

Each line is a conversion report with its own orderId and a real identifier from IDS_FILE (written by
examples/seed.rs). oha picks lines at random, so with COUNT lines and R requests about R*R/(2*COUNT)
requests repeat an orderId; bench.sh reports the repeats the server counted.
"""
import os
import random
import sys

ids_path, count = sys.argv[1], int(sys.argv[2])
run = os.environ.get("BENCH_RUN", "open")
by_field = {"clientId": [], "visitorId": [], "sessionId": []}
with open(ids_path) as f:
    for line in f:
        field, _, value = line.strip().partition(" ")
        if field in by_field:
            by_field[field].append(value)
rng = random.Random(42)
currencies = ["EUR", "EUR", "USD", "GBP", "CHF"]
out = sys.stdout
for i in range(count):
    r = rng.randrange(100)
    field = "clientId" if r < 50 else "visitorId" if r < 90 else "sessionId"
    value = rng.choice(by_field[field])
    out.write('{"%s":"%s","orderId":"%s-%d","type":"purchase","value":%d.%02d,"currency":"%s"}\n' % (
        field, value, run, i, rng.randrange(5, 400), rng.randrange(100), rng.choice(currencies)))
