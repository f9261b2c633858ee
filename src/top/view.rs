//! What `ankusa top` shows, computed from two readings ([`View::compute`]:
//! rates are counter deltas divided by the time between the readings), and
//! how it is drawn ([`render`]: one ratatui frame). Pure: no I/O, no clock;
//! the caller passes the elapsed time and the state of the link.

use ratatui::Frame;
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::buffer::{Buffer, CellWidth};
use ratatui::layout::{Constraint, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Cell, Paragraph, Row, Table};

use super::snapshot::Snapshot;

/// The outcomes of `ankusa_dispatch_attempts_total` that dead-letter the row
/// (README, "What to watch"); the others are `delivered` and `retry`.
pub const DEAD_OUTCOMES: [&str; 5] = [
    "horizon_passed",
    "permanent",
    "sink_gone",
    "source_gone",
    "retired",
];

/// Per second, of a counter read as `prev` then `cur` `elapsed_ms` apart.
/// `None` without a previous reading or with no time between the two. A
/// counter lower than before was reset (the relay restarted): it counts from
/// 0, so the delta is `cur`. The store's counters are [`stored_rate`]'s.
pub fn rate(prev: Option<f64>, cur: f64, elapsed_ms: u64) -> Option<f64> {
    let prev = prev?;
    if elapsed_ms == 0 {
        return None;
    }
    let delta = if cur >= prev { cur - prev } else { cur };
    Some(delta * 1000.0 / elapsed_ms as f64)
}

/// Per second, as [`rate`], of a counter the store keeps
/// (`ankusa_dispatch_{delivered,retries,dead_lettered}_total`, a tenant's
/// `delivered_total`): it survives a restart, and purging a tenant
/// subtracts that tenant's counts from the node's (docs/design.md section
/// 5, "Purge a tenant"). A reading lower than the one before is such a
/// purge (or another store), not a reset to 0: how much was counted in
/// between is unknown, so `None` (shown `-`) rather than a rate made of the
/// whole remaining total.
pub fn stored_rate(prev: Option<f64>, cur: f64, elapsed_ms: u64) -> Option<f64> {
    if prev.is_some_and(|p| cur < p) {
        return None;
    }
    rate(prev, cur, elapsed_ms)
}

/// Where the figures come from and whether they are current.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Header {
    /// The admin listener's address (`--admin`).
    pub admin: String,
    /// Time between two readings, ms (`--interval-ms`).
    pub interval_ms: u64,
    /// Interactive (a key hint is shown) or one plain-text frame.
    pub interactive: bool,
    /// The state of the link to the relay.
    pub link: Link,
}

/// Whether the last reading succeeded.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Link {
    /// The figures are from the last reading.
    #[default]
    Live,
    /// The readings fail (the relay is unreachable, refuses the token, or
    /// answers what `top` cannot read): the figures are from the last
    /// reading that succeeded.
    Lost {
        /// The last failure's message.
        error: String,
        /// Since the first failure, ms.
        for_ms: u64,
    },
}

/// Node-wide figures: the maintained gauges of `/metrics` (`None` when the
/// series is missing) and the rates of its node counters.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Node {
    /// `ankusa_queue_pending`.
    pub pending: Option<f64>,
    /// `ankusa_dispatch_in_flight`.
    pub in_flight: Option<f64>,
    /// `ankusa_dispatch_lanes`.
    pub lanes: Option<f64>,
    /// `ankusa_dispatch_lanes_blocked`.
    pub lanes_blocked: Option<f64>,
    /// `ankusa_dispatch_lanes_held`.
    pub lanes_held: Option<f64>,
    /// `ankusa_dispatch_lane_members`.
    pub lane_members: Option<f64>,
    /// `ankusa_dlq_dead`.
    pub dead: Option<f64>,
    /// `ankusa_quarantined`.
    pub quarantined: Option<f64>,
    /// `ankusa_dispatch_oldest_due_age_seconds`, in seconds.
    pub oldest_due_age_s: Option<f64>,
    /// `ankusa_dispatch_paused`: sink entries paused now.
    pub paused: Option<f64>,
    /// `ankusa_dispatch_breakers{state="open"}`, every sink kind.
    pub open_breakers: Option<f64>,
    /// `ankusa_ingest_accepted_total` per second.
    pub accepted_per_s: Option<f64>,
    /// `ankusa_dispatch_delivered_total` per second.
    pub delivered_per_s: Option<f64>,
    /// `ankusa_dispatch_retries_total` per second.
    pub retries_per_s: Option<f64>,
    /// `ankusa_dispatch_dead_lettered_total` per second.
    pub dead_lettered_per_s: Option<f64>,
}

/// One source's requests (`ankusa_ingest_requests_total{source,code}`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct IngestRow {
    /// The `source` label (`_none`: a path no source has).
    pub source: String,
    /// Requests per second, every code.
    pub per_s: Option<f64>,
    /// 2xx per second.
    pub ok_per_s: Option<f64>,
    /// 4xx per second.
    pub client_error_per_s: Option<f64>,
    /// 5xx per second.
    pub server_error_per_s: Option<f64>,
    /// 2xx since the relay started.
    pub ok: u64,
    /// 4xx since the relay started.
    pub client_error: u64,
    /// 5xx since the relay started.
    pub server_error: u64,
}

/// One sink kind's attempts (`ankusa_dispatch_attempts_total{sink,outcome}`)
/// and its entries (`GET /v1/sources`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DeliveryRow {
    /// The sink kind (`http`, `file`, `sqs`, ...).
    pub kind: String,
    /// Sink entries of this kind in the configuration.
    pub entries: usize,
    /// Of them, paused now.
    pub paused: usize,
    /// `delivered` attempts per second.
    pub delivered_per_s: Option<f64>,
    /// `retry` attempts per second.
    pub retry_per_s: Option<f64>,
    /// Attempts that dead-lettered their row ([`DEAD_OUTCOMES`]) per second.
    pub dead_per_s: Option<f64>,
    /// `delivered` attempts since the relay started.
    pub delivered: u64,
    /// `retry` attempts since the relay started.
    pub retries: u64,
    /// Dead-lettering attempts since the relay started.
    pub dead: u64,
    /// Open breakers (`ankusa_dispatch_breakers{sink,state="open"}`).
    pub open_breakers: u64,
}

/// One tenant (`GET /v1/tenants`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TenantRow {
    /// The tenant's name.
    pub name: String,
    /// Rows pending.
    pub pending: i64,
    /// Rows in flight.
    pub in_flight: i64,
    /// Busy lanes.
    pub lanes: i64,
    /// Lanes whose head waits for a retry.
    pub lanes_blocked: i64,
    /// Lanes held by a dead letter until it is revived or dropped.
    pub lanes_held: i64,
    /// Dead letters.
    pub dead: i64,
    /// Hooks held in quarantine.
    pub quarantined: i64,
    /// Age of its oldest due row, ms (`None`: nothing due).
    pub oldest_due_age_ms: Option<u64>,
    /// Rows delivered per second (its `delivered_total` counter).
    pub delivered_per_s: Option<f64>,
}

/// Everything one frame shows.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct View {
    /// The title and status lines.
    pub header: Header,
    /// Node-wide figures.
    pub node: Node,
    /// One row per source: the configured ones in name order, then any
    /// other `source` label of the series (`_none`), in name order.
    pub ingest: Vec<IngestRow>,
    /// One row per sink kind, configured or seen in the series, in name order.
    pub delivery: Vec<DeliveryRow>,
    /// One row per tenant, in the API's order.
    pub tenants: Vec<TenantRow>,
}

/// A count of a series as a whole number (counters and counts are).
fn whole(v: Option<f64>) -> u64 {
    v.map_or(0, |v| {
        if v.is_finite() && v > 0.0 {
            v.round() as u64
        } else {
            0
        }
    })
}

impl View {
    /// The figures of reading `cur`, with rates against `prev` taken
    /// `elapsed_ms` before it (no previous reading: every rate is `None`). A
    /// series missing from `prev` but present in `cur` appeared since (a
    /// series appears with its first event): it counted from 0. The header
    /// is the default; the caller sets it.
    pub fn compute(prev: Option<&Snapshot>, cur: &Snapshot, elapsed_ms: u64) -> View {
        let m = &cur.metrics;
        // The rate of the sum of `name{filter}`.
        let rate_of = |name: &str, filter: &[(&str, &str)]| -> Option<f64> {
            let now = m.sum(name, filter).unwrap_or(0.0);
            rate(
                prev.map(|p| p.metrics.sum(name, filter).unwrap_or(0.0)),
                now,
                elapsed_ms,
            )
        };
        // The same of a counter the store keeps ([`stored_rate`]).
        let stored_rate_of = |name: &str| -> Option<f64> {
            let now = m.sum(name, &[]).unwrap_or(0.0);
            stored_rate(
                prev.map(|p| p.metrics.sum(name, &[]).unwrap_or(0.0)),
                now,
                elapsed_ms,
            )
        };
        let node = Node {
            pending: m.value("ankusa_queue_pending"),
            in_flight: m.value("ankusa_dispatch_in_flight"),
            lanes: m.value("ankusa_dispatch_lanes"),
            lanes_blocked: m.value("ankusa_dispatch_lanes_blocked"),
            lanes_held: m.value("ankusa_dispatch_lanes_held"),
            lane_members: m.value("ankusa_dispatch_lane_members"),
            dead: m.value("ankusa_dlq_dead"),
            quarantined: m.value("ankusa_quarantined"),
            oldest_due_age_s: m.value("ankusa_dispatch_oldest_due_age_seconds"),
            paused: m.value("ankusa_dispatch_paused"),
            open_breakers: m.sum("ankusa_dispatch_breakers", &[("state", "open")]),
            accepted_per_s: rate_of("ankusa_ingest_accepted_total", &[]),
            delivered_per_s: stored_rate_of("ankusa_dispatch_delivered_total"),
            retries_per_s: stored_rate_of("ankusa_dispatch_retries_total"),
            dead_lettered_per_s: stored_rate_of("ankusa_dispatch_dead_lettered_total"),
        };

        // Sources: the configured ones, then other labels of the series.
        let mut sources: Vec<String> = cur.sources.clone();
        let mut others: Vec<String> = m
            .matching("ankusa_ingest_requests_total", &[])
            .filter_map(|s| s.label("source"))
            .filter(|s| !cur.sources.iter().any(|c| c == s))
            .map(str::to_owned)
            .collect();
        others.sort();
        others.dedup();
        sources.extend(others);
        // The requests of one source whose code is in `class` (1 = 1xx, ...;
        // 0 = every code), now and in `snap`.
        let requests = |snap: &Snapshot, source: &str, class: u8| -> f64 {
            snap.metrics
                .matching("ankusa_ingest_requests_total", &[("source", source)])
                .filter(|s| {
                    class == 0
                        || s.label("code")
                            .is_some_and(|c| c.len() == 3 && c.as_bytes()[0] == b'0' + class)
                })
                .map(|s| s.value)
                .sum()
        };
        let ingest = sources
            .into_iter()
            .map(|source| {
                let r = |class: u8| {
                    rate(
                        prev.map(|p| requests(p, &source, class)),
                        requests(cur, &source, class),
                        elapsed_ms,
                    )
                };
                IngestRow {
                    per_s: r(0),
                    ok_per_s: r(2),
                    client_error_per_s: r(4),
                    server_error_per_s: r(5),
                    ok: whole(Some(requests(cur, &source, 2))),
                    client_error: whole(Some(requests(cur, &source, 4))),
                    server_error: whole(Some(requests(cur, &source, 5))),
                    source,
                }
            })
            .collect();

        // Sink kinds: configured, or a `sink` label of the attempts.
        let mut kinds: Vec<String> = cur.sinks.iter().map(|e| e.kind.clone()).collect();
        kinds.extend(
            m.matching("ankusa_dispatch_attempts_total", &[])
                .filter_map(|s| s.label("sink"))
                .map(str::to_owned),
        );
        kinds.sort();
        kinds.dedup();
        let attempts = |snap: &Snapshot, kind: &str, outcomes: &[&str]| -> f64 {
            outcomes
                .iter()
                .map(|o| {
                    snap.metrics
                        .sum(
                            "ankusa_dispatch_attempts_total",
                            &[("sink", kind), ("outcome", o)],
                        )
                        .unwrap_or(0.0)
                })
                .sum()
        };
        let delivery = kinds
            .into_iter()
            .map(|kind| {
                let r = |outcomes: &[&str]| {
                    rate(
                        prev.map(|p| attempts(p, &kind, outcomes)),
                        attempts(cur, &kind, outcomes),
                        elapsed_ms,
                    )
                };
                DeliveryRow {
                    entries: cur.sinks.iter().filter(|e| e.kind == kind).count(),
                    paused: cur
                        .sinks
                        .iter()
                        .filter(|e| e.kind == kind && e.paused)
                        .count(),
                    delivered_per_s: r(&["delivered"]),
                    retry_per_s: r(&["retry"]),
                    dead_per_s: r(&DEAD_OUTCOMES),
                    delivered: whole(Some(attempts(cur, &kind, &["delivered"]))),
                    retries: whole(Some(attempts(cur, &kind, &["retry"]))),
                    dead: whole(Some(attempts(cur, &kind, &DEAD_OUTCOMES))),
                    open_breakers: whole(m.sum(
                        "ankusa_dispatch_breakers",
                        &[("sink", &kind), ("state", "open")],
                    )),
                    kind,
                }
            })
            .collect();

        let tenants = cur
            .tenants
            .iter()
            .map(|t| {
                let before = prev.map(|p| {
                    p.tenants
                        .iter()
                        .find(|b| b.name == t.name)
                        .map_or(0.0, |b| b.delivered_total as f64)
                });
                TenantRow {
                    name: t.name.clone(),
                    pending: t.pending,
                    in_flight: t.in_flight,
                    lanes: t.lanes,
                    lanes_blocked: t.lanes_blocked,
                    lanes_held: t.lanes_held,
                    dead: t.dead,
                    quarantined: t.quarantined,
                    oldest_due_age_ms: t.oldest_due_age_ms,
                    delivered_per_s: stored_rate(before, t.delivered_total as f64, elapsed_ms),
                }
            })
            .collect();
        View {
            header: Header::default(),
            node,
            ingest,
            delivery,
            tenants,
        }
    }

    /// The rows the whole view takes: five header lines, then each table
    /// (its column heads and one line a row) after a blank line.
    pub fn height(&self) -> u16 {
        let rows = 5 + 3 + 3 + self.ingest.len() + self.delivery.len() + self.tenants.len();
        u16::try_from(rows).unwrap_or(u16::MAX)
    }
}

/// A rate: one decimal, `-` when there is none yet.
pub fn fmt_rate(r: Option<f64>) -> String {
    r.map_or_else(|| "-".to_owned(), |r| format!("{r:.1}"))
}

/// A gauge as a whole number, `-` when the series is missing.
fn fmt_gauge(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{v:.0}"))
}

/// An age: `4.2s` under a minute, `12m05s` under an hour, `3h07m` above;
/// `-` for none.
pub fn fmt_age_ms(ms: Option<u64>) -> String {
    match ms {
        None => "-".to_owned(),
        Some(ms) if ms < 60_000 => format!("{:.1}s", ms as f64 / 1000.0),
        Some(ms) if ms < 3_600_000 => format!("{}m{:02}s", ms / 60_000, ms / 1000 % 60),
        Some(ms) => format!("{}h{:02}m", ms / 3_600_000, ms / 60_000 % 60),
    }
}

/// A column head and its width in cells.
type Col = (&'static str, u16);

const INGEST_COLS: [Col; 8] = [
    ("SOURCE", 16),
    ("REQ/S", 8),
    ("2XX/S", 8),
    ("4XX/S", 8),
    ("5XX/S", 8),
    ("2XX", 9),
    ("4XX", 9),
    ("5XX", 9),
];
const DELIVERY_COLS: [Col; 10] = [
    ("SINK KIND", 10),
    ("ENTRIES", 7),
    ("PAUSED", 6),
    ("DELIV/S", 8),
    ("RETRY/S", 8),
    ("DEAD/S", 8),
    ("DELIVERED", 9),
    ("RETRIES", 9),
    ("DEAD", 9),
    ("OPEN BRK", 8),
];
const TENANT_COLS: [Col; 10] = [
    ("TENANT", 16),
    ("PENDING", 9),
    ("IN FLIGHT", 9),
    ("LANES", 7),
    ("BLOCKED", 7),
    ("HELD", 5),
    ("DEAD", 9),
    ("QUARANTINED", 11),
    ("OLDEST DUE", 10),
    ("DELIV/S", 8),
];

/// A table of the columns that fit in `width` (at least the first; the
/// others keep their widths, so a narrow frame cuts the last columns rather
/// than squeezing all of them): the first column left-aligned, the others
/// right-aligned, the heads bold.
fn table(cols: &[Col], width: u16, rows: Vec<Vec<String>>) -> Table<'static> {
    let mut used = 0u16;
    let fit = cols
        .iter()
        .take_while(|(_, w)| {
            let next = used.saturating_add(*w);
            let fits = used == 0 || next <= width;
            used = next.saturating_add(1);
            fits
        })
        .count();
    let cols = &cols[..fit];
    let cell = |i: usize, text: String| {
        let line = Line::from(text);
        Cell::from(if i == 0 { line } else { line.right_aligned() })
    };
    let head = Row::new(
        cols.iter()
            .enumerate()
            .map(|(i, (h, _))| cell(i, (*h).to_owned())),
    )
    .style(Style::new().add_modifier(Modifier::BOLD));
    let rows: Vec<Row> = rows
        .into_iter()
        .map(|r| Row::new(r.into_iter().take(fit).enumerate().map(|(i, c)| cell(i, c))))
        .collect();
    Table::new(rows, cols.iter().map(|(_, w)| Constraint::Length(*w))).header(head)
}

/// Draws `view` on `frame`, top to bottom: the title, the link's state, the
/// node's gauges and rates, then the ingest, delivery and tenant tables; a
/// frame too short for all of it cuts the last rows.
pub fn render(view: &View, frame: &mut Frame) {
    let area = frame.area();
    let h = &view.header;
    let interval = if h.interval_ms.is_multiple_of(1000) {
        format!("{} s", h.interval_ms / 1000)
    } else {
        format!("{} ms", h.interval_ms)
    };
    let mut title = vec![
        Span::styled("ankusa top", Style::new().add_modifier(Modifier::BOLD)),
        Span::raw(format!("  {}  every {interval}", h.admin)),
    ];
    if h.interactive {
        title.push(Span::raw("  (q, Esc: quit)"));
    }
    // A lost link: the status line says so, and the line below the header
    // (blank otherwise) says why, with the width of the frame for it.
    let (status, why) = match &h.link {
        Link::Live => (
            Line::from(vec![
                Span::raw("relay: "),
                Span::styled("live", Style::new().fg(Color::Green)),
            ]),
            None,
        ),
        Link::Lost { error, for_ms } => (
            Line::from(vec![
                Span::raw("relay: "),
                Span::styled(
                    format!("NO ANSWER for {}", fmt_age_ms(Some(*for_ms))),
                    Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
                ),
                Span::raw(" (the figures are from the last answer)"),
            ]),
            Some(Line::styled(error.clone(), Style::new().fg(Color::Red))),
        ),
    };
    let n = &view.node;
    let rows = format!(
        "rows:  pending {}  in flight {}  dead {}  quarantined {}  oldest due {}",
        fmt_gauge(n.pending),
        fmt_gauge(n.in_flight),
        fmt_gauge(n.dead),
        fmt_gauge(n.quarantined),
        fmt_age_ms(n.oldest_due_age_s.map(|s| if s.is_finite() && s > 0.0 {
            (s * 1000.0).round() as u64
        } else {
            0
        })),
    );
    let lanes = format!(
        "lanes: {} busy  {} blocked  {} held  {} members   sinks: {} paused  {} open breakers",
        fmt_gauge(n.lanes),
        fmt_gauge(n.lanes_blocked),
        fmt_gauge(n.lanes_held),
        fmt_gauge(n.lane_members),
        fmt_gauge(n.paused),
        fmt_gauge(n.open_breakers),
    );
    let rates = format!(
        "per s: accepted {}  delivered {}  retries {}  dead-lettered {}",
        fmt_rate(n.accepted_per_s),
        fmt_rate(n.delivered_per_s),
        fmt_rate(n.retries_per_s),
        fmt_rate(n.dead_lettered_per_s),
    );
    let mut head = vec![
        Line::from(title),
        status,
        Line::from(rows),
        Line::from(lanes),
        Line::from(rates),
    ];
    head.extend(why);
    let head = Paragraph::new(head);

    let ingest = table(
        &INGEST_COLS,
        area.width,
        view.ingest
            .iter()
            .map(|r| {
                vec![
                    r.source.clone(),
                    fmt_rate(r.per_s),
                    fmt_rate(r.ok_per_s),
                    fmt_rate(r.client_error_per_s),
                    fmt_rate(r.server_error_per_s),
                    r.ok.to_string(),
                    r.client_error.to_string(),
                    r.server_error.to_string(),
                ]
            })
            .collect(),
    );
    let delivery = table(
        &DELIVERY_COLS,
        area.width,
        view.delivery
            .iter()
            .map(|r| {
                vec![
                    r.kind.clone(),
                    r.entries.to_string(),
                    r.paused.to_string(),
                    fmt_rate(r.delivered_per_s),
                    fmt_rate(r.retry_per_s),
                    fmt_rate(r.dead_per_s),
                    r.delivered.to_string(),
                    r.retries.to_string(),
                    r.dead.to_string(),
                    r.open_breakers.to_string(),
                ]
            })
            .collect(),
    );
    let tenants = table(
        &TENANT_COLS,
        area.width,
        view.tenants
            .iter()
            .map(|t| {
                vec![
                    t.name.clone(),
                    t.pending.to_string(),
                    t.in_flight.to_string(),
                    t.lanes.to_string(),
                    t.lanes_blocked.to_string(),
                    t.lanes_held.to_string(),
                    t.dead.to_string(),
                    t.quarantined.to_string(),
                    fmt_age_ms(t.oldest_due_age_ms),
                    fmt_rate(t.delivered_per_s),
                ]
            })
            .collect(),
    );

    // Each part below the one before, a blank line between the tables; what
    // does not fit is cut.
    let mut y = area.y;
    let bottom = area.y.saturating_add(area.height);
    let mut place = |frame: &mut Frame, rows: u16, widget: &dyn Fn(&mut Frame, Rect)| {
        let height = rows.min(bottom.saturating_sub(y));
        if height > 0 {
            widget(
                frame,
                Rect {
                    x: area.x,
                    y,
                    width: area.width,
                    height,
                },
            );
        }
        y = y.saturating_add(rows).saturating_add(1).min(bottom);
    };
    let len = |n: usize| u16::try_from(n + 1).unwrap_or(u16::MAX);
    // The header's five lines, and the reason of a lost link in the blank
    // line after them.
    place(frame, 5, &|f, r| {
        f.render_widget(
            &head,
            Rect {
                height: (r.height + 1).min(bottom - r.y),
                ..r
            },
        )
    });
    place(frame, len(view.ingest.len()), &|f, r| {
        f.render_widget(&ingest, r)
    });
    place(frame, len(view.delivery.len()), &|f, r| {
        f.render_widget(&delivery, r)
    });
    place(frame, len(view.tenants.len()), &|f, r| {
        f.render_widget(&tenants, r)
    });
}

/// The text of a buffer: one line a row, trailing spaces cut, the cells a
/// wide character covers skipped.
pub fn buffer_text(buffer: &Buffer) -> String {
    let width = usize::from(buffer.area.width.max(1));
    let mut out = String::new();
    for cells in buffer.content.chunks(width) {
        let mut line = String::new();
        let mut skip: u16 = 0;
        for c in cells {
            if skip == 0 {
                line.push_str(c.symbol());
            }
            skip = skip.max(c.cell_width()).saturating_sub(1);
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `view` as plain text `width` columns wide and as tall as it needs
/// ([`View::height`]): what `ankusa top --once` prints.
pub fn plain_text(view: &View, width: u16) -> String {
    // The TestBackend is an in-memory terminal of that size (its error
    // type is Infallible).
    let Ok(mut terminal) = Terminal::new(TestBackend::new(width.max(1), view.height()));
    let Ok(_) = terminal.draw(|f| render(view, f));
    buffer_text(terminal.backend().buffer())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::top::snapshot::{Metrics, SinkEntry, Tenant};

    #[test]
    fn a_rate_is_the_delta_over_the_elapsed_time_and_a_reset_counts_from_zero() {
        assert_eq!(rate(Some(10.0), 25.0, 1500), Some(10.0));
        assert_eq!(rate(Some(10.0), 10.0, 1000), Some(0.0));
        assert_eq!(
            rate(Some(7.0), 3.0, 500),
            Some(6.0),
            "a restart: 3 since it, in half a second"
        );
        assert_eq!(rate(None, 3.0, 1000), None, "no previous reading");
        assert_eq!(
            rate(Some(1.0), 3.0, 0),
            None,
            "no time between the readings"
        );
    }

    #[test]
    fn ages_and_rates_are_written_for_a_person() {
        assert_eq!(fmt_age_ms(None), "-");
        assert_eq!(fmt_age_ms(Some(0)), "0.0s");
        assert_eq!(fmt_age_ms(Some(4_249)), "4.2s");
        assert_eq!(fmt_age_ms(Some(59_999)), "60.0s");
        assert_eq!(fmt_age_ms(Some(725_000)), "12m05s");
        assert_eq!(fmt_age_ms(Some(11_220_000)), "3h07m");
        assert_eq!(fmt_rate(None), "-");
        assert_eq!(fmt_rate(Some(2.25)), "2.2");
        assert_eq!(fmt_rate(Some(1234.56)), "1234.6");
    }

    fn tenant(name: &str, pending: i64, delivered_total: i64, oldest: Option<u64>) -> Tenant {
        Tenant {
            name: name.into(),
            pending,
            in_flight: 1,
            dead: 2,
            quarantined: 0,
            lanes: 3,
            lanes_blocked: 1,
            lanes_held: 1,
            delivered_total,
            oldest_due_age_ms: oldest,
        }
    }

    fn sink(kind: &str, paused: bool) -> SinkEntry {
        SinkEntry {
            kind: kind.into(),
            paused,
        }
    }

    /// Two readings 2 s apart.
    fn two_readings() -> (Snapshot, Snapshot) {
        let before = Snapshot {
            tenants: vec![
                tenant("acme", 10, 100, Some(1500)),
                tenant("beta", 0, 7, None),
            ],
            sources: vec!["orders".into(), "quiet".into()],
            sinks: vec![sink("http", false), sink("file", true), sink("http", false)],
            metrics: Metrics::parse(
                r#"ankusa_queue_pending 10
ankusa_ingest_accepted_total 40
ankusa_dispatch_delivered_total 107
ankusa_dispatch_retries_total 3
ankusa_dispatch_dead_lettered_total 2
ankusa_ingest_requests_total{source="orders",code="200"} 40
ankusa_ingest_requests_total{source="orders",code="401"} 2
ankusa_dispatch_attempts_total{sink="http",outcome="delivered"} 100
ankusa_dispatch_attempts_total{sink="http",outcome="retry"} 3
ankusa_dispatch_attempts_total{sink="http",outcome="permanent"} 2
ankusa_dispatch_attempts_total{sink="file",outcome="delivered"} 7
"#,
            )
            .unwrap(),
        };
        let after = Snapshot {
            tenants: vec![
                tenant("acme", 12, 110, Some(2500)),
                tenant("beta", 0, 7, None),
                tenant("new", 1, 4, Some(0)),
            ],
            metrics: Metrics::parse(
                r#"ankusa_queue_pending 13
ankusa_dispatch_in_flight 1
ankusa_dispatch_lanes 3
ankusa_dispatch_lanes_blocked 1
ankusa_dispatch_lanes_held 1
ankusa_dispatch_lane_members 4
ankusa_dlq_dead 3
ankusa_quarantined 0
ankusa_dispatch_oldest_due_age_seconds 2.5
ankusa_dispatch_paused 1
ankusa_ingest_accepted_total 60
ankusa_dispatch_delivered_total 121
ankusa_dispatch_retries_total 7
ankusa_dispatch_dead_lettered_total 3
ankusa_ingest_requests_total{source="orders",code="200"} 60
ankusa_ingest_requests_total{source="orders",code="401"} 2
ankusa_ingest_requests_total{source="orders",code="503"} 4
ankusa_ingest_requests_total{source="_none",code="404"} 1
ankusa_dispatch_attempts_total{sink="http",outcome="delivered"} 110
ankusa_dispatch_attempts_total{sink="http",outcome="retry"} 7
ankusa_dispatch_attempts_total{sink="http",outcome="permanent"} 2
ankusa_dispatch_attempts_total{sink="http",outcome="horizon_passed"} 1
ankusa_dispatch_attempts_total{sink="file",outcome="delivered"} 11
ankusa_dispatch_breakers{sink="http",state="open"} 1
ankusa_dispatch_breakers{sink="http",state="half_open"} 1
ankusa_dispatch_breakers{sink="file",state="open"} 0
"#,
            )
            .unwrap(),
            ..before.clone()
        };
        (before, after)
    }

    #[test]
    fn the_view_of_two_readings_has_exact_rates_and_figures() {
        let (before, after) = two_readings();
        let v = View::compute(Some(&before), &after, 2000);
        assert_eq!(
            v.node,
            Node {
                pending: Some(13.0),
                in_flight: Some(1.0),
                lanes: Some(3.0),
                lanes_blocked: Some(1.0),
                lanes_held: Some(1.0),
                lane_members: Some(4.0),
                dead: Some(3.0),
                quarantined: Some(0.0),
                oldest_due_age_s: Some(2.5),
                paused: Some(1.0),
                open_breakers: Some(1.0),
                accepted_per_s: Some(10.0),
                delivered_per_s: Some(7.0),
                retries_per_s: Some(2.0),
                dead_lettered_per_s: Some(0.5),
            }
        );
        assert_eq!(
            v.ingest,
            vec![
                // 20 more 200s and 4 new 503s in 2 s.
                IngestRow {
                    source: "orders".into(),
                    per_s: Some(12.0),
                    ok_per_s: Some(10.0),
                    client_error_per_s: Some(0.0),
                    server_error_per_s: Some(2.0),
                    ok: 60,
                    client_error: 2,
                    server_error: 4,
                },
                // Configured, no series yet.
                IngestRow {
                    source: "quiet".into(),
                    per_s: Some(0.0),
                    ok_per_s: Some(0.0),
                    client_error_per_s: Some(0.0),
                    server_error_per_s: Some(0.0),
                    ..IngestRow::default()
                },
                // Not a source: after the configured ones; it appeared since.
                IngestRow {
                    source: "_none".into(),
                    per_s: Some(0.5),
                    ok_per_s: Some(0.0),
                    client_error_per_s: Some(0.5),
                    server_error_per_s: Some(0.0),
                    client_error: 1,
                    ..IngestRow::default()
                },
            ]
        );
        assert_eq!(
            v.delivery,
            vec![
                DeliveryRow {
                    kind: "file".into(),
                    entries: 1,
                    paused: 1,
                    delivered_per_s: Some(2.0),
                    retry_per_s: Some(0.0),
                    dead_per_s: Some(0.0),
                    delivered: 11,
                    retries: 0,
                    dead: 0,
                    open_breakers: 0,
                },
                DeliveryRow {
                    kind: "http".into(),
                    entries: 2,
                    paused: 0,
                    delivered_per_s: Some(5.0),
                    retry_per_s: Some(2.0),
                    dead_per_s: Some(0.5),
                    delivered: 110,
                    retries: 7,
                    dead: 3,
                    open_breakers: 1,
                },
            ]
        );
        assert_eq!(
            v.tenants
                .iter()
                .map(|t| (
                    t.name.as_str(),
                    t.pending,
                    t.oldest_due_age_ms,
                    t.delivered_per_s
                ))
                .collect::<Vec<_>>(),
            vec![
                ("acme", 12, Some(2500), Some(5.0)),
                ("beta", 0, None, Some(0.0)),
                ("new", 1, Some(0), Some(2.0))
            ]
        );
        assert_eq!(v.height(), 5 + 3 + 3 + 3 + 2 + 3);
    }

    #[test]
    fn the_first_reading_has_figures_and_no_rates() {
        let (_, after) = two_readings();
        let v = View::compute(None, &after, 0);
        assert_eq!((v.node.pending, v.node.delivered_per_s), (Some(13.0), None));
        assert_eq!((v.ingest[0].ok, v.ingest[0].per_s), (60, None));
        assert_eq!(
            (v.delivery[1].delivered, v.delivery[1].delivered_per_s),
            (110, None)
        );
        assert_eq!(v.tenants[0].delivered_per_s, None);
    }

    #[test]
    fn a_restarted_relay_counts_its_counters_from_zero() {
        let (before, mut after) = two_readings();
        after.metrics = Metrics::parse(
            "ankusa_ingest_accepted_total 4\nankusa_dispatch_delivered_total 107\nankusa_dispatch_attempts_total{sink=\"http\",outcome=\"delivered\"} 4\n",
        )
        .unwrap();
        let v = View::compute(Some(&before), &after, 1000);
        assert_eq!(v.node.accepted_per_s, Some(4.0));
        assert_eq!(
            v.delivery
                .iter()
                .find(|r| r.kind == "http")
                .map(|r| r.delivered_per_s),
            Some(Some(4.0))
        );
        // The store's totals survive the restart: nothing delivered since.
        assert_eq!(v.node.delivered_per_s, Some(0.0));
        assert_eq!(
            v.node.pending, None,
            "a series the reading lacks is shown as missing"
        );
    }

    /// Regression (brk16): purging a tenant subtracts its counts from the
    /// node's stored totals, and `top` read the lower total as a restart,
    /// showing the whole remaining total as one second's rate
    /// (`delivered 100000.0` on an idle relay). A lower stored total is no
    /// rate; the process's own counters still count from 0 after a restart.
    #[test]
    fn a_purge_that_lowers_the_stored_totals_shows_no_rate() {
        assert_eq!(stored_rate(Some(10.0), 25.0, 1500), Some(10.0));
        assert_eq!(stored_rate(Some(100_000.0), 40_000.0, 1000), None);
        assert_eq!(stored_rate(None, 40_000.0, 1000), None);
        let (before, mut after) = two_readings();
        after.metrics = Metrics::parse(
            "ankusa_dispatch_delivered_total 40\nankusa_dispatch_retries_total 1\nankusa_dispatch_dead_lettered_total 0\n\
             ankusa_ingest_accepted_total 40\n",
        )
        .unwrap();
        // acme purged and made again by a new hook: its total starts over.
        after.tenants = vec![tenant("acme", 1, 1, None), tenant("beta", 0, 7, None)];
        let v = View::compute(Some(&before), &after, 1000);
        assert_eq!(
            (
                v.node.delivered_per_s,
                v.node.retries_per_s,
                v.node.dead_lettered_per_s
            ),
            (None, None, None)
        );
        assert_eq!(v.node.accepted_per_s, Some(0.0));
        assert_eq!(
            v.tenants
                .iter()
                .map(|t| t.delivered_per_s)
                .collect::<Vec<_>>(),
            [None, Some(0.0)]
        );
    }

    fn rendered(view: &View, width: u16, height: u16) -> Buffer {
        let mut t = Terminal::new(TestBackend::new(width, height)).unwrap();
        t.draw(|f| render(view, f)).unwrap();
        t.backend().buffer().clone()
    }

    fn lines(buf: &Buffer) -> Vec<String> {
        buffer_text(buf).lines().map(str::to_owned).collect()
    }

    #[test]
    fn the_frame_shows_every_figure_in_its_column() {
        let (before, after) = two_readings();
        let mut v = View::compute(Some(&before), &after, 2000);
        v.header = Header {
            admin: "http://127.0.0.1:8081".into(),
            interval_ms: 1000,
            interactive: true,
            link: Link::Live,
        };
        let buf = rendered(&v, 110, v.height());
        assert_eq!(
            lines(&buf),
            [
                "ankusa top  http://127.0.0.1:8081  every 1 s  (q, Esc: quit)",
                "relay: live",
                "rows:  pending 13  in flight 1  dead 3  quarantined 0  oldest due 2.5s",
                "lanes: 3 busy  1 blocked  1 held  4 members   sinks: 1 paused  1 open breakers",
                "per s: accepted 10.0  delivered 7.0  retries 2.0  dead-lettered 0.5",
                "",
                "SOURCE              REQ/S    2XX/S    4XX/S    5XX/S       2XX       4XX       5XX",
                "orders               12.0     10.0      0.0      2.0        60         2         4",
                "quiet                 0.0      0.0      0.0      0.0         0         0         0",
                "_none                 0.5      0.0      0.5      0.0         0         1         0",
                "",
                "SINK KIND  ENTRIES PAUSED  DELIV/S  RETRY/S   DEAD/S DELIVERED   RETRIES      DEAD OPEN BRK",
                "file             1      1      2.0      0.0      0.0        11         0         0        0",
                "http             2      0      5.0      2.0      0.5       110         7         3        1",
                "",
                "TENANT             PENDING IN FLIGHT   LANES BLOCKED  HELD      DEAD QUARANTINED OLDEST DUE  DELIV/S",
                "acme                    12         1       3       1     1         2           0       2.5s      5.0",
                "beta                     0         1       3       1     1         2           0          -      0.0",
                "new                      1         1       3       1     1         2           0       0.0s      2.0",
            ]
        );
        // The styles: the title and the column heads bold, the link green.
        assert!(buf[(0, 0)].modifier.contains(Modifier::BOLD));
        assert!(!buf[(11, 0)].modifier.contains(Modifier::BOLD));
        assert_eq!(buf[(7, 1)].fg, Color::Green);
        assert!(
            buf[(0, 6)].modifier.contains(Modifier::BOLD)
                && !buf[(0, 7)].modifier.contains(Modifier::BOLD)
        );
    }

    #[test]
    fn a_lost_relay_is_shown_over_the_figures_from_before() {
        let (before, after) = two_readings();
        let mut v = View::compute(Some(&before), &after, 2000);
        v.header = Header {
            admin: "http://127.0.0.1:8081".into(),
            interval_ms: 250,
            interactive: false,
            link: Link::Lost {
                error: "cannot reach the admin listener".into(),
                for_ms: 3200,
            },
        };
        let buf = rendered(&v, 100, 8);
        assert_eq!(
            lines(&buf),
            [
                "ankusa top  http://127.0.0.1:8081  every 250 ms",
                "relay: NO ANSWER for 3.2s (the figures are from the last answer)",
                "rows:  pending 13  in flight 1  dead 3  quarantined 0  oldest due 2.5s",
                "lanes: 3 busy  1 blocked  1 held  4 members   sinks: 1 paused  1 open breakers",
                "per s: accepted 10.0  delivered 7.0  retries 2.0  dead-lettered 0.5",
                "cannot reach the admin listener",
                "SOURCE              REQ/S    2XX/S    4XX/S    5XX/S       2XX       4XX       5XX",
                "orders               12.0     10.0      0.0      2.0        60         2         4",
            ]
        );
        assert_eq!(buf[(7, 1)].fg, Color::Red);
        assert!(buf[(7, 1)].modifier.contains(Modifier::BOLD));
        assert_eq!(
            (
                buf[(0, 5)].fg,
                buf[(0, 5)].modifier.contains(Modifier::BOLD)
            ),
            (Color::Red, false)
        );
    }

    #[test]
    fn a_short_frame_cuts_the_last_rows_and_a_narrow_one_the_last_columns() {
        let (before, after) = two_readings();
        let v = View::compute(Some(&before), &after, 2000);
        let buf = rendered(&v, 34, 8);
        assert_eq!(
            lines(&buf),
            [
                "ankusa top    every 0 s",
                "relay: live",
                "rows:  pending 13  in flight 1  de",
                "lanes: 3 busy  1 blocked  1 held",
                "per s: accepted 10.0  delivered 7.",
                "",
                "SOURCE              REQ/S    2XX/S",
                "orders               12.0     10.0",
            ]
        );
    }

    #[test]
    fn the_plain_text_is_the_frame_as_tall_as_the_view() {
        let (before, after) = two_readings();
        let mut v = View::compute(Some(&before), &after, 2000);
        v.tenants.truncate(1);
        v.header.admin = "http://a".into();
        v.header.interval_ms = 1500;
        let text = plain_text(&v, 100);
        assert_eq!(text.lines().count(), usize::from(v.height()));
        assert!(
            text.starts_with("ankusa top  http://a  every 1500 ms\nrelay: live\n"),
            "{text}"
        );
        assert!(text.ends_with("acme                    12         1       3       1     1         2           0       2.5s      5.0\n"), "{text}");
    }
}
