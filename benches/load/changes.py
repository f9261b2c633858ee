#!/usr/bin/env python3
"""Hooks on a new connection each, across a change to a running relay.

Posts JSON hooks to URL from THREADS threads, each opening a new TCP
connection per hook (as GitHub and most providers do), paced to RATE hooks/s
in all, for DURATION seconds. At AT seconds it runs CHANGE (a shell command:
a restart, `kill -HUP`, `ankusa reload`). Prints one JSON line: hooks sent,
answered 200, other statuses, connections refused or reset, and the longest
stretch with no 200 answered (ms).

  python3 changes.py URL RATE DURATION AT 'CHANGE COMMAND'
"""
import http.client, json, subprocess, sys, threading, time, urllib.parse

url, rate, duration, at, change = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
u = urllib.parse.urlparse(url)
THREADS = 16
lock = threading.Lock()
ok_times, statuses, refused, errors = [], {}, 0, []
start = time.monotonic()

def worker(k):
    global refused
    n = 0
    interval = THREADS / rate
    while True:
        due = start + (n * THREADS + k) / rate
        now = time.monotonic()
        if due - start > duration:
            return
        if due > now:
            time.sleep(due - now)
        n += 1
        body = json.dumps({"n": n, "k": k}).encode()
        try:
            c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
            c.request("POST", u.path, body, {"content-type": "application/json"})
            r = c.getresponse()
            r.read()
            c.close()
            with lock:
                if r.status == 200:
                    ok_times.append(time.monotonic())
                else:
                    statuses[r.status] = statuses.get(r.status, 0) + 1
        except (ConnectionRefusedError, ConnectionResetError, http.client.RemoteDisconnected, OSError) as e:
            with lock:
                refused += 1
                errors.append(type(e).__name__)

threads = [threading.Thread(target=worker, args=(k,)) for k in range(THREADS)]
for t in threads:
    t.start()
time.sleep(max(0.0, start + at - time.monotonic()))
c0 = time.monotonic()
rc = subprocess.call(change, shell=True)
c1 = time.monotonic()
for t in threads:
    t.join()
ok_times.sort()
gaps = [b - a for a, b in zip(ok_times, ok_times[1:])]
print(json.dumps({
    "change": change, "change_rc": rc, "change_s": round(c1 - c0, 3),
    "sent": len(ok_times) + sum(statuses.values()) + refused,
    "ok": len(ok_times), "other_status": statuses, "refused_or_reset": refused,
    "errors": sorted(set(errors)),
    "longest_gap_ms": round(max(gaps) * 1000, 1) if gaps else None,
}))
