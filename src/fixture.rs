//! `ankusa fixture --format 1|2 OUT_FILE`: builds the store fixture of a
//! format from a scripted scenario and writes it as a dump
//! (`ankusa_engine::dump`; docs/design.md section 8, "Fixtures").
//!
//! Deterministic: the same bytes every run. The scenario runs on the memory
//! engine through the pure batch builders of `queue` and `lanes`, which take
//! the time as an argument: every time is a fixed offset from [`T0_MS`], every
//! idempotency key is a UUIDv7 built from its hook's fixed receive time and
//! seq ([`idempotency_key`]), seqs are assigned 1, 2, ... as the Writer would,
//! and no node id is written (nothing writes one yet: docs/design.md section
//! 3). The checked-in fixtures are `fixtures/store/store-v1.dump` and
//! `store-v2.dump`; `fixtures/store/relay.yaml` is the configuration that
//! names their tenants, sources and sinks (fixtures/README.md).
//!
//! - Format 1 (no lanes; stamped 1): tenant `acme`, source `shop` (sinks
//!   `orders`, `audit`) and tenant `globex`, source `billing` (sink
//!   `ledger`); unordered rows due, claimed (in flight) and waiting out a
//!   retry, dead letters, dedupe records, and a delivered hook.
//!
//! A retried row waits for its last attempt at its retry horizon (a
//! Retry-After beyond it), so a relay started on a fixture years after
//! [`T0_MS`] attempts it instead of dead-lettering it (a retry due before the
//! horizon and claimed after it is dead-lettered: docs/design.md section 5,
//! "Retry policy"); the configuration must keep the default 24 h horizon.
//! - Format 2: the same names, `orders` ordered by `x-entity-id`: lane `A`
//!   busy with its head claimed and two members behind it; lane `B` whose
//!   head waits out a retry (kind 3) with two members behind it; the keyless
//!   lane (hooks without the header) with its head due and a member; a lane
//!   whose head was dead-lettered (released); the `audit` rows of every hook
//!   (due, claimed, retrying, dead); `billing`'s rows; a quarantined hook.

use std::path::Path;
use std::process::ExitCode;

use ankusa_engine::memory::MemoryKv;
use ankusa_engine::{Batch, Cf, Direction, Durability, Kv, Read, scan_pages};
use ankusa_keys::meta::{
    encode_format, encode_seq_high_water, encode_sink_names, source_sinks_key,
};
use ankusa_keys::{
    DueKey, Envelope, FORMAT_KEY, ORIGIN_KEY, SEQ_HIGH_WATER_KEY, Seq, SinkIx, SourceId, TenantOrd,
    live_due_range,
};
use ankusa_queue::{Hook, NewRow, RowId, lanes};
use anyhow::{Context, anyhow};

/// The fixed clock of every fixture: 2023-11-14T22:13:20Z, unix milliseconds.
pub const T0_MS: u64 = 1_700_000_000_000;
/// How long a dedupe record of a fixture hook lasts (one day).
const DEDUPE_MS: u64 = 86_400_000;
/// The retry horizon the fixtures' retried rows are due at: the default
/// `retry.max_elapsed_ms` (24 h), which fixtures/store/relay.yaml keeps.
const HORIZON_MS: u64 = 86_400_000;

/// The UUIDv7 idempotency key of fixture hook `seq` received at
/// `received_at_ms`: the 48-bit time, version 7, `seq` in the random bits
/// (RFC 9562 section 5.7, with a counter in place of randomness).
pub fn idempotency_key(received_at_ms: u64, seq: u64) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..6].copy_from_slice(&received_at_ms.to_be_bytes()[2..]);
    b[6] = 0x70;
    b[8..].copy_from_slice(&(seq | (0x80u64 << 56)).to_be_bytes());
    b
}

/// The scenario's store: the memory engine and its clock of fixed steps.
struct Script {
    kv: MemoryKv,
    format: u32,
    seq: u64,
    now_ms: u64,
}

/// A hook the scenario ingested: its tenant and seq.
struct Sent {
    tenant: TenantOrd,
    seq: Seq,
}

impl Script {
    fn write(&self, batch: Batch) -> anyhow::Result<()> {
        self.kv.write(batch, Durability::Sync)?;
        Ok(())
    }

    /// The clock moves one second per step.
    fn tick(&mut self) -> u64 {
        self.now_ms += 1_000;
        self.now_ms
    }

    /// Ingests a hook of `source` (path `/hooks/<path>`) for `tenant` with an
    /// `x-entity-id` of `key` (none when `None`) and a JSON body naming the
    /// key and `i`; `rows` are its delivery rows (a laned row through
    /// `lanes::assign`).
    #[allow(clippy::too_many_arguments)]
    fn ingest(
        &mut self,
        tenant: TenantOrd,
        source: SourceId,
        path: &str,
        key: Option<&str>,
        i: u32,
        rows: &[(u16, bool)],
        quarantine: Option<&str>,
    ) -> anyhow::Result<Sent> {
        let now = self.tick();
        self.seq += 1;
        let seq = Seq(self.seq);
        let label = key.unwrap_or("-");
        let mut headers = vec![(b"content-type".to_vec(), b"application/json".to_vec())];
        if let Some(k) = key {
            headers.push((b"x-entity-id".to_vec(), k.as_bytes().to_vec()));
        }
        let delivery_id = format!("fx-{}-{}", self.format, self.seq);
        headers.push((b"x-delivery-id".to_vec(), delivery_id.as_bytes().to_vec()));
        let envelope = Envelope {
            source,
            received_at_ms: now,
            method: "POST".to_owned(),
            path: format!("/hooks/{path}"),
            query: None,
            headers,
            body: format!(
                "{{\"fixture\":{},\"key\":\"{label}\",\"i\":{i}}}",
                self.format
            )
            .into_bytes(),
            dedupe_key: quarantine.is_none().then(|| delivery_id.into_bytes()),
            idempotency_key: idempotency_key(now, self.seq),
            replay_of: None,
        };
        let hook = Hook {
            tenant,
            seq,
            envelope: &envelope,
            dedupe_expires_at_ms: now + DEDUPE_MS,
        };
        let mut batch = Batch::new();
        match quarantine {
            Some(reason) => ankusa_queue::quarantine(&mut batch, &hook, reason),
            None => {
                let rows: Vec<NewRow> = rows
                    .iter()
                    .map(|&(sink, ordered)| NewRow {
                        sink: SinkIx(sink),
                        lane: ordered
                            .then(|| lanes::assign(SinkIx(sink), source, key.map(str::as_bytes))),
                    })
                    .collect();
                ankusa_queue::new_ops(&mut batch, &hook, &rows, now);
            }
        }
        batch.put(Cf::Meta, SEQ_HIGH_WATER_KEY, encode_seq_high_water(seq));
        self.write(batch)?;
        Ok(Sent { tenant, seq })
    }

    /// The ?D key of `row` (the scenario's store is small: a scan of the
    /// tenant's due rows).
    fn due_of(&self, row: RowId) -> anyhow::Result<DueKey> {
        for kv in scan_pages(
            &self.kv,
            Cf::Index,
            live_due_range(row.tenant),
            Direction::Forward,
            256,
        ) {
            let (k, _) = kv?;
            let d = DueKey::decode(&k)?;
            if d.seq == row.seq && d.sink == row.sink {
                return Ok(d);
            }
        }
        Err(anyhow!("row {row} is not due"))
    }

    /// Promotes the first member of the lane of `row`'s sink and `key` (the
    /// lane sweep's step, ADR 4.2).
    fn promote(
        &mut self,
        tenant: TenantOrd,
        source: SourceId,
        sink: u16,
        key: Option<&str>,
    ) -> anyhow::Result<()> {
        let now = self.tick();
        let lane = lanes::lane_id(SinkIx(sink), source, key.map(str::as_bytes));
        let member = lanes::first_member(&self.kv, tenant, lane)?
            .ok_or_else(|| anyhow!("lane of {key:?} has no member"))?;
        let mut batch = Batch::new();
        lanes::promote(&self.kv, &mut batch, &member, now)?;
        self.write(batch)
    }

    fn claim(&mut self, row: RowId) -> anyhow::Result<()> {
        let now = self.tick();
        let due = self.due_of(row)?;
        let b = ankusa_queue::claim(&self.kv, due, now)?;
        self.write(b)
    }

    /// Claims `row`, then its attempt fails with `error` and a Retry-After
    /// beyond the retry horizon, so its next attempt is due at the horizon
    /// ([`HORIZON_MS`] after the claim: the last attempt, which a relay makes
    /// however late it starts; a retry due before the horizon would be
    /// dead-lettered by a relay started more than a day after [`T0_MS`]).
    fn retry(&mut self, row: RowId, error: &str) -> anyhow::Result<()> {
        self.claim(row)?;
        let claimed = self.now_ms;
        let now = self.tick();
        let b = ankusa_queue::retry(&self.kv, row, claimed + HORIZON_MS, error, now)?;
        self.write(b)
    }

    fn deliver(&mut self, row: RowId) -> anyhow::Result<()> {
        self.claim(row)?;
        let now = self.tick();
        let b = ankusa_queue::delivered(&self.kv, row, now)?;
        self.write(b)
    }

    fn dead(&mut self, row: RowId, reason: &str) -> anyhow::Result<()> {
        self.claim(row)?;
        let now = self.tick();
        let b = ankusa_queue::dead_letter_attempted(&self.kv, row, reason, now)?;
        self.write(b)
    }
}

fn row(h: &Sent, sink: u16) -> RowId {
    RowId::new(h.tenant, h.seq, SinkIx(sink))
}

/// The names of the scenario (fixtures/store/relay.yaml configures them).
const TENANTS: [&str; 2] = ["acme", "globex"];
const SOURCES: [&str; 2] = ["shop", "billing"];

/// Runs the scenario of `format` (1 or 2) on a new memory store.
///
/// # Errors
/// A builder's error (a bug of the scenario), or a format other than 1 and 2.
fn build(format: u32) -> anyhow::Result<MemoryKv> {
    if !(1..=2).contains(&format) {
        return Err(anyhow!(
            "no fixture of store format {format} (this ankusa builds 1 and 2)"
        ));
    }
    let mut s = Script {
        kv: MemoryKv::new(),
        format,
        seq: 0,
        now_ms: T0_MS,
    };
    s.write(ankusa_queue::init_store())?;
    let (batch, reg) = ankusa_queue::register(&s.kv, TENANTS, SOURCES)?;
    s.write(batch)?;
    let (acme, globex) = (reg.tenants["acme"], reg.tenants["globex"]);
    let (shop, billing) = (reg.sources["shop"], reg.sources["billing"]);
    if format == 1 {
        // A format 1 store is a format 2 store without lanes apart from its
        // stamp (ADR 0004 section 5); the sink lists of `unconfigured` came
        // later and are not in it.
        let mut b = Batch::new();
        b.put(Cf::Meta, FORMAT_KEY, encode_format(1));
        s.write(b)?;
        let both = [(0, false), (1, false)];
        let mut shop_hooks = Vec::new();
        for i in 0..6 {
            let key = ["A", "B"][i as usize % 2];
            shop_hooks.push(s.ingest(acme, shop, "shop", Some(key), i, &both, None)?);
        }
        let bill: Vec<Sent> = (0..3)
            .map(|i| s.ingest(globex, billing, "billing", None, i, &[(0, false)], None))
            .collect::<Result<_, _>>()?;
        s.claim(row(&shop_hooks[0], 0))?;
        s.claim(row(&shop_hooks[1], 1))?;
        s.retry(
            row(&shop_hooks[2], 0),
            "HTTP 503 with Retry-After: 172800 from the fixture's sink",
        )?;
        s.dead(row(&shop_hooks[3], 1), "HTTP 410 from the fixture's sink")?;
        s.deliver(row(&shop_hooks[4], 1))?;
        s.claim(row(&bill[0], 0))?;
        s.dead(row(&bill[1], 0), "HTTP 400 from the fixture's sink")?;
    } else {
        let mut b = Batch::new();
        b.put(
            Cf::Meta,
            source_sinks_key(shop),
            encode_sink_names(&["orders", "audit"]),
        );
        b.put(
            Cf::Meta,
            source_sinks_key(billing),
            encode_sink_names(&["ledger"]),
        );
        s.write(b)?;
        let both = [(0, true), (1, false)];
        let a: Vec<Sent> = (0..3)
            .map(|i| s.ingest(acme, shop, "shop", Some("A"), i, &both, None))
            .collect::<Result<_, _>>()?;
        let bb: Vec<Sent> = (0..3)
            .map(|i| s.ingest(acme, shop, "shop", Some("B"), i, &both, None))
            .collect::<Result<_, _>>()?;
        let k: Vec<Sent> = (0..2)
            .map(|i| s.ingest(acme, shop, "shop", None, i, &both, None))
            .collect::<Result<_, _>>()?;
        let d = s.ingest(acme, shop, "shop", Some("D"), 0, &both, None)?;
        s.ingest(
            acme,
            shop,
            "shop",
            Some("Q"),
            0,
            &both,
            Some("signature did not verify (fixture)"),
        )?;
        let bill: Vec<Sent> = (0..2)
            .map(|i| s.ingest(globex, billing, "billing", None, i, &[(0, false)], None))
            .collect::<Result<_, _>>()?;
        // Lane A: busy, its head claimed (in flight), A1 and A2 behind it.
        s.promote(acme, shop, 0, Some("A"))?;
        s.claim(row(&a[0], 0))?;
        // Lane B: its head waits out a retry (kind 3), B1 and B2 behind it.
        s.promote(acme, shop, 0, Some("B"))?;
        s.retry(
            row(&bb[0], 0),
            "HTTP 503 with Retry-After: 172800 from the fixture's sink",
        )?;
        // The keyless lane: its head due (kind 2), K1 behind it.
        s.promote(acme, shop, 0, None)?;
        // Lane D: its head dead-lettered, which released the lane.
        s.promote(acme, shop, 0, Some("D"))?;
        s.dead(row(&d, 0), "HTTP 410 from the fixture's sink")?;
        // The unordered audit sink: one claimed, one retrying, one delivered.
        s.claim(row(&a[1], 1))?;
        s.retry(
            row(&bb[1], 1),
            "HTTP 429 with Retry-After: 172800 from the fixture's sink",
        )?;
        s.deliver(row(&k[0], 1))?;
        // billing: one claimed.
        s.claim(row(&bill[0], 0))?;
    }
    let violations = ankusa_queue::check_invariants(&s.kv)?;
    if !violations.is_empty() {
        return Err(anyhow!("the fixture breaks invariants: {violations:?}"));
    }
    Ok(s.kv)
}

/// The dump of the fixture of `format`, as bytes.
///
/// # Errors
/// As [`build`].
pub fn dump(format: u32) -> anyhow::Result<Vec<u8>> {
    let kv = build(format)?;
    let mut out = Vec::new();
    ankusa_engine::dump::export(
        &kv.snapshot(),
        kv.backend(),
        format,
        ORIGIN_KEY,
        &mut out,
        &mut |_, _| {},
    )?;
    debug_assert!(kv.get(Cf::Meta, ORIGIN_KEY).ok().flatten().is_none());
    Ok(out)
}

/// `ankusa fixture --format N OUT_FILE`: exit 0 written, 2 an unknown format
/// or OUT_FILE cannot be written.
pub fn main(format: u32, out: &Path) -> ExitCode {
    let r = dump(format).and_then(|bytes| {
        std::fs::write(out, &bytes)
            .with_context(|| format!("{}: cannot write", out.display()))
            .map(|()| bytes.len())
    });
    match r {
        Ok(n) => {
            println!(
                "{}: store fixture of format {format} ({n} bytes)",
                out.display()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("ankusa fixture: {e:#}");
            ExitCode::from(2)
        }
    }
}
