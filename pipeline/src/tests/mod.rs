//! Tests that step the dispatcher by hand: the bench gate ([`gate`]) and the
//! break-it checks of the dispatcher's scan and claim (the other modules),
//! on the memory engine and a frozen clock, so every count is exact and
//! nothing depends on timing.
//! [`module_graph`] checks that the module graph the crate doc draws is the
//! code's and has no circle.
//!
//! They are unit tests (`#[cfg(test)]`), not integration tests, because they
//! drive the engine step and its stages' state: `Dispatcher::step`, the
//! calls it claimed (`take_calls`), the lane sweep (`sweep_all`), the
//! low-water cursors' reset (`set_low_water_reset`), the calls in flight
//! (`in_flight`), and the `Done` of each call (the test-only doors are
//! `#[cfg(test)]`). A public (even `#[doc(hidden)]`) door to those would let the relay's
//! other crates reach the dispatcher's internals; a test module keeps them
//! private to the crate.
//!
//! The hooks of the break-it checks ([`request`]): one source of one tenant,
//! with a row for a sink whose calls the test holds (SLOW) and one for a sink
//! it answers at the next step (FAST).

use ankusa_keys::{Envelope, SinkIx, SourceId, TenantOrd};
use ankusa_queue::NewRow;
use ankusa_queue::writer::IngestRequest;

use gate::CLOCK_MS;

mod backlog;
mod fairness;
mod gate;
mod horizon;
mod lane_sweep;
mod low_water;
mod module_graph;
mod moved_source;
mod notify;

const TENANT: TenantOrd = TenantOrd(1);
const SOURCE: SourceId = SourceId(1);
const SLOW: SinkIx = SinkIx(0);
const FAST: SinkIx = SinkIx(1);

fn request(n: u64) -> IngestRequest {
    let envelope = Envelope {
        source: SOURCE,
        received_at_ms: CLOCK_MS,
        method: "POST".into(),
        path: "/hooks/s".into(),
        query: None,
        headers: vec![],
        body: format!("{{\"n\":{n}}}").into_bytes(),
        dedupe_key: None,
        idempotency_key: n.to_be_bytes().repeat(2).try_into().expect("16 bytes"),
        replay_of: None,
    };
    IngestRequest {
        tenant: TENANT,
        envelope,
        rows: vec![
            NewRow {
                sink: SLOW,
                lane: None,
            },
            NewRow {
                sink: FAST,
                lane: None,
            },
        ],
        dedupe_ttl_ms: None,
    }
}
