#!/usr/bin/env python3
"""Bytes on disk per hook (README, "Sizing"; benches/load/RESULTS.md).

Each cell starts a relay on a fresh store (RocksDB, or STORE=fjall) in a temp
dir under /var/tmp, posts HOOKS hooks of one body size to one source with one
HTTP sink (unordered, or ordered on x-entity-id over KEYS keys), and measures
the store directory with `du` in three states, each three ways: "live" (the
relay running, right after the phase; apparent sizes, as RocksDB preallocates
its WAL, 1.1 x the 64 MiB memtable, and its MANIFEST), "stopped" (after a
stop: what the WAL and the SST files hold, nothing flushed at close) and
"flushed" (then a start on the same store, whose open flushes the WAL it
replays to SST files and deletes it, the files left still for SETTLE_S
seconds, and a stop):

  pending    the sink entry `paused: true` (the hooks committed, none delivered)
  delivered  the pause lifted and a receiver answering 200: every hook
             delivered, retention (7 days) keeps the envelopes
  retained   a start with `retention: {keep_ms: 1000, interval_ms: 1000}`:
             once the sweep has deleted every hook (RocksDB compacts by its
             compact-on-deletion collector; nothing else forces a compaction)

Per hook = (du after - du of the empty store) / HOOKS, with du's allocated
bytes (`du -B1`) of the stopped store, RocksDB's info logs (LOG*, which grow
with each start) left out of both. The relay's own figures (/metrics: ankusa_queue_pending_bytes,
ankusa_engine_written_bytes) are taken at each live point, and after the
delivered and the retained states the stopped store is exported (`ankusa store
export`) and the dump's records are summed per column family and index family:
the logical bytes (keys + values, before the engine's own overhead). The
pending state is exported too, from the store the first stop left.

Bodies are real-looking JSON built from fixtures/corpus: Stripe events for
1 KiB and 4 KiB, GitHub pull_request and workflow_run events for 16 KiB, each
hook with its ids, hashes and numbers drawn anew (so no two hooks share their
values, as real traffic), cut or padded to exactly BODY bytes, posted with
the provider's own headers (fresh signatures and delivery ids) and a key in
x-entity-id. The source dedupes like the provider's example in
config/ankusa.example.yaml: Stripe on the body's `id`, GitHub on
x-github-delivery (ttl_ms default, 72 h).

  python3 benches/load/sizing.py                        # every cell (CELLS below)
  CELLS="4k-unordered" HOOKS=20000 python3 benches/load/sizing.py
  BIN_DIR=/work/shared/bin ANKUSA=ankusa-debug python3 benches/load/sizing.py

Knobs (environment): BIN_DIR and ANKUSA (the relay binary: $BIN_DIR/$ANKUSA,
default /var/cache/ankusa/bench-target/release/ankusa), STORE (rocksdb |
fjall), HOOKS (20000), KEYS (1000), CONNS (8 posting connections), CELLS
(default: 1k, 4k and 16k, each unordered and ordered, and 4k-unordered-nolog;
a cell is SIZE-MODE[-nolog][-down], SIZE 1k|4k|16k, MODE unordered|ordered;
-down: no `pending` pause but a receiver that refuses connections for DOWN_S
seconds, the relay retrying, then the other states), DOWN_S (300), SETTLE_S
(10), KEEP=1 (keep the temp dir: configs, relay logs, dumps removed), OUT (a
file the JSON lines are appended to). Prints one JSON line per cell and a
markdown table. Needs only python3 and du.
"""

import http.client
import http.server
import json
import os
import random
import re
import shutil
import signal
import socket
import string
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
import zlib

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CORPUS = os.path.join(ROOT, "fixtures", "corpus")
BIN_DIR = os.environ.get("BIN_DIR", "/var/cache/ankusa/bench-target/release")
ANKUSA = os.path.join(BIN_DIR, os.environ.get("ANKUSA", "ankusa"))
STORE = os.environ.get("STORE", "rocksdb")
HOOKS = int(os.environ.get("HOOKS", "20000"))
KEYS = int(os.environ.get("KEYS", "1000"))
CONNS = int(os.environ.get("CONNS", "8"))
SETTLE_S = float(os.environ.get("SETTLE_S", "10"))
DOWN_S = float(os.environ.get("DOWN_S", "300"))
CELLS = os.environ.get(
    "CELLS",
    "1k-unordered 1k-ordered 4k-unordered 4k-ordered 16k-unordered 16k-ordered 4k-unordered-nolog",
).split()
SIZES = {"1k": 1024, "4k": 4096, "16k": 16384}
# The corpus bodies each size is made from (the provider's headers come along).
BASES = {
    "1k": ["stripe/customer_created.json", "stripe/customer_updated.json",
           "stripe/payment_intent_succeeded.json", "stripe/charge_dispute_created.json"],
    "4k": ["stripe/invoice_paid.json", "stripe/invoice_created.json",
           "stripe/customer_subscription_created.json", "stripe/charge_succeeded_guest.json",
           "stripe/checkout_session_completed.json"],
    "16k": ["github/pull_request_opened.json", "github/pull_request_synchronize.json",
            "github/pull_request_labeled_org_large.json", "github/workflow_run_completed.json"],
}
# Request headers a client sets itself (the relay stores the ones it receives).
CLIENT_SET = {"host", "content-length", "connection", "transfer-encoding"}


def log(*a):
    print("sizing:", *a, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- bodies

ID_RE = re.compile(r"^[A-Za-z0-9_\-=+/]{8,}$")
HEX_RE = re.compile(r"^[0-9a-f]{7,}$")


def scramble(s, rng):
    """Same length and character classes, new characters (an id, a hash); a
    Stripe-style prefix (`evt_`, `cus_`) kept."""
    m = re.match(r"^[a-z]+_", s)
    keep = m.group(0) if m else ""
    hexy = bool(HEX_RE.match(s))
    out = []
    for ch in s[len(keep):]:
        if ch.isdigit():
            out.append(rng.choice(string.digits))
        elif hexy:
            out.append(rng.choice("0123456789abcdef"))
        elif ch.islower():
            out.append(rng.choice(string.ascii_lowercase))
        elif ch.isupper():
            out.append(rng.choice(string.ascii_uppercase))
        else:
            out.append(ch)
    return keep + "".join(out)


DATE_RE = re.compile(r"^\d{4}-\d\d-\d\d")


def vary(v, rng):
    """The JSON value with its ids, hashes and large numbers drawn anew; text,
    enums, dates and URLs' words kept (what repeats between real hooks repeats
    here)."""
    if isinstance(v, dict):
        return {k: vary(x, rng) for k, x in v.items()}
    if isinstance(v, list):
        return [vary(x, rng) for x in v]
    if isinstance(v, bool) or v is None:
        return v
    if isinstance(v, int):
        if abs(v) >= 1000:
            n = len(str(abs(v)))
            return rng.randrange(10 ** (n - 1), 10 ** n)
        return v
    if isinstance(v, float):
        return v
    if isinstance(v, str):
        if DATE_RE.match(v):
            return v
        if HEX_RE.match(v) or (ID_RE.match(v) and any(c.isdigit() for c in v)):
            return scramble(v, rng)
        if v.startswith("http"):
            # URLs: their numbers drawn anew, their words kept.
            return re.sub(r"\d{3,}", lambda m: scramble(m.group(0), rng), v)
        return v
    return v


def compact(v):
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False).encode()


def prune(v, target):
    """Drops the last key (or element) of the largest nested container until
    the compact JSON fits in target bytes (the top level's own keys, an
    event's id and type, are kept while anything nested is left)."""
    while len(compact(v)) > target:
        best, best_len = None, -1
        stack = list(v.values()) if isinstance(v, dict) else list(v)
        while stack:
            c = stack.pop()
            if isinstance(c, (dict, list)) and len(c) > 0:
                n = len(compact(c))
                if n > best_len:
                    best, best_len = c, n
                stack.extend(c.values() if isinstance(c, dict) else c)
        if best is None:
            best = v
        if isinstance(best, dict):
            best.pop(list(best.keys())[-1])
        else:
            best.pop()
    return v


ALNUM = string.ascii_letters + string.digits


def fit(v, target, rng):
    """Compact JSON of exactly target bytes: pruned if it is longer, then
    padded with a metadata object of random references (as merchants attach)
    and a note."""
    if len(compact(v)) > target - 40:
        v = prune(v, target - 40)
    if not isinstance(v, dict):
        v = {"event": v}
    head = compact(v)[:-1] + (b',"metadata":{' if len(v) else b'{"metadata":{')
    room = target - len(head) - len(b'"note":""}}')
    refs = []
    i = 0
    while True:
        r = f'"ref_{i}":"{"".join(rng.choice(ALNUM) for _ in range(24))}",'.encode()
        if len(r) > room - 8:
            break
        refs.append(r)
        room -= len(r)
        i += 1
    note = "".join(rng.choice(string.ascii_lowercase + " ") for _ in range(room)).encode()
    body = head + b"".join(refs) + b'"note":"' + note + b'"}}'
    assert len(body) == target, (len(body), target)
    return body


class Bodies:
    def __init__(self, size):
        self.size = size
        self.target = SIZES[size]
        self.bases = []
        for rel in BASES[size]:
            with open(os.path.join(CORPUS, rel)) as f:
                d = json.load(f)
            # Pruned once to fit (varying keeps the lengths of ids and numbers).
            body = prune(json.loads(d["body"]), self.target - 64)
            self.bases.append((body, d["headers"], d["provider"]))

    def hook(self, i, rng):
        body, headers, provider = self.bases[i % len(self.bases)]
        out = fit(vary(body, rng), self.target, rng)
        hs = []
        for name, value in headers:
            ln = name.lower()
            if ln in CLIENT_SET:
                continue
            if ln == "stripe-signature":
                value = f"t={int(time.time())},v1=" + "".join(rng.choice("0123456789abcdef") for _ in range(64))
            elif ln in ("x-hub-signature", "x-hub-signature-256"):
                algo, hexd = value.split("=", 1)
                value = algo + "=" + "".join(rng.choice("0123456789abcdef") for _ in range(len(hexd)))
            elif ln == "x-github-delivery":
                value = str(uuid.UUID(int=rng.getrandbits(128), version=4))
            hs.append((name, value))
        hs.append(("x-entity-id", f"key-{rng.randrange(KEYS)}"))
        return out, hs

    def dedupe(self):
        return "{json: id}" if self.size != "16k" else "{header: x-github-delivery}"


# ---------------------------------------------------------------- receiver


class Receiver:
    """A destination answering 200 with a small JSON body (what the attempt
    log keeps of a delivery), or, while down, refusing connections."""

    def __init__(self, port):
        self.port = port
        self.count = 0
        self.server = None
        self.lock = threading.Lock()

    def up(self):
        outer = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                n = int(self.headers.get("content-length") or 0)
                self.rfile.read(n)
                with outer.lock:
                    outer.count += 1
                body = b'{"received":true}'
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        class S(http.server.ThreadingHTTPServer):
            allow_reuse_address = True
            daemon_threads = True

        self.server = S(("127.0.0.1", self.port), H)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def down(self):
        if self.server:
            self.server.shutdown()
            self.server.server_close()
            self.server = None


# ---------------------------------------------------------------- relay


def free_port():
    lo = 32768
    try:
        lo = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
    except OSError:
        pass
    for _ in range(200):
        p = random.randrange(20000, max(20001, lo - 1))
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", p)) != 0:
                return p
    raise SystemExit("sizing: no free port")


def write_config(path, cell, phase, ports):
    size, mode, nolog, _down = cell
    bodies = Bodies(size)
    paused = "\n        paused: true" if phase == "pending" else ""
    ordered = "\n        ordered: true\n        ordering_key: {header: x-entity-id}" if mode == "ordered" else ""
    log_opt = "\n  attempt_log: {enabled: false}" if nolog else ""
    retention = "retention: {keep_ms: 1000, interval_ms: 1000}\n" if phase == "retained" else ""
    with open(path, "w") as f:
        f.write(f"""node:
  name: sizing
  data_dir: {os.path.dirname(path)}/data
  store: {STORE}
  max_pending: 100000000
  max_pending_bytes: 1000000000000{log_opt}
listeners:
  ingest: 127.0.0.1:{ports['ingest']}
  admin: 127.0.0.1:{ports['admin']}
{retention}tenants:
  - name: t
    max_pending: 100000000
    max_pending_bytes: 1000000000000
sources:
  - name: s
    path: /hooks/s
    tenant: t
    dedupe: {bodies.dedupe()}
    sinks:
      - type: http
        name: dest
        url: http://127.0.0.1:{ports['sink']}/hook{ordered}{paused}
""")


class Relay:
    def __init__(self, dirpath, ports):
        self.dir = dirpath
        self.ports = ports
        self.proc = None

    def start(self, phase):
        cfg = os.path.join(self.dir, f"ankusa-{phase}.yaml")
        out = open(os.path.join(self.dir, "relay.log"), "ab")
        self.proc = subprocess.Popen([ANKUSA, "serve", "--config", cfg], stdout=out, stderr=out,
                                     env=dict(os.environ, RUST_LOG=os.environ.get("RUST_LOG", "warn")))
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"sizing: relay exited {self.proc.returncode} (see {self.dir}/relay.log)")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.ports['admin']}/readyz", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise SystemExit("sizing: relay not ready after 120 s")

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def metrics(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ports['admin']}/metrics", timeout=10) as r:
            text = r.read().decode()
        m = {}
        for line in text.splitlines():
            if line.startswith("#") or not line.strip():
                continue
            name, _, val = line.rpartition(" ")
            try:
                v = float(val)
            except ValueError:
                continue
            # Summed over the labels.
            base = name.split("{", 1)[0]
            m[base] = m.get(base, 0.0) + v
        return m


def metric(m, name):
    """A metric's value, summed over its labels (0 when absent)."""
    return m.get(name, 0.0)


def wait_until(what, fn, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if fn():
            return
        time.sleep(1)
    raise SystemExit(f"sizing: timed out waiting for {what}")


# ---------------------------------------------------------------- measuring


def store_dir(dirpath):
    return os.path.join(dirpath, "data", f"store-{STORE}")


def du(path):
    """du of the store: allocated bytes (`du -B1`) and apparent bytes (`du
    -b`), each split into table files (RocksDB's SST files, fjall's
    segments), WAL (RocksDB's *.log; fjall's journals), RocksDB's info logs
    (LOG, LOG.old.*: they grow with restarts and time, not hooks) and the rest
    (MANIFEST, OPTIONS, ...)."""
    total = int(subprocess.run(["du", "-s", "-B1", path], capture_output=True, text=True,
                               check=True).stdout.split()[0])
    apparent = int(subprocess.run(["du", "-s", "-b", path], capture_output=True, text=True,
                                  check=True).stdout.split()[0])
    out = {"du": total, "apparent": apparent, "files": 0}
    for kind in ("sst", "wal", "infolog", "other"):
        out[kind] = 0
        out[kind + "_apparent"] = 0
    for dp, _dn, fns in os.walk(path):
        for fn in fns:
            try:
                st = os.lstat(os.path.join(dp, fn))
            except FileNotFoundError:
                continue
            out["files"] += 1
            if fn.endswith(".sst"):
                kind = "sst"
            elif fn.endswith(".log") or "journal" in dp:
                kind = "wal"
            elif fn.startswith("LOG"):
                kind = "infolog"
            else:
                kind = "other"
            out[kind] += st.st_blocks * 512
            out[kind + "_apparent"] += st.st_size
    return out


def tables(path):
    """The store's files and their sizes but RocksDB's info logs: still when
    nothing writes, flushes or compacts."""
    out = []
    for dp, _dn, fns in os.walk(path):
        for fn in fns:
            if fn.startswith("LOG"):
                continue
            try:
                out.append((os.path.join(dp, fn), os.path.getsize(os.path.join(dp, fn))))
            except FileNotFoundError:
                pass
    return sorted(out)


def settle(path):
    """Waits until the store's files have not changed for SETTLE_S seconds
    (at most 180 s): background flushes and compactions done."""
    last, since, deadline = None, time.time(), time.time() + 180
    while time.time() < deadline:
        now = tables(path)
        if now != last:
            last, since = now, time.time()
        elif time.time() - since >= SETTLE_S:
            return True
        time.sleep(1)
    return False


def rocksdb_events(path):
    """What RocksDB's info logs (LOG and LOG.old.*) record so far: SST files
    written (flushes, recovery flushes and compactions), compactions, opens;
    and the last compaction's LSM shape (files per level)."""
    ev = {"table_file_creation": 0, "compaction_finished": 0, "recovery_finished": 0,
          "flush_finished": 0}
    for fn in os.listdir(path):
        if fn.startswith("LOG"):
            with open(os.path.join(path, fn), errors="replace") as f:
                for line in f:
                    m = re.search(r'"event": "([a-z_]+)"', line)
                    if m and m.group(1) in ev:
                        ev[m.group(1)] += 1
    return ev


CF_NAMES = ["meta", "hooks", "deliveries", "index", "archive"]


def dump_stats(dirpath, label):
    """Exports the stopped store and sums its records' key and value bytes per
    column family (and per family byte in index)."""
    dump = os.path.join(dirpath, f"{label}.dump")
    subprocess.run([ANKUSA, "store", "export", os.path.join(dirpath, "data"), dump], check=True,
                   stdout=subprocess.DEVNULL)
    stats = {}
    with open(dump, "rb") as f:
        f.read(8 + 2 + 4)
        n = f.read(1)[0]
        f.read(n + 4)
        while True:
            tag = f.read(1)
            if tag != b"R":
                break
            head = f.read(11)
            cf, klen, vlen = head[0], int.from_bytes(head[1:3], "big"), int.from_bytes(head[3:7], "big")
            key = f.read(klen)
            f.seek(vlen + 4, 1)
            name = CF_NAMES[cf]
            if name == "index":
                name = "index ?" + chr(key[0])
            s = stats.setdefault(name, [0, 0, 0])
            s[0] += 1
            s[1] += klen
            s[2] += vlen
    os.remove(dump)
    return {k: {"records": v[0], "key_bytes": v[1], "value_bytes": v[2]} for k, v in sorted(stats.items())}


# ---------------------------------------------------------------- posting


def post_all(port, bodies, n, seed):
    """Posts n hooks over CONNS keep-alive connections; every one must get 200."""
    counter = iter(range(n))
    lock = threading.Lock()
    bad = []

    def worker(w):
        rng = random.Random(seed * 1000 + w)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                break
            body, hs = bodies.hook(i, rng)
            for attempt in range(20):
                try:
                    conn.request("POST", "/hooks/s", body=body, headers=dict(hs))
                    r = conn.getresponse()
                    r.read()
                    if r.status == 200:
                        break
                    if r.status != 503:
                        bad.append(r.status)
                        break
                    time.sleep(0.5)
                except (OSError, http.client.HTTPException):
                    conn.close()
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                    time.sleep(0.2)
            else:
                bad.append("gave up")
        conn.close()

    ts = [threading.Thread(target=worker, args=(w,)) for w in range(CONNS)]
    t0 = time.time()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if bad:
        raise SystemExit(f"sizing: {len(bad)} hooks not accepted: {bad[:5]}")
    return time.time() - t0


# ---------------------------------------------------------------- a cell


def parse_cell(name):
    parts = name.split("-")
    size, mode = parts[0], parts[1]
    if size not in SIZES or mode not in ("unordered", "ordered") or any(p not in ("nolog", "down") for p in parts[2:]):
        raise SystemExit(f"sizing: unknown cell {name}")
    return (size, mode, "nolog" in parts[2:], "down" in parts[2:])


def measure(relay, dirpath):
    """du of the running relay's store, and its /metrics."""
    d = du(store_dir(dirpath))
    m = relay.metrics()
    d["metrics"] = {k: metric(m, k) for k in (
        "ankusa_queue_pending", "ankusa_queue_pending_bytes", "ankusa_engine_written_bytes_total",
        "ankusa_dispatch_delivered_total", "ankusa_retention_hooks_deleted_total",
        "ankusa_dispatch_attempts_total", "ankusa_dispatch_retries_total")}
    return d


def stopped(dirpath):
    """du of the stopped store (RocksDB trims its preallocated WAL and
    MANIFEST at close), and RocksDB's events so far."""
    d = du(store_dir(dirpath))
    if STORE == "rocksdb":
        d["events"] = rocksdb_events(store_dir(dirpath))
    return d


def restart_flushed(relay, dirpath, phase):
    """A start on the stopped store (RocksDB's open flushes the WAL it
    replays to SST files and deletes it), the files left still for SETTLE_S
    (flushes and compactions done), a stop: du of the stopped store."""
    relay.start(phase)
    settled = settle(store_dir(dirpath))
    relay.stop()
    d = stopped(dirpath)
    d["settled"] = settled
    return d


def run_cell(work, name):
    cell = parse_cell(name)
    size, mode, nolog, down = cell
    dirpath = os.path.join(work, name)
    os.makedirs(dirpath)
    ports = {"ingest": free_port(), "admin": free_port(), "sink": free_port()}
    for phase in ("pending", "delivered", "retained"):
        write_config(os.path.join(dirpath, f"ankusa-{phase}.yaml"), cell, phase, ports)
    subprocess.run([ANKUSA, "check-config", os.path.join(dirpath, "ankusa-pending.yaml")], check=True,
                   stdout=subprocess.DEVNULL)
    relay = Relay(dirpath, ports)
    recv = Receiver(ports["sink"])
    res = {"cell": name, "store": STORE, "hooks": HOOKS, "body_bytes": SIZES[size], "mode": mode,
           "attempt_log": not nolog, "receiver_down_s": DOWN_S if down else 0}
    bodies = Bodies(size)
    # With -down the receiver is not up yet: the sink is not paused, its
    # calls fail (connection refused) until the receiver comes up.
    first = "delivered" if down else "pending"
    try:
        relay.start(first)
        time.sleep(2)
        res["empty_live"] = measure(relay, dirpath)
        relay.stop()
        res["empty"] = stopped(dirpath)
        relay.start(first)
        t = post_all(ports["ingest"], bodies, HOOKS, seed=zlib.crc32(name.encode()) & 0xFFFF)
        res["post_s"] = round(t, 1)
        log(f"{name}: {HOOKS} hooks accepted in {t:.1f} s")
        if down:
            time.sleep(DOWN_S)
        res["pending_live"] = measure(relay, dirpath)
        relay.stop()
        res["pending_stopped"] = stopped(dirpath)
        res["pending_dump"] = dump_stats(dirpath, "pending")
        res["pending_flushed"] = restart_flushed(relay, dirpath, first)
        # Delivered: the pause lifted (or the receiver back), answering 200.
        recv.up()
        relay.start("delivered")
        wait_until("every hook delivered",
                   lambda: metric(relay.metrics(), "ankusa_queue_pending") == 0 and recv.count >= HOOKS,
                   3600)
        time.sleep(2)
        res["received"] = recv.count
        res["delivered_live"] = measure(relay, dirpath)
        relay.stop()
        res["delivered_stopped"] = stopped(dirpath)
        res["delivered_flushed"] = restart_flushed(relay, dirpath, "delivered")
        res["delivered_dump"] = dump_stats(dirpath, "delivered")
        # Retention done: keep_ms 1 s deletes every hook (received minutes ago).
        relay.start("retained")
        wait_until("retention to delete every hook",
                   lambda: metric(relay.metrics(), "ankusa_retention_hooks_deleted_total") >= HOOKS, 1800)
        res["retained_live_settled"] = settle(store_dir(dirpath))
        res["retained_live"] = measure(relay, dirpath)
        relay.stop()
        res["retained_stopped"] = stopped(dirpath)
        res["retained_flushed"] = restart_flushed(relay, dirpath, "retained")
        res["retained_dump"] = dump_stats(dirpath, "retained")
    finally:
        relay.stop()
        recv.down()
        if not os.environ.get("KEEP"):
            shutil.rmtree(os.path.join(dirpath, "data"), ignore_errors=True)
    # Per hook: the stopped store's du less the empty store's, info logs left
    # out of both; live: apparent sizes (a live RocksDB store preallocates its
    # WAL and MANIFEST), less the empty live store's.
    e = res["empty"]["du"] - res["empty"]["infolog"]
    for k in ("pending", "delivered", "retained"):
        for st in ("stopped", "flushed"):
            d = res[f"{k}_{st}"]
            res[f"{k}_{st}_per_hook"] = round((d["du"] - d["infolog"] - e) / HOOKS, 1)
        d, el = res[f"{k}_live"], res["empty_live"]
        res[f"{k}_live_per_hook"] = round(
            (d["apparent"] - d["infolog_apparent"] - el["apparent"] + el["infolog_apparent"]) / HOOKS, 1)
    for k in ("pending", "delivered", "retained"):
        dd = res[f"{k}_dump"]
        res[f"{k}_logical_per_hook"] = round(
            sum(v["key_bytes"] + v["value_bytes"] for v in dd.values()) / HOOKS, 1)
    return res


def table(results):
    print()
    print(f"store: {STORE}, hooks per cell: {HOOKS}, keys: {KEYS}. Bytes per hook: stopped and flushed = "
          "(du -B1 of the stopped store - the empty store's) / hooks, RocksDB's info logs left out; "
          "flushed = after a start (the WAL flushed to SST files), compactions done, and a stop; "
          "live = the running store's apparent size less the empty one's; logical = the dump's keys + values")
    print()
    print("| cell | body | pending: live / stopped / flushed / logical | delivered: live / stopped / flushed / logical"
          " | retention done: live / stopped / flushed / logical | /metrics pending_bytes per hook |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in results:
        pb = r["pending_live"]["metrics"]["ankusa_queue_pending_bytes"] / r["hooks"]
        cols = []
        for k in ("pending", "delivered", "retained"):
            cols.append(" / ".join(f"{r[f'{k}_{st}_per_hook']:,.0f}" for st in ("live", "stopped", "flushed", "logical")))
        print(f"| {r['cell']} | {r['body_bytes']} | " + " | ".join(cols) + f" | {pb:,.0f} |")


def main():
    if not os.access(ANKUSA, os.X_OK):
        raise SystemExit(f"sizing: {ANKUSA} missing (BIN_DIR, ANKUSA)")
    for c in CELLS:
        parse_cell(c)
    work = tempfile.mkdtemp(prefix="ankusa-sizing.", dir="/var/tmp")
    log(f"work dir {work}, relay {ANKUSA}, store {STORE}")
    results = []
    try:
        for c in CELLS:
            r = run_cell(work, c)
            line = json.dumps(r, sort_keys=True)
            print(line, flush=True)
            if os.environ.get("OUT"):
                with open(os.environ["OUT"], "a") as f:
                    f.write(line + "\n")
            results.append(r)
    finally:
        if os.environ.get("KEEP"):
            log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    table(results)


if __name__ == "__main__":
    main()
