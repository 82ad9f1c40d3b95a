#!/usr/bin/env python3
"""Turns bench.sh's results.jsonl into the table of medians and the performance targets (BENCHMARKS.md).

Ratios are paired: each round's convapi figure is divided by the same round's no-op figure,
measured minutes apart on the same machine, and the median of those ratios is reported, so that
load from other processes cancels as far as it can.
"""
import argparse
import json
import statistics
import sys


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def fmt_range(xs, f="%.0f"):
    return (f % median(xs)) + " (" + ", ".join(f % x for x in xs) + ")"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("--runs", type=int, required=True)
    ap.add_argument("--duration", type=int, required=True)
    ap.add_argument("--open-rate", type=int, required=True)
    ap.add_argument("--strict", type=int, default=0)
    ap.add_argument("--dup", default="")
    ap.add_argument("--load", default="")
    ap.add_argument("--seed-ms", default="")
    ap.add_argument("--out", default="")
    a = ap.parse_args()

    rows = [json.loads(l) for l in open(a.results) if l.strip()]
    closed = [r for r in rows if r["kind"] == "closed" and r["mode"] == "unique"]
    by = {t: [r for r in closed if r["target"] == t] for t in ("noop", "group")}
    opened = [r for r in rows if r["kind"] == "open" and r.get("target", "convapi") == "convapi"]
    opened_noop = [r for r in rows if r["kind"] == "open" and r.get("target") == "noop"]
    idle = [r for r in rows if r["kind"] == "idle"]
    startup = [r["ms"] for r in rows if r["kind"] == "startup"]

    out = []
    p = out.append
    p(f"wrk -t2 -c16 -d{a.duration}s, {a.runs} rounds; medians, all runs in brackets.")
    if a.load:
        p(f"load average at the end (1/5/15 min): {a.load}")
    p("")
    p("| target | req/s | accepted/s | p50 ms | p99 ms | peak RSS MB | server CPU µs/req |")
    p("|---|---|---|---|---|---|---|")
    for t, rs in by.items():
        if not rs:
            continue
        cpu_us = [r["server_cpu_s"] * 1e6 / max(r["requests"], 1) for r in rs]
        p("| %s | %s | %s | %s | %s | %.1f | %.0f |" % (
            t, fmt_range([r["rps"] for r in rs]), fmt_range([r["accepted_per_s"] for r in rs]),
            fmt_range([r["p50_ms"] for r in rs], "%.2f"), fmt_range([r["p99_ms"] for r in rs], "%.1f"),
            max(r["rss_kb"] for r in rs) / 1024, median(cpu_us)))

    def paired(num, den, key_den):
        ratios = []
        for r in by[num]:
            d = [x for x in by[den] if x["round"] == r["round"]]
            if d and d[0][key_den] > 0:
                ratios.append(r["accepted_per_s"] / d[0][key_den])
        return ratios

    vs_noop = paired("group", "noop", "rps")
    p("")
    if vs_noop:
        p("group accepted/s ÷ noop req/s, per round: " + fmt_range(vs_noop, "%.2f"))

    if opened:
        p("")
        p(f"open loop (oha -q {a.open_rate}, latency correction), medians (all runs):")
        p("| target | achieved req/s | p50 ms | p99 ms | p99.9 ms | max ms | peak RSS MB | repeats |")
        p("|---|---|---|---|---|---|---|---|")
        for name, rs in (("group", opened), ("noop", opened_noop)):
            if not rs:
                continue
            p("| %s | %s | %s | %s | %s | %s | %.1f | %s |" % (
                name, fmt_range([r["rps"] for r in rs]), fmt_range([r["p50_ms"] for r in rs], "%.2f"),
                fmt_range([r["p99_ms"] for r in rs], "%.2f"), fmt_range([r["p999_ms"] for r in rs], "%.1f"),
                fmt_range([r["max_ms"] for r in rs], "%.1f"), max(r["rss_kb"] for r in rs) / 1024,
                "-" if name == "noop" else
                ", ".join("%d/%d" % (r["served"] - r["rows"], r["served"]) for r in rs)))
        inside = [r for r in opened if "server_p99_ms" in r]
        if inside:
            p("")
            p("the same convapi requests timed inside the server (access log: from a worker taking the "
              "request to its answer written): p50 %s ms, p99 %s ms" % (
                  fmt_range([r["server_p50_ms"] for r in inside], "%.2f"),
                  fmt_range([r["server_p99_ms"] for r in inside], "%.1f")))
    else:
        p("")
        p("open loop: SKIPPED (oha not installed)")
    idle_pct = None
    if idle:
        i = idle[-1]
        idle_pct = 100 * i["cpu_s"] / i["seconds"]
        p("")
        p("pipeline: the outbox of %d conversions left by the last group round drained in %.1f s%s"
          % (i["backlog"], i["drain_ms"] / 1000, "" if i["left"] == 0 else " (NOT drained: %d left)" % i["left"]))
        p("idle CPU once drained: %.2f s in %d s (%.2f%% of one core), %d threads"
          % (i["cpu_s"], i["seconds"], idle_pct, i["threads"]))
    if startup:
        p("start-up to first healthy /healthz on the bench's database: " + fmt_range(startup) + " ms")
    during = [r for r in rows if r["kind"] == "pipeline_during" and r.get("target") == "group"
              and r["mode"] == "unique" and r["accepted"] > 0]
    if during:
        p("pipeline work inside the closed-loop group rounds (it shares the writer with the requests): "
          "%s %% of the accepted conversions processed by the time wrk stopped"
          % fmt_range([100 * r["processed"] / r["accepted"] for r in during]))
    threads = [r for r in rows if r["kind"] == "threads" and r["mode"] == "unique"]
    for target in ("noop", "group"):
        runs = [r["per_request"] for r in threads if r["target"] == target]
        if not runs:
            continue
        names = {n for run in runs for n in run}
        total = {n: median([run.get(n, {}).get("user_us", 0) + run.get(n, {}).get("system_us", 0)
                            for run in runs]) for n in names}
        cells = ["%s %.0f (system %.0f)" % (n, total[n], median([run.get(n, {}).get("system_us", 0) for run in runs]))
                 for n in sorted(names, key=lambda n: -total[n]) if total[n] >= 0.5]
        p("%s server CPU per request by thread, µs, medians of the closed-loop rounds: %s"
          % (target, ", ".join(cells)))
    wal = [r["bytes"] / 1048576 for r in rows if r["kind"] == "wal_peak" and r["target"] == "group"]
    if wal:
        p("largest WAL file during the closed-loop group rounds: " + fmt_range(wal) + " MiB")
    if a.dup:
        p("duplicate-heavy run: " + a.dup)
    if a.seed_ms:
        p(f"seeding took {a.seed_ms} ms")

    # The performance targets of BENCHMARKS.md.
    checks = []
    def check(name, ok, got):
        checks.append((name, ok, got))
    g = by["group"]
    if vs_noop:
        check("accepted/s >= 0.40 x noop req/s", median(vs_noop) >= 0.40, "%.2f" % median(vs_noop))
    if g:
        p99 = median([r["p99_ms"] for r in g])
        check("closed-loop p99 <= 15 ms at 16 connections", p99 <= 15, "%.1f ms" % p99)
        errs = sum(r["errors"] + r["non2xx"] for r in closed if r["target"] != "noop")
        check("0 errors, 0 non-2xx (closed loop)", errs == 0, str(errs))
    if opened:
        op99 = median([r["p99_ms"] for r in opened])
        floor = " (no-op server, same load: %.2f ms)" % median([r["p99_ms"] for r in opened_noop]) if opened_noop else ""
        check(f"open-loop p99 <= 5 ms at {a.open_rate} req/s", op99 <= 5, "%.2f ms%s" % (op99, floor))
    else:
        check(f"open-loop p99 <= 5 ms at {a.open_rate} req/s", False, "SKIPPED: oha missing")
    rss = [r["rss_kb"] for r in g + opened]
    if rss:
        check("peak RSS <= 64 MB", max(rss) <= 64 * 1024, "%.1f MB" % (max(rss) / 1024))
    if idle_pct is not None:
        check("idle CPU ~0 (< 0.5% of a core)", idle_pct < 0.5, "%.2f%%" % idle_pct)
    if startup:
        check("start-up to healthy <= 200 ms", median(startup) <= 200, "%.0f ms" % median(startup))
    check("correctness: #conversions == #202s, one row per order", True, "checked after every run")
    check("medians of >= 3 runs", a.runs >= 3, str(a.runs))
    p("")
    p("| target | result | measured |")
    p("|---|---|---|")
    for name, ok, got in checks:
        p("| %s | %s | %s |" % (name, "PASS" if ok else "MISS", got))

    text = "\n".join(out)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    missed = [c for c in checks if not c[1]]
    if missed:
        print("\n%d acceptance line(s) missed: %s" % (len(missed), "; ".join(c[0] for c in missed)),
              file=sys.stderr)
        if a.strict:
            sys.exit(1)


if __name__ == "__main__":
    main()
