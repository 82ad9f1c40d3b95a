#!/usr/bin/env python3
"""The helper of scripts/bench/cpu.sh (server CPU per accepted conversion).

    cpu.py rates FILE           reference rates (ECB CSV) for the last 120 days, for `rates import`
    cpu.py site SEED_JSON       "SITE_ID KEY" from seed.rs's output
    cpu.py check "BENCH ..."    exit 1 (saying why) if wrk saw a non-2xx answer or a socket error
    cpu.py record CASE TARGET ROUND "BENCH ..." TICKS CLK_TCK RSS_KB DRAIN_MS WARM_DRAIN_MS [PAIR SIDE]
                                one JSON line (stdout) for one measured run (PAIR: "LEFT RIGHT"
                                and SIDE l|r when it ran beside another, --side-by-side)
    cpu.py show                 the JSON line on stdin as one human line (stdout)
    cpu.py summary RESULTS_JSONL --old REV --new REV ...   the tables (stdout)
    cpu.py pairs PAIRS_JSONL --old REV --new REV ...       the side-by-side tables (stdout)
    cpu.py send URL SITE KEY IDS MODE N TAG [REPEAT]
                                REPEAT (1) times N new orders to the server at URL (--batch):
                                MODE `single` sends them one by one from 16 connections at once,
                                `batch` as one POST …/conversions/batch each time; prints "SENT
                                accepted=N requests=N seconds=S", exits 1 unless every order was
                                answered 202
    cpu.py batchrecord CASE MODE ROUND "SENT ..." TICKS CLK_TCK   one JSON line for one such load
    cpu.py batches RESULTS_JSONL --items N ...   the --batch table (stdout)
"""
import argparse
import datetime
import http.client
import json
import math
import random
import statistics
import sys
import threading
import time
import urllib.parse

import busy

# The reference servers of every run: the no-op server (the ceiling) and the design's floor.
REFS = ["floor", "noop"]
CASES = {
    "small": "small case: a fresh database, 200 users (seed.rs --sessions 800 --users 200)",
    "seeded": "seeded database: 120k sessions, 10k users (seed.rs --sessions 120000 --users 10000)",
}


def bench_fields(line):
    return {k: int(v) for k, v in (p.split("=") for p in line.split()[1:])}


def rates(path):
    today = datetime.date.today()
    with open(path, "w") as f:
        f.write("Date,USD,GBP,CHF,\n")
        for d in range(120):
            day = today - datetime.timedelta(days=d)
            f.write("%s,%.4f,%.5f,%.4f,\n" % (day.isoformat(), 1.08 + d % 7 / 1000,
                                              0.85 + d % 5 / 1000, 0.94 + d % 3 / 1000))


def check(line):
    kv = bench_fields(line)
    problems = []
    if kv["non2xx"]:
        problems.append(f"{kv['non2xx']} non-2xx answers")
    if kv["errors"]:
        problems.append(f"{kv['errors']} socket errors or timeouts (connect {kv['connect']}, read "
                        f"{kv['read']}, write {kv['write']}, status {kv['status']}, timeout {kv['timeout']})")
    if kv["accepted"] == 0:
        problems.append("no 202 at all")
    if problems:
        sys.exit("cpu: wrk saw " + ", ".join(problems))


def record(case, target, rnd, line, ticks, hz, rss_kb, drain_ms, warm_drain_ms, pair=None, side=None):
    kv = bench_fields(line)
    secs = kv["duration_us"] / 1e6
    cpu_us = int(ticks) * 1e6 / int(hz)
    beside = {"pair": pair, "side": side} if pair else {}
    return beside | {
        "case": case, "target": target, "round": int(rnd),
        "accepted": kv["accepted"], "requests": kv["requests"], "seconds": secs,
        "accepted_per_s": kv["accepted"] / secs,
        "p50_ms": kv["p50_us"] / 1000, "p99_ms": kv["p99_us"] / 1000,
        "cpu_s": cpu_us / 1e6, "cpu_us_per": cpu_us / kv["accepted"],
        "rss_mb": int(rss_kb) / 1024, "drain_ms": int(drain_ms), "warm_drain_ms": int(warm_drain_ms),
    }


def show(r):
    drain = f", outbox drained {r['drain_ms']} ms after the load" if r["target"] not in REFS else ""
    beside = f" ({'left' if r['side'] == 'l' else 'right'} of {r['pair']})" if "pair" in r else ""
    return (f"  {r['case']:6} {r['target']:5}{beside} round {r['round']}: {r['cpu_us_per']:6.1f} µs CPU per 202 "
            f"({r['cpu_s']:.2f} s / {r['accepted']} 202s), {r['accepted_per_s']:,.0f}/s, "
            f"p50 {r['p50_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms, peak RSS {r['rss_mb']:.1f} MB{drain}")


def summary(a):
    runs = [json.loads(l) for l in open(a.results) if l.strip()]
    builds = (["old"] if a.old else []) + ["new"] + (["again"] if a.old else [])
    label = {"old": a.old, "new": f"{a.new} (checkout)", "again": f"{a.old} again (A/A control)",
             "noop": "no-op server",
             "floor": "floor: no-op front + one durable row"}
    out = []
    p = out.append
    header(a, p, "")
    p("wrk -t2 -c16, unique orders; server CPU = utime+stime of the server process from the warm-up's end to the outbox drained "
      "after the load (request path and pipeline), per 202 counted by wrk; medians, all runs in brackets")
    ratios = {}
    for case in ("small", "seeded"):
        by = {t: sorted((r for r in runs if r["case"] == case and r["target"] == t), key=lambda r: r["round"])
              for t in builds + REFS}
        if not by["noop"]:
            continue
        noop_rps = {r["round"]: r["accepted_per_s"] for r in by["noop"]}
        p("")
        p(f"{CASES[case]}")
        p("")
        p("| target | server CPU µs per 202 | accepted/s | p50 ms | p99 ms | peak RSS MB | accepted/s ÷ no-op req/s |")
        p("|---|---|---|---|---|---|---|")
        med = {}
        for t in builds + REFS:
            rs = by[t]
            if not rs:
                continue
            def col(key, fmt):
                vals = [r[key] for r in rs]
                m = statistics.median(vals)
                return m, f"{fmt(m)} ({', '.join(fmt(v) for v in vals)})"
            cpu_m, cpu_s = col("cpu_us_per", lambda v: f"{v:.0f}")
            acc_m, acc_s = col("accepted_per_s", lambda v: f"{v:,.0f}")
            p50_m, p50_s = col("p50_ms", lambda v: f"{v:.2f}")
            p99_m, p99_s = col("p99_ms", lambda v: f"{v:.1f}")
            rss = max(r["rss_mb"] for r in rs)
            if t == "noop":
                vs_s, vs_m = "1", 1.0
            else:
                per = [r["accepted_per_s"] / noop_rps[r["round"]] for r in rs if r["round"] in noop_rps]
                vs_m = statistics.median(per)
                vs_s = f"{vs_m:.2f} ({', '.join(f'{v:.2f}' for v in per)})"
            med[t] = {"cpu": cpu_m, "acc": acc_m, "p50": p50_m, "p99": p99_m, "vs": vs_m}
            unit = " (per request)" if t in REFS else ""
            p(f"| {label[t]}{unit} | {cpu_s} | {acc_s} | {p50_s} | {p99_s} | {rss:.1f} | {vs_s} |")
        if a.old and "old" in med and "new" in med:
            # The old build's baseline: the median over both of its runs in every round.
            olds = by["old"] + by["again"]
            o = {"cpu": statistics.median(r["cpu_us_per"] for r in olds),
                 "acc": statistics.median(r["accepted_per_s"] for r in olds),
                 "p50": statistics.median(r["p50_ms"] for r in olds),
                 "p99": statistics.median(r["p99_ms"] for r in olds),
                 "vs": statistics.median(r["accepted_per_s"] / noop_rps[r["round"]]
                                         for r in olds if r["round"] in noop_rps)}
            n = med["new"]
            r = {k: n[k] / o[k] for k in ("cpu", "acc", "p50", "p99", "vs")}
            if "again" in med:
                r["control"] = med["again"]["cpu"] / med["old"]["cpu"]
            ratios[case] = r
            p(f"| ratio new/old (old: both of its runs) | **{r['cpu']:.3f}** | {r['acc']:.3f} | {r['p50']:.2f} "
              f"| {r['p99']:.2f} | | {r['vs']:.2f} |")
            if "control" in r:
                p(f"| A/A control: {a.old} again / {a.old} | {r['control']:.3f} | | | | | |")
        if "floor" in med:
            p("| CPU ÷ the floor's | " + " · ".join(f"{label[t]} {med[t]['cpu'] / med['floor']['cpu']:.2f}"
                                                  for t in builds if t in med) + " | | | | | |")
        drains = [r["drain_ms"] for t in builds for r in by[t]]
        if drains:
            p(f"\noutbox drained {statistics.median(drains):,.0f} ms after the load stopped (median; "
              f"{min(drains):,}–{max(drains):,} ms)")
    if ratios:
        p("")
        for case, r in ratios.items():
            if r["cpu"] > 1.03:
                verdict = "a loss over 3 %: a defect (docs/development.md)"
            elif r["cpu"] < 0.97:
                verdict = "a gain of %.0f %%" % (100 * (1 - r["cpu"]))
            else:
                verdict = "within 3 %"
            control = r.get("control")
            if control is not None and abs(control - 1) > 0.03:
                verdict += (f"; but two runs of one binary differ by {100 * abs(control - 1):.0f} % here "
                            "(the A/A control), so this run cannot resolve 3 %: run more rounds")
            if a.forced:
                verdict += "; on a busy machine, so only a hint until a quiet run confirms it"
            shown = f" (A/A control {control:.3f})" if control is not None else ""
            p(f"{case}: CPU per conversion new/old {r['cpu']:.3f}{shown} — {verdict}")
    busy.footer(p, a)
    print("\n".join(out))


def header(a, p, what):
    busy.banner(p, a, "CPU_BENCH_FORCE")
    p(f"CPU per conversion{what}, {a.started} UTC: " + (f"{a.old} against {a.new}" if a.old else a.new)
      + f"; {a.rounds} round{'s' if a.rounds != 1 else ''} of {a.seconds} s (after {a.warmup} s of warm-up)")
    p(f"machine: {a.cores} cores; load average (1/5/15 min) {a.load_start} at the start, "
      f"{a.load_before} when the measurement started, {a.load_end} at the end")


def pairs(a):
    """The side-by-side runs: per round, new/old with new on the right (old beside new) and on the
    left (new beside old), their geometric mean (the place's own bias cancels), and the A/A
    control (old beside old: right ÷ left)."""
    runs = [json.loads(l) for l in open(a.results) if l.strip()]
    out = []
    p = out.append
    header(a, p, " side by side")
    p("each pair: two servers on copies of one template, loaded at the same time (wrk -t1 -c8 each, "
      "unique orders); server CPU = utime+stime from the warm-up's end to the outbox drained after "
      "the load, per 202 counted by wrk")
    verdicts = []
    for case in ("small", "seeded"):
        def cpu(rnd, pair, side):
            hit = [r for r in runs if r["case"] == case and r["round"] == rnd and r["pair"] == pair
                   and r["side"] == side]
            return hit[0]["cpu_us_per"] if hit else None
        rounds = sorted({r["round"] for r in runs if r["case"] == case})
        if not rounds:
            continue
        p("")
        p(CASES[case])
        p("")
        p(f"| round | old ∥ new: µs per 202 | new ∥ old: µs per 202 | new/old, new right | new/old, new left "
          f"| new/old, both places | A/A: old ∥ old, right ÷ left |")
        p("|---|---|---|---|---|---|---|")
        both, controls = [], []
        for rnd in rounds:
            o1, n1 = cpu(rnd, "old new", "l"), cpu(rnd, "old new", "r")
            n2, o2 = cpu(rnd, "new old", "l"), cpu(rnd, "new old", "r")
            c1, c2 = cpu(rnd, "old again", "l"), cpu(rnd, "old again", "r")
            if None in (o1, n1, n2, o2, c1, c2):
                continue
            right, left = n1 / o1, n2 / o2
            g = math.sqrt(right * left)
            both.append(g)
            controls.append(c2 / c1)
            p(f"| {rnd} | {o1:.0f} ∥ {n1:.0f} | {n2:.0f} ∥ {o2:.0f} | {right:.3f} | {left:.3f} | {g:.3f} "
              f"| {c2 / c1:.3f} |")
        if not both:
            continue
        m, c = statistics.median(both), statistics.median(controls)
        spread = max(abs(x - 1) for x in controls)
        p(f"| median | | | | | **{m:.3f}** | {c:.3f} (farthest from 1: {1 + spread:.3f} or {1 - spread:.3f}) |")
        if m > 1.03:
            verdict = "a loss over 3 %: a defect (docs/development.md)"
        elif m < 0.97:
            verdict = "a gain of %.0f %%" % (100 * (1 - m))
        else:
            verdict = "within 3 %"
        if spread > 0.03:
            verdict += (f"; but two servers of one build side by side landed {100 * spread:.0f} % apart, "
                        "so this run cannot resolve 3 %: run more rounds")
        if a.forced:
            verdict += "; on a busy machine, so only a hint until a quiet run confirms it"
        verdicts.append(f"{case}: CPU per conversion new/old {m:.3f} side by side (A/A control "
                        f"{c:.3f}) — {verdict}")
    p("")
    out.extend(verdicts)
    busy.footer(p, a)
    print("\n".join(out))


def identifiers(path):
    """seed.rs's identifier file: (field, value) pairs that resolve to a session in the window."""
    out = []
    for line in open(path):
        field, _, value = line.rstrip("\n").partition(" ")
        if field in ("clientId", "visitorId", "sessionId") and value:
            out.append((field, value))
    if not out:
        sys.exit(f"cpu: no identifiers in {path}")
    return out


def orders(ids, n, tag):
    rng = random.Random(tag)
    for i in range(n):
        field, value = rng.choice(ids)
        yield {field: value, "orderId": f"{tag}-{i}", "value": rng.randint(1, 500),
               "currency": rng.choice(["EUR", "EUR", "USD", "GBP", "CHF"])}


def send(url, site, key, ids_path, mode, n, tag, repeat="1"):
    """REPEAT times N new orders, one by one from 16 connections or as one batch each time; every
    one must be a 202."""
    u = urllib.parse.urlsplit(url)
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    ids = identifiers(ids_path)
    parts = [list(orders(ids, int(n), f"{tag}-{k}")) for k in range(int(repeat))]
    items = [o for part in parts for o in part]
    problems, requests, accepted = [], [0], [0]
    lock = threading.Lock()
    started = time.monotonic()
    if mode == "single":
        def worker(part):
            c = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
            for body in part:
                c.request("POST", f"/api/sites/{site}/conversions", json.dumps(body), headers)
                r = c.getresponse()
                text = r.read()
                with lock:
                    requests[0] += 1
                    if r.status == 202:
                        accepted[0] += 1
                    elif len(problems) < 5:
                        problems.append(f"{r.status} {text[:200]!r}")
            c.close()
        threads = [threading.Thread(target=worker, args=(items[i::16],)) for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    elif mode == "batch":
        c = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
        bodies = [json.dumps({"conversions": part}) for part in parts]
        for body in bodies:
            c.request("POST", f"/api/sites/{site}/conversions/batch", body, headers)
            r = c.getresponse()
            text = r.read()
            requests[0] += 1
            if r.status != 200:
                problems.append(f"{r.status} {text[:200]!r}")
                continue
            results = json.loads(text)["results"]
            accepted[0] += sum(1 for x in results if x["status"] == 202)
            problems += [json.dumps(x) for x in results if x["status"] != 202][:5]
    else:
        sys.exit(f"cpu: send: unknown mode {mode}")
    print(f"SENT accepted={accepted[0]} requests={requests[0]} seconds={time.monotonic() - started:.3f}")
    if problems or accepted[0] != len(items):
        sys.exit(f"cpu: {mode}: {accepted[0]} of {len(items)} orders answered 202: {problems}")


def batches(a):
    """The --batch table: per database, server CPU per order sent one by one and in one batch,
    and their ratio per round, with the median."""
    runs = [json.loads(l) for l in open(a.results) if l.strip()]
    out = []
    p = out.append
    busy.banner(p, a, "CPU_BENCH_FORCE")
    p(f"CPU of one batch of {a.items} orders against the same {a.items} sent one by one, {a.started} UTC: "
      f"{a.new}; {a.rounds} round{'s' if a.rounds != 1 else ''}")
    p(f"machine: {a.cores} cores; load average (1/5/15 min) {a.load_start} at the start, "
      f"{a.load_before} when the measurement started, {a.load_end} at the end")
    p("one server per round and database (serve --pipeline off: the request path, which batching "
      "changes; the pipeline's work per order is the same either way), warmed up; server CPU = "
      "utime+stime of the server process around each load; singles from 16 connections at once; "
      "the order of the two loads reversed from one round to the next")
    verdicts = []
    for case in ("small", "seeded"):
        rounds = sorted({r["round"] for r in runs if r["case"] == case})
        if not rounds:
            continue
        p("")
        p(CASES[case])
        p("")
        p("| round | singles: µs CPU per order | batch: µs CPU per order | batch ÷ singles | singles s | batch s |")
        p("|---|---|---|---|---|---|")
        ratios = []
        for rnd in rounds:
            by = {r["mode"]: r for r in runs if r["case"] == case and r["round"] == rnd}
            if "single" not in by or "batch" not in by:
                continue
            s, b = by["single"], by["batch"]
            ratio = b["cpu_us_per"] / s["cpu_us_per"]
            ratios.append(ratio)
            p(f"| {rnd} | {s['cpu_us_per']:.0f} | {b['cpu_us_per']:.0f} | {ratio:.3f} | {s['seconds']:.2f} "
              f"| {b['seconds']:.2f} |")
        if not ratios:
            continue
        m = statistics.median(ratios)
        p(f"| median | | | **{m:.3f}** | | |")
        verdict = "within the budget of 0.3" if m <= 0.3 else "OVER the budget of 0.3: a defect"
        if a.forced:
            verdict += "; on a busy machine, so only a hint until a quiet run confirms it"
        verdicts.append(f"{case}: a batch of {a.items} costs {m:.3f}× the CPU of the same orders one by one — {verdict}")
    p("")
    out.extend(verdicts)
    busy.footer(p, a)
    print("\n".join(out))


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "rates":
        rates(args[0])
    elif cmd == "site":
        d = json.load(open(args[0]))
        print(d["siteId"], d["key"])
    elif cmd == "check":
        check(args[0])
    elif cmd == "record":
        print(json.dumps(record(*args)))
    elif cmd == "show":
        print(show(json.loads(sys.stdin.readline())))
    elif cmd == "send":
        send(*args)
    elif cmd == "batchrecord":
        case, mode, rnd, sent, ticks, hz = args
        kv = {k: float(v) for k, v in (x.split("=") for x in sent.split()[1:])}
        cpu_us = int(ticks) * 1e6 / int(hz)
        print(json.dumps({"case": case, "mode": mode, "round": int(rnd), "orders": int(kv["accepted"]),
                          "seconds": kv["seconds"], "cpu_s": cpu_us / 1e6,
                          "cpu_us_per": cpu_us / kv["accepted"]}))
    elif cmd == "batches":
        ap = argparse.ArgumentParser(prog="cpu.py batches")
        ap.add_argument("results")
        for opt in ("new", "started", "load-start", "load-before", "load-end", "forced", "max-load"):
            ap.add_argument("--" + opt, default="")
        for opt in ("rounds", "items", "cores"):
            ap.add_argument("--" + opt, type=int, required=True)
        batches(ap.parse_args(args))
    elif cmd in ("summary", "pairs"):
        ap = argparse.ArgumentParser(prog=f"cpu.py {cmd}")
        ap.add_argument("results")
        for opt in ("old", "new", "started", "load-start", "load-before", "load-end", "forced",
                    "max-load"):
            ap.add_argument("--" + opt, default="")
        for opt in ("rounds", "seconds", "warmup", "cores"):
            ap.add_argument("--" + opt, type=int, required=True)
        (summary if cmd == "summary" else pairs)(ap.parse_args(args))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
