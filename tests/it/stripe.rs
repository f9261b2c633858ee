//! The Stripe corpus as the end-to-end input of every broker and cloud sink
//! (`tests/it/{redis,nats,rabbitmq,sqs,pubsub,kafka}.rs`): a `stripe` source
//! that verifies the corpus signatures and drops provider retries by event id,
//! an ordered sink keyed on `data.object.customer`, and the check of what a
//! broker's consumer got.
//!
//! Round 0 is the eleven corpus files as Stripe signed them (one of them,
//! `invoice_paid_provider_retry.json`, is a provider retry: a dedupe hit that
//! stores nothing). Each further round rewrites the event ids (`corpus00` ->
//! `r<round>corpus00`) and the customer (`cus_QXg1o8vcGmoR32` ->
//! `cus_QXg1o8vcGmoR3<2 + round % 3>`), and signs the new body now with the
//! corpus secret, so rounds give several lanes with several hooks each. The
//! five events whose object has no `customer` field (customer.created,
//! customer.updated, the guest charge, the dispute, the checkout session)
//! resolve no key and share the keyless lane `"default/stripe"`.

use std::collections::{BTreeMap, HashMap};

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use crate::corpus::Hook;
use crate::relay::Relay;

/// The corpus's Stripe signing secret (corpus/README.md).
pub const SECRET: &str = "whsec_corpus_test_secret_0001";
/// The customer of the corpus's invoice and subscription events.
pub const CUSTOMER: &str = "cus_QXg1o8vcGmoR32";
/// The keyless lane's ordering key: `"<tenant>/<source>"` (ADR 0004 section 6).
pub const KEYLESS: &str = "default/stripe";
/// The source's name.
pub const SOURCE: &str = "stripe";

/// The corpus files in the order Stripe created their events (event ids
/// `...corpus0000` to `...corpus0009`; the provider retry right after the
/// event it repeats).
pub const FILES: [&str; 11] = [
    "stripe/customer_created.json",
    "stripe/customer_updated.json",
    "stripe/customer_subscription_created.json",
    "stripe/invoice_created.json",
    "stripe/invoice_finalized.json",
    "stripe/invoice_paid.json",
    "stripe/invoice_paid_provider_retry.json",
    "stripe/payment_intent_succeeded.json",
    "stripe/charge_succeeded_guest.json",
    "stripe/charge_dispute_created.json",
    "stripe/checkout_session_completed.json",
];

/// The provider retry among [`FILES`]: a dedupe hit in every round.
pub const PROVIDER_RETRY: &str = "stripe/invoice_paid_provider_retry.json";

/// Ten years: round 0 keeps the corpus's 2024 signature timestamps.
const TEN_YEARS_MS: u64 = 10 * 365 * 24 * 3600 * 1000;

/// The `sources:` section (a YAML block ending in a newline) with the one
/// source `stripe` (default tenant), Stripe verification with the corpus
/// secret, dedupe on the event id, and `sinks` (a YAML flow sequence, e.g.
/// `[{type: nats, ..., ordered: true, ordering_key: {json: data.object.customer}}]`).
pub fn source_yaml(sinks: &str) -> String {
    format!(
        "sources:\n  - {{name: {SOURCE}, verification: {{type: stripe, secrets: [{SECRET}], tolerance_ms: {TEN_YEARS_MS}}}, dedupe: {{json: id}}, sinks: {sinks}}}\n"
    )
}

/// The corpus hooks of `rounds` rounds (module docs), in send order:
/// `rounds * 11` hooks of which `rounds * 10` are accepted.
pub fn hooks(rounds: usize) -> Vec<Hook> {
    hooks_in(0..rounds)
}

/// The hooks of the rounds in `rounds` (round 0 is the corpus as signed), in
/// send order; for a test that sends batches with distinct event ids.
pub fn hooks_in(rounds: std::ops::Range<usize>) -> Vec<Hook> {
    let corpus: Vec<Hook> = FILES.iter().map(|f| Hook::load(f)).collect();
    let mut out = Vec::new();
    for round in rounds {
        if round == 0 {
            out.extend(corpus.iter().cloned());
            continue;
        }
        let customer = format!("cus_QXg1o8vcGmoR3{}", 2 + round % 3);
        for h in &corpus {
            let text = std::str::from_utf8(&h.body).expect("corpus bodies are UTF-8");
            assert!(
                text.contains("corpus00"),
                "{}: no event id to rewrite",
                h.file
            );
            let body = text
                .replace("corpus00", &format!("r{round}corpus00"))
                .replace(CUSTOMER, &customer)
                .into_bytes();
            let mut headers = h.headers.clone();
            let sig = headers
                .iter_mut()
                .find(|(n, _)| n.eq_ignore_ascii_case("stripe-signature"))
                .unwrap_or_else(|| panic!("{}: no Stripe-Signature", h.file));
            sig.1 = sign(&body, now_ms() / 1000);
            out.push(Hook {
                file: format!("{}#r{round}", h.file),
                headers,
                body,
            });
        }
    }
    out
}

/// A `Stripe-Signature` value for `body` at unix second `t`.
pub fn sign(body: &[u8], t: u64) -> String {
    let mut mac =
        <Hmac<Sha256> as KeyInit>::new_from_slice(SECRET.as_bytes()).expect("any key length");
    mac.update(format!("{t}.").as_bytes());
    mac.update(body);
    let hex: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("t={t},v1={hex}")
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64
}

/// One accepted hook, as the relay answered it.
#[derive(Clone, Debug)]
pub struct Sent {
    /// The corpus file (`#r<round>` for a rewritten one).
    pub file: String,
    /// The idempotency key the relay answered (UUID text).
    pub id: String,
    /// The ordering key the lane must carry: the customer, or [`KEYLESS`].
    pub key: String,
    /// The exact body sent.
    pub body: Vec<u8>,
    /// Unix ms just before the post and just after its answer: the stored
    /// `received_at` lies between.
    pub sent_ms: (u64, u64),
}

/// The ordering key ADR 0004 resolves for `{json: data.object.customer}`.
fn customer_of(body: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    v["data"]["object"]["customer"]
        .as_str()
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

/// Posts `hooks` to `/hooks/stripe` one after the other; every answer must be
/// 200, and exactly the provider retries must be dedupe hits (they answer the
/// first hook's id and are not returned). Returns the accepted hooks in send
/// (= commit = seq) order.
pub async fn send(relay: &Relay, hooks: &[Hook]) -> Vec<Sent> {
    let mut sent = Vec::with_capacity(hooks.len());
    for h in hooks {
        let before = now_ms();
        let a = relay
            .post(
                &format!("/hooks/{SOURCE}"),
                &h.send_headers(),
                h.body.clone(),
            )
            .await;
        let after = now_ms();
        assert_eq!(a.status, 200, "{}: {a:?}", h.file);
        let duplicate = a.body["duplicate"].as_bool() == Some(true);
        assert_eq!(
            duplicate,
            h.file.starts_with(PROVIDER_RETRY),
            "{}: dedupe answer {a:?}",
            h.file
        );
        if duplicate {
            continue;
        }
        sent.push(Sent {
            file: h.file.clone(),
            id: a.id(),
            key: customer_of(&h.body).unwrap_or_else(|| KEYLESS.to_owned()),
            body: h.body.clone(),
            sent_ms: (before, after),
        });
    }
    sent
}

/// One message as a broker's consumer got it: the payload and its
/// attributes/headers as strings (the `ankusa_*` metadata at least).
#[derive(Clone, Debug, Default)]
pub struct Received {
    pub body: Vec<u8>,
    pub attrs: BTreeMap<String, String>,
}

impl Received {
    fn attr(&self, name: &str) -> &str {
        self.attrs.get(name).map_or("<absent>", String::as_str)
    }
}

/// Every sent hook arrived exactly once (by idempotency key), byte for byte,
/// with the metadata of docs/design.md section 6 (`ankusa_message_version` 1, the
/// idempotency key, tenant `default`, source `stripe`, a `received_at`
/// between the post and its answer, and the lane's `ankusa_ordering_key`), and
/// each key's hooks arrived in send order.
pub fn check(sent: &[Sent], received: &[Received]) {
    let dupes = check_at_least_once(sent, received);
    assert_eq!(dupes, 0, "{dupes} hooks arrived more than once");
    assert_eq!(received.len(), sent.len());
}

/// Like [`check`], but a hook may arrive more than once (at-least-once: a
/// publish whose acknowledgement was lost is sent again): each repeat must
/// directly follow an earlier copy within its key's sequence, so the order per
/// key still holds. Returns how many repeats there were.
pub fn check_at_least_once(sent: &[Sent], received: &[Received]) -> usize {
    let by_id: HashMap<&str, &Sent> = sent.iter().map(|s| (s.id.as_str(), s)).collect();
    assert_eq!(
        by_id.len(),
        sent.len(),
        "the relay answered the same id twice"
    );
    let mut arrived: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let mut repeats = 0;
    for (i, r) in received.iter().enumerate() {
        let id = r.attr("ankusa_idempotency_key");
        let s = by_id.get(id).unwrap_or_else(|| {
            panic!(
                "message {i} has an unknown idempotency key {id:?}: {:?}",
                r.attrs
            )
        });
        assert!(
            r.body == s.body,
            "message {i} ({}): the body is not the one sent ({} bytes, sent {})",
            s.file,
            r.body.len(),
            s.body.len()
        );
        assert_eq!(
            r.attr("ankusa_message_version"),
            "1",
            "message {i} ({})",
            s.file
        );
        assert_eq!(
            r.attr("ankusa_tenant"),
            "default",
            "message {i} ({})",
            s.file
        );
        assert_eq!(r.attr("ankusa_source"), SOURCE, "message {i} ({})", s.file);
        assert_eq!(
            r.attr("ankusa_ordering_key"),
            s.key,
            "message {i} ({})",
            s.file
        );
        let at: u64 = r
            .attr("ankusa_received_at")
            .parse()
            .unwrap_or_else(|e| panic!("message {i} ({}): received_at: {e}", s.file));
        assert!(
            s.sent_ms.0 <= at && at <= s.sent_ms.1,
            "message {i} ({}): received_at {at} outside {:?}",
            s.file,
            s.sent_ms
        );
        let seq = arrived.entry(s.key.as_str()).or_default();
        if seq.last() == Some(&s.id.as_str()) {
            repeats += 1;
        } else {
            seq.push(s.id.as_str());
        }
    }
    let mut want: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for s in sent {
        want.entry(s.key.as_str()).or_default().push(s.id.as_str());
    }
    for (key, ids) in &want {
        let got = arrived.get(key).cloned().unwrap_or_default();
        let missing = ids.iter().filter(|id| !got.contains(id)).count();
        assert_eq!(
            missing,
            0,
            "lane {key}: {missing} of {} hooks never arrived",
            ids.len()
        );
        assert_eq!(&got, ids, "lane {key}: arrival order is not send order");
    }
    assert_eq!(arrived.len(), want.len());
    repeats
}

#[test]
fn rounds_rewrite_ids_and_customers_and_sign_again() {
    let hooks = hooks(4);
    assert_eq!(hooks.len(), 44);
    let ids: std::collections::BTreeSet<String> = hooks
        .iter()
        .filter(|h| !h.file.starts_with(PROVIDER_RETRY))
        .map(|h| {
            serde_json::from_slice::<serde_json::Value>(&h.body).expect("json")["id"]
                .as_str()
                .expect("id")
                .to_owned()
        })
        .collect();
    assert_eq!(ids.len(), 40, "event ids must be distinct across rounds");
    let mut keys: BTreeMap<String, usize> = BTreeMap::new();
    for h in &hooks {
        if !h.file.starts_with(PROVIDER_RETRY) {
            *keys
                .entry(customer_of(&h.body).unwrap_or_else(|| KEYLESS.into()))
                .or_default() += 1;
        }
    }
    let want: BTreeMap<String, usize> = [
        (KEYLESS.to_owned(), 20),
        (CUSTOMER.to_owned(), 10),
        ("cus_QXg1o8vcGmoR33".to_owned(), 5),
        ("cus_QXg1o8vcGmoR34".to_owned(), 5),
    ]
    .into();
    assert_eq!(keys, want);
    // Round 0 keeps the corpus signature; the rewritten ones verify with the secret.
    let h = &hooks[11];
    let sig = h.header("stripe-signature").expect("signature");
    let t: u64 = sig
        .strip_prefix("t=")
        .and_then(|s| s.split(',').next())
        .and_then(|t| t.parse().ok())
        .expect("t");
    assert_eq!(sig, sign(&h.body, t));
    assert_ne!(
        hooks[0].header("stripe-signature"),
        Some(sign(&hooks[0].body, t).as_str())
    );
}

/// ADR 0004 section 4 through a broker sink: a dead-lettered head releases its
/// lane. The round-1 `invoice.created` of `cus_QXg1o8vcGmoR33` is refused
/// permanently (the log says `reason`; no retry), then `fix` repairs the
/// destination and the same customer's `invoice.finalized` takes the lane and
/// arrives: `read` consumes what the destination holds, which must be exactly
/// that hook (checked with [`check`]). Returns what `read` got, for the
/// broker's own checks.
pub async fn dead_lettered_head_releases_the_lane(
    relay: &Relay,
    reason: &str,
    fix: impl AsyncFnOnce(),
    read: impl AsyncFnOnce() -> Vec<Received>,
) -> Vec<Received> {
    use std::time::Duration;

    use crate::peer::drained;

    let round = hooks_in(1..2);
    let pick = |file: &str| {
        round
            .iter()
            .find(|h| h.file.starts_with(file))
            .cloned()
            .unwrap_or_else(|| panic!("{file}"))
    };
    let first = send(relay, &[pick("stripe/invoice_created.json")]).await;
    let m = drained(relay, Duration::from_secs(90)).await;
    assert_eq!(m["ankusa_dlq_dead"], 1.0, "{m:?}");
    assert_eq!(m["ankusa_dispatch_dead_lettered_total"], 1.0);
    assert_eq!(
        m["ankusa_dispatch_retries_total"], 0.0,
        "{reason} is permanent, not retried"
    );
    assert_eq!(
        m["ankusa_dispatch_lanes"], 0.0,
        "the dead-lettered head still holds its lane"
    );
    let log = relay.log();
    assert!(
        log.contains(reason) && log.contains("permanent failure: dead-lettered"),
        "{log}"
    );

    fix().await;
    let second = send(relay, &[pick("stripe/invoice_finalized.json")]).await;
    assert_eq!(first[0].key, second[0].key);
    assert_eq!(second[0].key, "cus_QXg1o8vcGmoR33");
    let m = drained(relay, Duration::from_secs(90)).await;
    assert_eq!(m["ankusa_dispatch_delivered_total"], 1.0);
    let got = read().await;
    check(&second, &got);
    got
}

/// A broker down, then back, through a broker sink: rounds 0-1 are delivered,
/// `set_up(false)` takes the destination down, rounds 2-3 are accepted
/// (committed before their 200) and wait in their three lanes (3 heads
/// retrying, the other 17 hooks lane members), `set_up(true)` brings it back
/// within `recovery`, and all 40 are delivered, nothing dead-lettered. Returns
/// the accepted hooks in send order, for the broker's read and [`check`] /
/// [`check_at_least_once`].
pub async fn down_then_back(
    relay: &Relay,
    broker: &str,
    recovery: std::time::Duration,
    mut set_up: impl AsyncFnMut(bool),
) -> Vec<Sent> {
    use std::time::Duration;

    use crate::peer::drained;
    use crate::sink::until;

    let mut sent = send(relay, &hooks_in(0..2)).await;
    drained(relay, Duration::from_secs(90)).await;

    set_up(false).await;
    sent.extend(send(relay, &hooks_in(2..4)).await);
    let m = until(
        &format!("heads retrying while {broker} is down"),
        Duration::from_secs(60),
        async || {
            let m = relay.metrics().await;
            (m["ankusa_dispatch_retries_total"] >= 4.0 && m["ankusa_dispatch_lanes_blocked"] >= 1.0)
                .then_some(m)
        },
    )
    .await;
    assert_eq!(m["ankusa_queue_pending"], 20.0, "{m:?}");
    // Rounds 2-3: customers cus_..34 (5 hooks) and cus_..32 (5), and the
    // keyless lane (10): 3 heads waiting, 17 members behind them.
    assert_eq!(m["ankusa_dispatch_lanes"], 3.0, "{m:?}");
    assert_eq!(m["ankusa_dispatch_lane_members"], 17.0, "{m:?}");
    assert_eq!(
        m.get("ankusa_dispatch_dead_lettered_total")
            .copied()
            .unwrap_or(0.0),
        0.0,
        "{m:?}"
    );

    set_up(true).await;
    let m = drained(relay, recovery).await;
    assert_eq!(sent.len(), 40);
    assert_eq!(
        m.get("ankusa_dispatch_dead_lettered_total")
            .copied()
            .unwrap_or(0.0),
        0.0,
        "{m:?}"
    );
    assert_eq!(m["ankusa_dlq_dead"], 0.0);
    assert_eq!(m["ankusa_dispatch_delivered_total"], 40.0);
    sent
}
