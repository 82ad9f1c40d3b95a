#!/usr/bin/env python3
"""Turns one load-generator result into one JSON line of results.jsonl (used by bench.sh).

    record.py wrk TARGET ROUND MODE "BENCH ..." RSS_KB SERVER_CPU_TICKS CLK_TCK
    record.py oha ROUND OHA_JSON RSS_KB ROWS SERVED_202 ACCEPTED [TARGET [SERVER_LOG]]
              (TARGET: convapi, noop; SERVER_LOG: convapi's stderr, whose access log gives the time
              each request spent in the server, from a worker taking it to its answer written)
    record.py show JSON_LINE      (one human line, on stdout)
"""
import json
import sys


def wrk(target, rnd, mode, line, rss, ticks, hz):
    kv = {k: int(v) for k, v in (p.split("=") for p in line.split()[1:])}
    secs = kv["duration_us"] / 1e6
    return {
        "kind": "closed", "target": target, "round": int(rnd), "mode": mode,
        "rps": kv["requests"] / secs, "accepted_per_s": kv["accepted"] / secs,
        "p50_ms": kv["p50_us"] / 1000, "p90_ms": kv["p90_us"] / 1000, "p99_ms": kv["p99_us"] / 1000,
        "max_ms": kv["max_us"] / 1000, "requests": kv["requests"], "accepted": kv["accepted"],
        "non2xx": kv["non2xx"], "errors": kv["errors"], "sent": kv["sent"], "maxsent": kv["maxsent"],
        "rss_kb": int(rss), "server_cpu_s": int(ticks) / int(hz),
    }


def server_times(log_path):
    """Milliseconds of each 202 to a conversion, from the access log (`... POST /api/sites/.../conversions 202 - 1.234ms`)."""
    ms = []
    for line in open(log_path, errors="replace"):
        # `ID CLIENT METHOD PATH STATUS CODE 1.234ms [via PEER]`
        parts = line.split()
        for i, tok in enumerate(parts[:-3]):
            if tok.endswith("/conversions") and parts[i + 1] == "202" and parts[i + 3].endswith("ms"):
                ms.append(float(parts[i + 3][:-2]))
                break
    ms.sort()
    return ms


def oha(rnd, path, rss, rows, served, accepted, target="convapi", log_path=None):
    d = json.load(open(path))
    s, p = d["summary"], d["latencyPercentiles"]
    codes = {str(k): v for k, v in d.get("statusCodeDistribution", {}).items()}
    return {
        "kind": "open", "target": target, "round": int(rnd), "rps": s["requestsPerSec"],
        "p50_ms": p["p50"] * 1000, "p99_ms": p["p99"] * 1000, "p999_ms": p["p99.9"] * 1000,
        "max_ms": s["slowest"] * 1000, "codes": codes,
        "errors": sum(d.get("errorDistribution", {}).values()), "rss_kb": int(rss),
        "rows": int(rows), "served": int(served), "accepted": int(accepted),
        **server_percentiles(log_path),
    }


def server_percentiles(log_path):
    if not log_path:
        return {}
    ms = server_times(log_path)
    if not ms:
        return {}
    at = lambda q: ms[min(len(ms) - 1, int(q * len(ms)))]
    return {"server_p50_ms": at(0.5), "server_p99_ms": at(0.99), "server_max_ms": ms[-1]}


def show(d):
    if d["kind"] == "closed":
        return ("  %-12s round %s %-6s %8.0f req/s  accepted %8.0f/s  p50 %6.2f ms  p99 %7.2f ms"
                "  rss %5.1f MB  cpu %4.0f µs/req  errors %d non-2xx %d" % (
                    d["target"], d["round"], d["mode"], d["rps"], d["accepted_per_s"], d["p50_ms"],
                    d["p99_ms"], d["rss_kb"] / 1024, d["server_cpu_s"] * 1e6 / max(d["requests"], 1),
                    d["errors"], d["non2xx"]))
    inside = ""
    if "server_p99_ms" in d:
        inside = "  (in the server: p50 %.2f p99 %.2f max %.1f ms)" % (
            d["server_p50_ms"], d["server_p99_ms"], d["server_max_ms"])
    return ("  open loop %-7s round %d: %.0f req/s  p50 %.2f ms  p99 %.2f ms  p99.9 %.2f ms  max %.1f ms"
            "  rss %.1f MB  codes %s  errors %d  rows %d (repeats %d)%s" % (
                d.get("target", "convapi"), d["round"], d["rps"], d["p50_ms"], d["p99_ms"], d["p999_ms"], d["max_ms"],
                d["rss_kb"] / 1024, d["codes"], d["errors"], d["rows"], d["served"] - d["accepted"], inside))


def open_ok(d):
    """Only 202s, no errors, and every 202 either created its row or repeated a known order."""
    return (set(d["codes"]) <= {"202"} and d["errors"] == 0 and d["rows"] == d["accepted"]
            and d["served"] == d["codes"].get("202", 0) and d["rows"] <= d["served"])


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "wrk":
        print(json.dumps(wrk(*args)))
    elif cmd == "oha":
        print(json.dumps(oha(*args)))
    elif cmd == "show":
        print(show(json.loads(args[0])))
    elif cmd == "open-ok":
        sys.exit(0 if open_ok(json.loads(args[0])) else 1)
    else:
        sys.exit("record.py: unknown command " + cmd)
