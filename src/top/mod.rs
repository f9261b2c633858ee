//! `ankusa top`: a terminal view of a running relay, refreshed every
//! `--interval-ms` (README, "`ankusa top`"). Each refresh reads
//! `GET /v1/tenants`, `GET /v1/sources` and `/metrics` of the admin listener
//! (docs/design.md section 5, "Admin API") into a [`Snapshot`]; a [`View`] is
//! computed from the last two (rates are counter deltas over the time between
//! them) and drawn with ratatui on its crossterm backend.
//!
//! - Interactive (stdout a terminal, no `--once`): the alternate screen in
//!   raw mode; q, Esc or Ctrl-C quit. The terminal is restored on the way out
//!   however it ends (a quit, an error, a panic). A relay that stops
//!   answering mid-run is shown in the view (with the figures of the last
//!   reading), not an exit; the readings go on and the view recovers.
//! - `--once`, or stdout not a terminal (`ankusa top | cat`): two readings
//!   `--interval-ms` apart, one plain-text frame on stdout, exit.
//!
//! Exit codes as the other admin commands ([`crate::admin_cli::EXIT_CODES`]):
//! 0, 1 the API refused or answered what `top` cannot read, 2 usage, 3 the
//! admin listener cannot be reached, 4 unauthorized; for the interactive
//! view, only before its first frame.

pub mod snapshot;
pub mod view;

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use ratatui::crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use crate::admin_cli::{Api, Fail, all_pages, connect};
pub use snapshot::Snapshot;
pub use view::{Header, Link, View, plain_text, render};

/// The width of a plain-text frame when stdout is not a terminal, columns.
pub const PLAIN_WIDTH: u16 = 100;

/// `ankusa top`'s options.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// The relay's admin listener (or the `ANKUSA_ADMIN` variable).
    #[arg(long, env = "ANKUSA_ADMIN", default_value = "http://127.0.0.1:8081")]
    pub admin: String,
    /// Milliseconds between two readings (the rates are over this window).
    #[arg(long, default_value_t = 1000, value_parser = interval_ms)]
    pub interval_ms: u64,
    /// Print one plain-text frame (two readings --interval-ms apart) and
    /// exit; also what happens when stdout is not a terminal.
    #[arg(long)]
    pub once: bool,
}

/// `--interval-ms`: a whole number of milliseconds, at least 1.
fn interval_ms(text: &str) -> Result<u64, String> {
    match text.parse::<u64>() {
        Ok(0) => {
            Err("must be at least 1: the milliseconds between two readings of the relay".to_owned())
        }
        Ok(ms) => Ok(ms),
        Err(_) => Err(format!("{text:?} is not a whole number of milliseconds")),
    }
}

/// Whether a key quits: q, Esc, Ctrl-C (a press; raw mode turns Ctrl-C into
/// a key, not a SIGINT).
pub fn quits(key: &KeyEvent) -> bool {
    key.kind == KeyEventKind::Press
        && match key.code {
            KeyCode::Char('q') | KeyCode::Esc => true,
            KeyCode::Char('c') => key.modifiers.contains(KeyModifiers::CONTROL),
            _ => false,
        }
}

/// The state of an interactive run between readings: the last reading that
/// succeeded (and when), the view computed from it and the one before, and
/// since when readings fail. Pure: the times are passed in.
pub struct Tracker {
    header: Header,
    last: Snapshot,
    last_at: Instant,
    view: View,
    /// When the first of the failing readings in a row failed, and the
    /// latest failure's message.
    lost: Option<(Instant, String)>,
}

impl Tracker {
    /// Starts from the first reading `first`, taken at `at` (no rates yet).
    pub fn new(header: Header, first: Snapshot, at: Instant) -> Tracker {
        let view = View::compute(None, &first, 0);
        Tracker {
            header,
            last: first,
            last_at: at,
            view,
            lost: None,
        }
    }

    /// Takes the outcome of a reading made at `at`: a snapshot replaces the
    /// view (its rates over the time since the last good reading, which
    /// spans an outage) and ends an outage; a failure keeps the figures and
    /// marks the link lost from the first failure on.
    pub fn reading(&mut self, outcome: Result<Snapshot, String>, at: Instant) {
        match outcome {
            Ok(s) => {
                let elapsed_ms =
                    u64::try_from(at.saturating_duration_since(self.last_at).as_millis())
                        .unwrap_or(u64::MAX);
                self.view = View::compute(Some(&self.last), &s, elapsed_ms);
                self.last = s;
                self.last_at = at;
                self.lost = None;
            }
            Err(e) => {
                let since = self.lost.take().map_or(at, |(since, _)| since);
                self.lost = Some((since, e));
            }
        }
    }

    /// The view to draw at `now`.
    pub fn view(&self, now: Instant) -> View {
        let link = match &self.lost {
            None => Link::Live,
            Some((since, error)) => Link::Lost {
                error: error.clone(),
                for_ms: u64::try_from(now.saturating_duration_since(*since).as_millis())
                    .unwrap_or(u64::MAX),
            },
        };
        View {
            header: Header {
                link,
                ..self.header.clone()
            },
            ..self.view.clone()
        }
    }
}

/// One reading of the relay: every page of the tenants and the sources, and
/// `/metrics`.
async fn read(api: &Api) -> Result<Snapshot, Fail> {
    let tenants = all_pages(api, "/v1/tenants").await?;
    let sources = all_pages(api, "/v1/sources").await?;
    let metrics = api.get_text("/metrics").await?;
    Snapshot::parse(&tenants.to_string(), &sources.to_string(), &metrics)
        .map_err(|e| Fail::Refused(format!("the relay's answer cannot be read: {e}")))
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Runs `ankusa top`; the process's exit code.
pub fn main(args: &Args) -> ExitCode {
    let interval = Duration::from_millis(args.interval_ms);
    // A reading may take up to the interval, at least 2 s and at most 10 s:
    // a relay that hangs shows as lost within that.
    let api = match connect(
        &args.admin,
        interval.clamp(Duration::from_secs(2), Duration::from_secs(10)),
    ) {
        Ok(api) => api,
        Err(f) => return f.exit(),
    };
    let stdout_tty = std::io::stdout().is_terminal();
    let header = Header {
        admin: args.admin.clone(),
        interval_ms: args.interval_ms,
        interactive: stdout_tty && !args.once,
        link: Link::Live,
    };
    if header.interactive {
        return interactive(api, header, interval);
    }
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(f) => return f.exit(),
    };
    let view = rt.block_on(async {
        let first = read(&api).await?;
        let first_at = Instant::now();
        tokio::time::sleep(interval).await;
        let second = read(&api).await?;
        Ok::<View, Fail>(View {
            header,
            ..View::compute(Some(&first), &second, millis(first_at.elapsed()))
        })
    });
    let view = match view {
        Ok(v) => v,
        Err(f) => return f.exit(),
    };
    let width = if stdout_tty {
        ratatui::crossterm::terminal::size().map_or(PLAIN_WIDTH, |(w, _)| w)
    } else {
        PLAIN_WIDTH
    };
    print!("{}", plain_text(&view, width));
    ExitCode::SUCCESS
}

/// The runtime the readings run on (one per process: the HTTP client's
/// pooled connections belong to the runtime that opened them).
fn runtime() -> Result<tokio::runtime::Runtime, Fail> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Fail::Refused(format!("cannot start the runtime: {e}")))
}

/// Leaves raw mode and the alternate screen when dropped: on a quit, an
/// error, or the unwinding of a panic (ratatui's panic hook restores too).
struct Restore;

impl Drop for Restore {
    fn drop(&mut self) {
        ratatui::restore();
    }
}

/// The interactive view: a thread reads the relay every `interval` (its
/// first reading at once) and sends each outcome; this one draws every
/// 100 ms and reads the keys, so a quit never waits for a reading. A first
/// reading that fails is an exit code, before any screen is set up.
fn interactive(api: Api, header: Header, interval: Duration) -> ExitCode {
    let (tx, rx) = mpsc::channel::<(Result<Snapshot, Fail>, Instant)>();
    std::thread::spawn(move || {
        let rt = match runtime() {
            Ok(rt) => rt,
            Err(f) => {
                let _ = tx.send((Err(f), Instant::now()));
                return;
            }
        };
        // The runtime runs between readings too, so the client's pooled
        // connections see a relay that went away.
        rt.block_on(async move {
            let mut tick = tokio::time::interval(interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let outcome = read(&api).await;
                if tx.send((outcome, Instant::now())).is_err() {
                    return;
                }
            }
        });
    });
    let (first, first_at) = match rx.recv() {
        Ok((Ok(first), at)) => (first, at),
        Ok((Err(f), _)) => return f.exit(),
        Err(_) => return Fail::Refused("the reading thread stopped".to_owned()).exit(),
    };
    let mut tracker = Tracker::new(header, first, first_at);
    let mut terminal = match ratatui::try_init() {
        Ok(t) => t,
        Err(e) => {
            ratatui::restore();
            eprintln!("ankusa: cannot set up the terminal: {e}");
            return ExitCode::FAILURE;
        }
    };
    let restore = Restore;
    let outcome = (|| -> std::io::Result<()> {
        loop {
            terminal.draw(|f| render(&tracker.view(Instant::now()), f))?;
            if event::poll(Duration::from_millis(100))?
                && let Event::Key(key) = event::read()?
                && quits(&key)
            {
                return Ok(());
            }
            loop {
                match rx.try_recv() {
                    Ok((outcome, at)) => {
                        tracker.reading(outcome.map_err(|f| f.message().to_owned()), at)
                    }
                    Err(mpsc::TryRecvError::Empty) => break,
                    Err(mpsc::TryRecvError::Disconnected) => {
                        tracker
                            .reading(Err("the reading thread stopped".to_owned()), Instant::now());
                        break;
                    }
                }
            }
        }
    })();
    drop(terminal);
    drop(restore);
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ankusa: the terminal failed: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::top::snapshot::Metrics;

    #[test]
    fn q_esc_and_ctrl_c_quit_and_nothing_else_does() {
        let key = |code, modifiers| KeyEvent::new(code, modifiers);
        assert!(quits(&key(KeyCode::Char('q'), KeyModifiers::NONE)));
        assert!(quits(&key(KeyCode::Esc, KeyModifiers::NONE)));
        assert!(quits(&key(KeyCode::Char('c'), KeyModifiers::CONTROL)));
        assert!(!quits(&key(KeyCode::Char('c'), KeyModifiers::NONE)));
        assert!(!quits(&key(KeyCode::Char('x'), KeyModifiers::NONE)));
        assert!(!quits(&key(KeyCode::Enter, KeyModifiers::NONE)));
        let mut release = key(KeyCode::Char('q'), KeyModifiers::NONE);
        release.kind = KeyEventKind::Release;
        assert!(!quits(&release));
    }

    #[test]
    fn an_interval_of_zero_or_not_a_number_is_refused() {
        assert_eq!(interval_ms("250"), Ok(250));
        assert_eq!(
            interval_ms("0"),
            Err(
                "must be at least 1: the milliseconds between two readings of the relay".to_owned()
            )
        );
        assert_eq!(
            interval_ms("1s"),
            Err("\"1s\" is not a whole number of milliseconds".to_owned())
        );
        assert_eq!(
            interval_ms("-5"),
            Err("\"-5\" is not a whole number of milliseconds".to_owned())
        );
    }

    fn delivered(n: u64) -> Snapshot {
        Snapshot {
            metrics: Metrics::parse(&format!("ankusa_dispatch_delivered_total {n}\n")).unwrap(),
            ..Snapshot::default()
        }
    }

    #[test]
    fn an_outage_keeps_the_figures_marks_the_link_and_the_next_reading_recovers() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let header = Header {
            admin: "http://a".into(),
            interval_ms: 1000,
            interactive: true,
            link: Link::Live,
        };
        let mut t = Tracker::new(header.clone(), delivered(10), at(0));
        assert_eq!(t.view(at(0)).node.delivered_per_s, None);
        t.reading(Ok(delivered(30)), at(1000));
        assert_eq!(
            (
                t.view(at(1000)).node.delivered_per_s,
                t.view(at(1000)).header.link
            ),
            (Some(20.0), Link::Live)
        );
        // Two failed readings: lost since the first, the figures kept.
        t.reading(Err("cannot reach the admin listener".into()), at(2000));
        t.reading(Err("connection refused".into()), at(3000));
        let v = t.view(at(3500));
        assert_eq!(
            v.header.link,
            Link::Lost {
                error: "connection refused".into(),
                for_ms: 1500
            }
        );
        assert_eq!(
            (v.node.delivered_per_s, v.header.admin.as_str()),
            (Some(20.0), "http://a")
        );
        // Back: live, the rate over the whole time since the last good reading.
        t.reading(Ok(delivered(60)), at(4000));
        let v = t.view(at(4000));
        assert_eq!(
            (v.header.link, v.node.delivered_per_s),
            (Link::Live, Some(10.0))
        );
    }
}
