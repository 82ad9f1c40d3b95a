#!/usr/bin/env python3
"""The helper of scripts/bench/postgres.sh (the write path on SQLite, PostgreSQL, two nodes).

    postgres.py rates FILE          reference rates (ECB CSV) for the last 120 days, for `rates import`
    postgres.py site SEED_JSON      "SITE_ID KEY" from seed.rs's output
    postgres.py wrapper LUA OUT HOST:PORT...
                                    writes OUT, a wrk script running LUA whose thread i connects
                                    to the i-th address (round robin): one wrk, its connections
                                    split across the nodes, its latencies in one histogram
    postgres.py check "BENCH ..."   exit 1 (saying why) if wrk saw a non-2xx answer or a socket error
    postgres.py pgcpu POSTMASTER_PID
                                    CPU ticks of a PostgreSQL cluster: the postmaster's utime,
                                    stime, cutime and cstime (its children that exited and were
                                    reaped) plus utime+stime of every live child of it
    postgres.py sqlite-counts FILE  "CONVERSIONS OUTBOX" of a SQLite database
    postgres.py record TARGET ROUND "BENCH ..." CLK_TCK NODE_TICKS PG_TICKS DRAIN_MS ROWS WAL_BYTES
                                    one JSON line (stdout) for one measured run; NODE_TICKS is
                                    comma-separated, one per node; PG_TICKS and WAL_BYTES "-"
                                    for SQLite
    postgres.py show                the JSON line on stdin as one human line (stdout)
    postgres.py summary RESULTS_JSONL --rounds N ...   the tables and the projection (stdout)
"""
import argparse
import datetime
import json
import os
import sqlite3
import statistics
import sys

import busy

TARGETS = ["sqlite", "pg1", "pg2"]
LABEL = {
    "sqlite": "sqlite: 1 node, SQLite file",
    "pg1": "pg1: 1 node, PostgreSQL",
    "pg2": "pg2: 2 nodes, one PostgreSQL",
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


def wrapper(lua, out, addrs):
    hosts = ", ".join("{%s, %s}" % (json.dumps(a.rsplit(":", 1)[0]), json.dumps(a.rsplit(":", 1)[1]))
                      for a in addrs)
    with open(out, "w") as f:
        f.write(f"""-- Written by scripts/bench/postgres.py: {os.path.basename(lua)}, its thread i connected
-- to the i-th of these nodes (round robin), so that one wrk splits its connections across them.
dofile({json.dumps(lua)})
local nodes = {{ {hosts} }}
local inner_setup = setup
local assigned = 0
function setup(thread)
   local node = nodes[assigned % #nodes + 1]
   assigned = assigned + 1
   thread.addr = wrk.lookup(node[1], node[2])[1]
   inner_setup(thread)
end
""")


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
        sys.exit("postgres-bench: wrk saw " + ", ".join(problems))


def proc_stat(pid):
    """(ppid, utime, stime, cutime, cstime) of a process, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    # The command name may hold spaces and parentheses: the fields start after the last ')'.
    fields = text[text.rindex(")") + 2:].split()
    # fields[0] is field 3 of proc(5) (state); ppid is field 4, utime..cstime fields 14..17.
    return int(fields[1]), int(fields[11]), int(fields[12]), int(fields[13]), int(fields[14])


def pgcpu(postmaster):
    postmaster = int(postmaster)
    own = proc_stat(postmaster)
    if own is None:
        sys.exit(f"postgres-bench: the postmaster {postmaster} is gone")
    total = own[1] + own[2] + own[3] + own[4]
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == postmaster:
            continue
        st = proc_stat(name)
        if st is not None and st[0] == postmaster:
            total += st[1] + st[2]
    print(total)


def sqlite_counts(path):
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    conv = conn.execute("SELECT count(*) FROM conversions").fetchone()[0]
    outbox = conn.execute("SELECT count(*) FROM outbox").fetchone()[0]
    print(conv, outbox)


def record(target, rnd, line, hz, node_ticks, pg_ticks, drain_ms, rows, wal_bytes):
    kv = bench_fields(line)
    secs = kv["duration_us"] / 1e6
    hz = int(hz)
    nodes = [int(t) / hz for t in node_ticks.split(",")]
    return {
        "target": target, "round": int(rnd),
        "accepted": kv["accepted"], "requests": kv["requests"], "seconds": secs,
        "accepted_per_s": kv["accepted"] / secs,
        "p50_ms": kv["p50_us"] / 1000, "p99_ms": kv["p99_us"] / 1000,
        "node_cpu_s": nodes,
        "pg_cpu_s": None if pg_ticks == "-" else int(pg_ticks) / hz,
        "drain_ms": int(drain_ms), "rows": int(rows),
        "wal_bytes": None if wal_bytes == "-" else int(wal_bytes),
    }


def per_k(cpu_s, accepted):
    """CPU seconds per 1,000 accepted conversions."""
    return cpu_s * 1000 / accepted


def show(r):
    acc = r["accepted"]
    nodes = " + ".join(f"{per_k(c, acc):.3f}" for c in r["node_cpu_s"])
    pg = f", PostgreSQL {per_k(r['pg_cpu_s'], acc):.3f}" if r["pg_cpu_s"] is not None else ""
    wal = f", WAL {r['wal_bytes'] / acc:,.0f} B per 202" if r["wal_bytes"] is not None else ""
    return (f"  {r['target']:6} round {r['round']}: {r['accepted_per_s']:,.0f} 202/s ({acc} in "
            f"{r['seconds']:.1f} s), p50 {r['p50_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms; CPU s per 1,000 "
            f"202s: node{'s' if len(r['node_cpu_s']) > 1 else ''} {nodes}{pg}{wal}; outbox drained "
            f"{r['drain_ms']} ms after the load; {r['rows']} conversions stored")


def summary(a):
    runs = [json.loads(l) for l in open(a.results) if l.strip()]
    out = []
    p = out.append
    busy.banner(p, a, "PG_BENCH_FORCE")
    p(f"The conversions write path on SQLite and PostgreSQL, {a.started} UTC: {a.rev}; {a.rounds} "
      f"round{'s' if a.rounds != 1 else ''} of {a.seconds} s (after {a.warmup} s of warm-up), "
      f"wrk -t2 -c16 in total, unique orders, a fresh database per run (seed.rs --sessions "
      f"{a.sessions} --users {a.users})")
    p(f"machine: {a.cores} cores, everything on it (wrk, the node(s), PostgreSQL); load average "
      f"(1/5/15 min) {a.load_start} at the start, {a.load_before} when the measurement started, "
      f"{a.load_end} at the end")
    p(f"PostgreSQL: {a.pg}")
    if a.analyze == "1":
        p("statistics: the template ANALYZEd after `convapi migrate`, each run's database after its "
          "warm-up (as autovacuum keeps a database in service)")
    else:
        p("statistics: NONE (PG_BENCH_ANALYZE=0): the nodes plan on a database never ANALYZEd")
    p(f"files on: {a.fs}")
    p("CPU = utime+stime from the warm-up's end to the outbox drained after the load (request path "
      "and pipeline), per 1,000 202s counted by wrk; PostgreSQL's = the postmaster and all its "
      "processes (backends, those that exited included, checkpointer, background writer, WAL "
      "writer, autovacuum), with a CHECKPOINT before the first reading and one before the second, "
      "so the run's pages written to the data files count. Medians, all runs in brackets.")
    p("")
    p("| target | 202/s | p50 ms | p99 ms | node CPU s per 1,000 | PostgreSQL CPU s per 1,000 "
      "| total CPU s per 1,000 | WAL bytes per 202 |")
    p("|---|---|---|---|---|---|---|---|")
    med = {}
    for t in TARGETS:
        rs = sorted((r for r in runs if r["target"] == t), key=lambda r: r["round"])
        if not rs:
            continue

        def col(vals, fmt):
            m = statistics.median(vals)
            if len(vals) == 1:
                return m, fmt(m)
            return m, f"{fmt(m)} ({', '.join(fmt(v) for v in vals)})"

        acc_m, acc_s = col([r["accepted_per_s"] for r in rs], lambda v: f"{v:,.0f}")
        p50_m, p50_s = col([r["p50_ms"] for r in rs], lambda v: f"{v:.2f}")
        p99_m, p99_s = col([r["p99_ms"] for r in rs], lambda v: f"{v:.1f}")
        k3 = lambda v: f"{v:.3f}"
        n_nodes = len(rs[0]["node_cpu_s"])
        node_tot_m, node_tot_s = col([per_k(sum(r["node_cpu_s"]), r["accepted"]) for r in rs], k3)
        if n_nodes > 1:
            each = []
            for i in range(n_nodes):
                m, _ = col([per_k(r["node_cpu_s"][i], r["accepted"]) for r in rs], k3)
                each.append(k3(m))
            node_s = f"{node_tot_s}: {' + '.join(each)}"
        else:
            node_s = node_tot_s
        if rs[0]["pg_cpu_s"] is not None:
            pg_m, pg_s = col([per_k(r["pg_cpu_s"], r["accepted"]) for r in rs], k3)
            tot_m, tot_s = col([per_k(sum(r["node_cpu_s"]) + r["pg_cpu_s"], r["accepted"]) for r in rs], k3)
            wal_m, wal_s = col([r["wal_bytes"] / r["accepted"] for r in rs], lambda v: f"{v:,.0f}")
        else:
            pg_m, pg_s, wal_s = None, "–", "–"
            tot_m, tot_s = node_tot_m, node_tot_s
        med[t] = {"acc": acc_m, "node": node_tot_m, "pg": pg_m, "total": tot_m}
        p(f"| {LABEL[t]} | {acc_s} | {p50_s} | {p99_s} | {node_s} | {pg_s} | {tot_s} | {wal_s} |")
    drains = [r["drain_ms"] for r in runs]
    p("")
    p(("node CPU of pg2: both nodes together, then each. " if "pg2" in med else "")
      + f"Outbox drained {statistics.median(drains):,.0f} ms after the load stopped (median; "
      f"{min(drains):,}–{max(drains):,} ms).")
    if "sqlite" in med and "pg1" in med:
        s, g = med["sqlite"], med["pg1"]
        p(f"pg1 against sqlite: {g['acc'] / s['acc']:.2f}× the 202/s, {g['node'] / s['node']:.2f}× "
          f"the node's CPU per conversion, {g['total'] / s['total']:.2f}× all the CPU per conversion "
          f"(node + PostgreSQL).")
    if "pg1" in med and "pg2" in med:
        o, t = med["pg1"], med["pg2"]
        p(f"pg2 against pg1 (the same machine, so the same cores shared by more processes): "
          f"{t['acc'] / o['acc']:.2f}× the 202/s, {t['node'] / o['node']:.2f}× the nodes' CPU per "
          f"conversion, {t['pg'] / o['pg']:.2f}× PostgreSQL's.")

    if "pg1" in med or "pg2" in med:
        p("")
        p("PROJECTION ON PAPER, NOT A MEASUREMENT: N nodes, each on its own machine of this kind "
          f"({a.node_cores} cores for convapi alone), on one PostgreSQL on its own machine of "
          f"{a.db_cores} cores (assumed: this machine's core count), none of them running anything "
          "else (no wrk, no load balancer). The limit from the nodes is N × "
          f"{a.node_cores} core-s/s ÷ node CPU per conversion, the one from the database "
          f"{a.db_cores} core-s/s ÷ PostgreSQL's CPU per conversion, the projection their minimum. "
          "It assumes each conversion costs what it cost here at every N (the 1-node figures for "
          "N = 1, the 2-node figures above); it ignores the network between machines, lock and "
          "I/O waits (the disk's fsyncs: WAL flushes per second), and contention that grows with N "
          "(row and advisory locks, the outbox claims), so it is an upper bound at best.")
        p("")
        p("| N nodes | per-conversion CPU from | node CPU s per 1,000 | PostgreSQL CPU s per 1,000 "
          "| limit from the nodes, 202/s | limit from the database, 202/s | projection, 202/s | bound by |")
        p("|---|---|---|---|---|---|---|---|")
        for n in (1, 2, 4, 8):
            src = "pg1" if n == 1 and "pg1" in med else ("pg2" if "pg2" in med else "pg1")
            m = med[src]
            node_per = m["node"] / 1000  # all the nodes' CPU per conversion, wherever it ran
            by_nodes = n * a.node_cores / node_per
            by_db = a.db_cores / (m["pg"] / 1000)
            proj = min(by_nodes, by_db)
            bound = "nodes' CPU" if by_nodes < by_db else "PostgreSQL's CPU"
            p(f"| {n} | {src} | {m['node']:.3f} | {m['pg']:.3f} | {by_nodes:,.0f} | {by_db:,.0f} "
              f"| {proj:,.0f} | {bound} |")
        if "sqlite" in med:
            p("")
            p(f"For scale: SQLite, one node on one machine of {a.node_cores} cores, limited by its CPU "
              f"alone: {a.node_cores / (med['sqlite']['node'] / 1000):,.0f} 202/s on paper "
              f"(measured here, with wrk on the same cores: {med['sqlite']['acc']:,.0f}/s).")
    notes = [l.rstrip("\n") for l in open(a.notes)] if a.notes else []
    if notes:
        p("")
        p("The nodes' warnings and errors (their logs' first three of each run):")
        for line in notes:
            p("  " + line)
    busy.footer(p, a)
    print("\n".join(out))


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "rates":
        rates(args[0])
    elif cmd == "site":
        d = json.load(open(args[0]))
        print(d["siteId"], d["key"])
    elif cmd == "wrapper":
        wrapper(args[0], args[1], args[2:])
    elif cmd == "check":
        check(args[0])
    elif cmd == "pgcpu":
        pgcpu(args[0])
    elif cmd == "sqlite-counts":
        sqlite_counts(args[0])
    elif cmd == "record":
        print(json.dumps(record(*args)))
    elif cmd == "show":
        print(show(json.loads(sys.stdin.readline())))
    elif cmd == "summary":
        ap = argparse.ArgumentParser(prog="postgres.py summary")
        ap.add_argument("results")
        for opt in ("rev", "started", "load-start", "load-before", "load-end", "forced", "max-load",
                    "pg", "fs", "notes", "analyze"):
            ap.add_argument("--" + opt, default="")
        for opt in ("rounds", "seconds", "warmup", "cores", "node-cores", "db-cores", "sessions",
                    "users"):
            ap.add_argument("--" + opt, type=int, required=True)
        summary(ap.parse_args(args))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
