#!/usr/bin/env python3
"""The helper of scripts/bench/cpu.sh (server CPU per accepted conversion).

    cpu.py rates FILE           reference rates (ECB CSV) for the last 120 days, for `rates import`
    cpu.py site SEED_JSON       "SITE_ID KEY" from seed.rs's output
    cpu.py check "BENCH ..."    exit 1 (saying why) if wrk saw a non-2xx answer or a socket error
    cpu.py record CASE TARGET ROUND "BENCH ..." TICKS CLK_TCK RSS_KB DRAIN_MS WARM_DRAIN_MS
                                one JSON line (stdout) for one measured run
    cpu.py show                 the JSON line on stdin as one human line (stdout)
    cpu.py summary RESULTS_JSONL --old REV --new REV ...   the tables (stdout)
"""
import argparse
import datetime
import json
import statistics
import sys

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


def record(case, target, rnd, line, ticks, hz, rss_kb, drain_ms, warm_drain_ms):
    kv = bench_fields(line)
    secs = kv["duration_us"] / 1e6
    cpu_us = int(ticks) * 1e6 / int(hz)
    return {
        "case": case, "target": target, "round": int(rnd),
        "accepted": kv["accepted"], "requests": kv["requests"], "seconds": secs,
        "accepted_per_s": kv["accepted"] / secs,
        "p50_ms": kv["p50_us"] / 1000, "p99_ms": kv["p99_us"] / 1000,
        "cpu_s": cpu_us / 1e6, "cpu_us_per": cpu_us / kv["accepted"],
        "rss_mb": int(rss_kb) / 1024, "drain_ms": int(drain_ms), "warm_drain_ms": int(warm_drain_ms),
    }


def show(r):
    drain = f", outbox drained {r['drain_ms']} ms after the load" if r["target"] not in REFS else ""
    return (f"  {r['case']:6} {r['target']:5} round {r['round']}: {r['cpu_us_per']:6.1f} µs CPU per 202 "
            f"({r['cpu_s']:.2f} s / {r['accepted']} 202s), {r['accepted_per_s']:,.0f}/s, "
            f"p50 {r['p50_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms, peak RSS {r['rss_mb']:.1f} MB{drain}")


def summary(a):
    runs = [json.loads(l) for l in open(a.results) if l.strip()]
    builds = (["old"] if a.old else []) + ["new"]
    label = {"old": a.old, "new": f"{a.new} (checkout)", "noop": "no-op server",
             "floor": "floor: no-op front + one durable row"}
    out = []
    p = out.append
    if a.forced:
        bar = "!" * 100
        p(bar)
        p(f"!!! BUSY MACHINE, NOT COMPARABLE: the 1-minute load average was above {a.max_load}")
        p(f"!!! ({a.forced}); measured anyway because of --force / CPU_BENCH_FORCE=1.")
        p("!!! These are not quiet-machine figures: the machine's other work is in every one of them.")
        p(bar)
        p("")
    p(f"CPU per conversion, {a.started} UTC: " + (f"{a.old} against {a.new}" if a.old else a.new)
      + f"; {a.rounds} round{'s' if a.rounds != 1 else ''} of {a.seconds} s (after {a.warmup} s of warm-up), wrk -t2 -c16, unique orders")
    p(f"machine: {a.cores} cores; load average (1/5/15 min) {a.load_start} at the start, "
      f"{a.load_before} when the measurement started, {a.load_end} at the end")
    p("server CPU = utime+stime of the server process from the warm-up's end to the outbox drained "
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
            o, n = med["old"], med["new"]
            r = {k: n[k] / o[k] for k in ("cpu", "acc", "p50", "p99", "vs")}
            ratios[case] = r
            p(f"| ratio new/old of the medians | **{r['cpu']:.3f}** | {r['acc']:.3f} | {r['p50']:.2f} "
              f"| {r['p99']:.2f} | | {r['vs']:.2f} |")
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
            if a.forced:
                verdict += "; on a busy machine, so only a hint until a quiet run confirms it"
            p(f"{case}: CPU per conversion new/old {r['cpu']:.3f} — {verdict}")
    if a.forced:
        p("")
        p("!!! BUSY MACHINE (forced): not quiet-machine figures, not comparable with other runs.")
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
    elif cmd == "summary":
        ap = argparse.ArgumentParser(prog="cpu.py summary")
        ap.add_argument("results")
        for opt in ("old", "new", "started", "load-start", "load-before", "load-end", "forced",
                    "max-load"):
            ap.add_argument("--" + opt, default="")
        for opt in ("rounds", "seconds", "warmup", "cores"):
            ap.add_argument("--" + opt, type=int, required=True)
        summary(ap.parse_args(args))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
