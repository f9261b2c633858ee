#!/usr/bin/env python3
"""A receiver that checks each key's order itself, with the lane sequence.

Ankusa delivers the hooks of one ordering key one at a time, in order, and
gives each laned delivery its position in the key's lane: the header
`x-ankusa-lane-seq` (1, 2, 3, ... per ordering key and sink; the same number
on every retry and redelivery of a hook). ADR 0004 section 6, "The lane
sequence", says what the number promises; this file shows how a receiver
uses it (Python 3.8+, standard library only):

- n == last + 1: the next hook; process it.
- n == last with the last hook's idempotency key: a redelivery (an answer
  the relay never got, a restart; only the last hook of a key can come
  again, since the relay moves a key on only after a delivery it
  recorded); answer 200 and do nothing.
- n > last + 1: numbers last+1 .. n-1 are missing. Ankusa never reorders a
  key, so a missing number is a hook that was dead-lettered while its key
  moved on (a dead head releases its key) or purged; process n, remember the gap.
  When an operator revives the missing hook it arrives with its own (lower)
  number: it fills the gap and is processed then.
- any other lower number: the key's numbers started again (in a cluster,
  the tenant moved to a node that numbers its lanes itself; or the tenant
  was purged): a new run of numbers begins at n.

The state is per (tenant, source, ordering key): the same key of two sources
is two lanes. A real receiver keeps `last` and the gaps in the same
transaction as the effect of the hook; this one keeps them in memory.

    python3 receiver.py --port 9000          # then point an ordered http sink at it
    curl localhost:9000/report               # per key: last, missing, duplicates, restarts, arrivals

`--fail N` answers 503 to the first attempt of every Nth lane position, to
watch a retry carry the same number again (a refused attempt is not
recorded: `ankusa hooks show ID` lists it, with its number's delivery).
"""

import argparse
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Lanes:
    """What the receiver knows of each key, behind one lock."""

    def __init__(self):
        self.lock = threading.Lock()
        self.keys = {}

    def take(self, key, n, hook_id):
        """Records delivery `n` (idempotency key `hook_id`) of `key`;
        returns what it was."""
        with self.lock:
            k = self.keys.setdefault(key, {
                "last": 0, "last_id": None, "missing": [], "processed": [],
                "duplicates": 0, "restarts": 0, "arrivals": [],
            })
            k["arrivals"].append(n)
            if n == k["last"] and hook_id == k["last_id"]:
                k["duplicates"] += 1
                return "duplicate"
            if n in k["missing"]:
                k["missing"].remove(n)
                k["processed"].append(n)
                return "late"
            if n > k["last"] + 1:
                k["missing"].extend(range(k["last"] + 1, n))
                what = "gap"
            elif n == k["last"] + 1:
                what = "next"
            else:
                k["missing"] = []
                k["restarts"] += 1
                what = "restart"
            k["last"], k["last_id"] = n, hook_id
            k["processed"].append(n)
            return what

    def report(self):
        with self.lock:
            return json.loads(json.dumps(self.keys))


def handler(lanes, fail_every):
    class Receiver(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            self.rfile.read(int(self.headers.get("content-length", "0")))
            seq = self.headers.get("x-ankusa-lane-seq")
            if seq is None:
                # An unordered sink, or a row promoted by a relay before the
                # lane sequence: nothing to check.
                return self.answer(200, b"not laned\n")
            n = int(seq)
            attempt = int(self.headers.get("x-ankusa-attempt", "1"))
            if fail_every and n % fail_every == 0 and attempt == 1:
                return self.answer(503, b"try again\n")
            key = "/".join(
                self.headers.get(h, "")
                for h in ("x-ankusa-tenant", "x-ankusa-source", "x-ankusa-ordering-key")
            )
            what = lanes.take(key, n, self.headers.get("x-ankusa-idempotency-key"))
            self.answer(200, (what + "\n").encode())

        def do_GET(self):
            if self.path != "/report":
                return self.answer(404, b"GET /report\n")
            body = json.dumps(lanes.report(), sort_keys=True).encode()
            self.answer(200, body, "application/json")

        def answer(self, status, body, content_type="text/plain"):
            self.send_response(status)
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    return Receiver


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=9000)
    p.add_argument("--fail", type=int, default=0, metavar="N",
                   help="answer 503 to the first attempt of every Nth lane position")
    a = p.parse_args()
    server = ThreadingHTTPServer((a.host, a.port), handler(Lanes(), a.fail))
    print(f"listening on {a.host}:{server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
