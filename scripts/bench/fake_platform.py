#!/usr/bin/env python3
"""A fake Meta Conversions API for scripts/bench/forward.sh: answers every POST as Meta does
(`{"events_received": n}`), or, with --hang SECONDS, only after that long (a platform that is
down without refusing connections). GET /count answers {"requests": r, "events": e, "distinct": d}.
Writes its port to --port-file once listening on 127.0.0.1."""
import argparse
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

parser = argparse.ArgumentParser()
parser.add_argument("--port-file", required=True)
parser.add_argument("--hang", type=float, default=0.0)
args = parser.parse_args()

lock = threading.Lock()
state = {"requests": 0, "events": 0, "ids": set()}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def answer(self, body):
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        with lock:
            self.answer({"requests": state["requests"], "events": state["events"],
                         "distinct": len(state["ids"])})

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if args.hang:
            with lock:
                state["requests"] += 1
            time.sleep(args.hang)
            self.answer({})
            return
        data = json.loads(body).get("data", [])
        with lock:
            state["requests"] += 1
            state["events"] += len(data)
            state["ids"].update(e.get("event_id") for e in data)
        self.answer({"events_received": len(data), "fbtrace_id": "bench"})


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
with open(args.port_file, "w") as f:
    f.write(str(server.server_address[1]))
server.serve_forever()
