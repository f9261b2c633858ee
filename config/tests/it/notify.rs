//! `notify` and a sink entry's `auto_pause_after_ms` (docs/design.md section
//! 5, "Notifications"; section 7): what loads (the internal tenant and
//! sources it adds) and what is refused at load, each problem naming
//! `notify` and the destination's option.

use ankusa_config::{NOTIFY_TENANT, NotifyEvent, NotifyFormat, TenantBinding, TypedOptions};

use crate::helpers::{load, load_env, ok, one, problems};

const SOURCE: &str =
    "sources:\n  - name: stripe\n    sinks: [{type: http, url: 'https://a.example/x'}]\n";

fn with_notify(notify: &str) -> String {
    format!("{SOURCE}notify:\n{notify}")
}

#[test]
fn destinations_load_as_internal_sources_of_the_internal_tenant() {
    let c = ok(&with_notify(
        "  destinations:
    - name: chat
      url: https://hooks.slack.example/services/T/B/X
      format: slack
      events: [breaker_opened, dead_lettered]
    - name: pager
      url: http://127.0.0.1:9/p
      headers: {authorization: Bearer x}
      events: [sink_auto_paused]
  dead_letter_window_ms: 2000
  max_pending: 50
",
    ));
    let n = c.notify.as_ref().expect("notify");
    assert_eq!(n.destinations.len(), 2);
    assert_eq!(n.destinations[0].format, NotifyFormat::Slack);
    assert_eq!(n.destinations[1].format, NotifyFormat::Json);
    assert_eq!(
        n.destinations[0].events.iter().copied().collect::<Vec<_>>(),
        [NotifyEvent::BreakerOpened, NotifyEvent::DeadLettered]
    );
    assert_eq!(
        (
            n.dead_letter_window_ms,
            n.dead_letter_samples,
            n.sink_failing_after_ms
        ),
        (2_000, 5, 300_000)
    );
    assert_eq!((n.tenant_bounds_percent, n.max_pending), (80, 50));
    // After the file's: the internal tenant (bound by max_pending) and one
    // source per destination, its one http sink named after it.
    let names: Vec<&str> = c.tenants.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["default", NOTIFY_TENANT]);
    assert_eq!(c.tenants[1].max_pending, 50);
    let sources: Vec<&str> = c.sources.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(sources, ["stripe", "_notify-chat", "_notify-pager"]);
    assert_eq!(
        c.configured_sources()
            .map(|s| s.name.as_str())
            .collect::<Vec<_>>(),
        ["stripe"]
    );
    let pager = c.source("_notify-pager").expect("pager");
    assert_eq!(pager.tenant, TenantBinding::Fixed(NOTIFY_TENANT.into()));
    assert_eq!(pager.sinks.len(), 1);
    assert_eq!(pager.sinks[0].name, "pager");
    let TypedOptions::Http(h) = &pager.sinks[0].typed else {
        panic!("http expected");
    };
    assert_eq!(h.url, "http://127.0.0.1:9/p");
    assert_eq!(h.headers["authorization"].expose(), "Bearer x");
    // The global retry policy.
    assert!(!pager.sinks[0].retry.overridden);
}

#[test]
fn a_url_from_the_environment_is_resolved_and_never_shown() {
    let text = with_notify(
        "  destinations:
    - {name: chat, url: 'env:CHAT_URL', format: slack, events: [sink_failing]}
",
    );
    let c = load_env(
        &text,
        &[(
            "CHAT_URL",
            "https://hooks.slack.example/services/T/B/SECRET",
        )],
    )
    .expect("loads");
    let TypedOptions::Http(h) = &c.source("_notify-chat").expect("chat").sinks[0].typed else {
        panic!("http expected");
    };
    assert_eq!(h.url, "https://hooks.slack.example/services/T/B/SECRET");
    // Unset: named by its variable.
    assert_eq!(
        one(&text),
        "notify: option \"destinations[0].url\": environment variable CHAT_URL is not set"
    );
    // Set to something that is no URL: the value is not shown.
    let p = problems(load_env(&text, &[("CHAT_URL", "not-a-url-SECRET")]));
    assert_eq!(
        p,
        [
            "notify: option \"destinations[0].url\": the value of env:CHAT_URL is not an http:// or https:// URL"
        ]
    );
}

#[test]
fn every_mistake_of_a_destination_is_refused_by_its_option() {
    let p = problems(load(&with_notify(
        "  destinations:
    - name: a
      url: ftp://x.example/
      events: []
    - name: b
      url: https://b.example/
      format: teams
      events: [breaker_opened, breaker_opend, breaker_opened]
    - url: https://c.example/
      events: [dead_lettered]
    - name: a
      url: https://d.example/
      events: [dead_lettered]
    - name: e
      events: [dead_lettered]
      headers: {x-ankusa-tenant: t}
",
    )));
    assert_eq!(
        p,
        [
            "notify: option \"destinations[0].events\": at least one event is required: breaker_opened, breaker_closed, dead_lettered, tenant_bounds, sink_failing, sink_auto_paused",
            "notify: option \"destinations[0].url\": \"ftp://x.example/\" is not an http:// or https:// URL",
            "notify: option \"destinations[1].format\": unknown format \"teams\": json (the default) or slack",
            "notify: option \"destinations[1].events[1]\": unknown event \"breaker_opend\": one of breaker_opened, breaker_closed, dead_lettered, tenant_bounds, sink_failing, sink_auto_paused",
            "notify: option \"destinations[1].events[2]\": \"breaker_opened\" is listed twice",
            "notify: option \"destinations[2].name\": required: the destination's name (its notifications are queued under it, so it must not change)",
            "notify: option \"destinations[3].name\": duplicate destination name \"a\"",
            "notify: option \"destinations[4].url\": required: the http(s) URL hooks are POSTed to",
            "notify: option \"destinations[4].headers.x-ankusa-tenant\": \"x-ankusa-tenant\" is set by the http sink itself",
        ]
    );
}

#[test]
fn the_section_s_own_options_are_bounded() {
    let dest = "  destinations: [{name: a, url: 'https://a.example/', events: [dead_lettered]}]\n";
    let p = problems(load(&with_notify(&format!(
        "{dest}  dead_letter_window_ms: 0
  dead_letter_samples: 21
  sink_failing_after_ms: 999
  tenant_bounds_percent: 101
  max_pending: 0
"
    ))));
    assert_eq!(
        p,
        [
            "notify: option \"dead_letter_window_ms\": 0 is not from 1000 to 86400000 (milliseconds)",
            "notify: option \"sink_failing_after_ms\": 999 is not from 1000 to 2592000000 (milliseconds)",
            "notify: option \"dead_letter_samples\": 21 is above its upper bound, 20 (config/ankusa.example.yaml lists every bound)",
            "notify: option \"tenant_bounds_percent\": 101 is not a share of the bounds: a percent from 1 to 100",
            "notify: option \"max_pending\": must be greater than 0",
        ]
    );
    // No destination, an unknown option: refused by name.
    assert_eq!(
        one(&with_notify("  destinations: []\n")),
        "notify: option \"destinations\": at least one destination is required (a notify section sends nothing without one)"
    );
    let e = load(&with_notify(&format!("{dest}  window_ms: 5\n"))).expect_err("unknown option");
    assert!(
        e.to_string().contains("notify: unknown field `window_ms`"),
        "{e}"
    );
}

#[test]
fn notify_in_a_cluster_is_refused() {
    let p = problems(load(&format!(
        "{SOURCE}cluster: {{node_id: n1, etcd: ['http://127.0.0.1:2379'], advertise: '127.0.0.1:8080'}}
notify:
  destinations: [{{name: a, url: 'https://a.example/', events: [dead_lettered]}}]
"
    )));
    assert!(
        p.iter()
            .any(|m| m.starts_with("notify: notifications in cluster mode are planned, not built")),
        "{p:#?}"
    );
}

#[test]
fn auto_pause_after_ms_is_a_core_option_within_its_bounds() {
    let c = ok(&crate::helpers::with_sink(
        "{type: http, url: 'https://a.example/', auto_pause_after_ms: 600000}",
    ));
    let e = &c.sources[0].sinks[0];
    assert_eq!(e.auto_pause_after_ms, Some(600_000));
    assert!(e.options.get("auto_pause_after_ms").is_none());
    assert_eq!(
        ok(&crate::helpers::with_sink("{type: file, path: x}")).sources[0].sinks[0]
            .auto_pause_after_ms,
        None
    );
    for bad in ["0", "999", "2592000001", "'10m'", "-1"] {
        let m = one(&crate::helpers::with_sink(&format!(
            "{{type: http, url: 'https://a.example/', auto_pause_after_ms: {bad}}}"
        )));
        assert!(
            m.starts_with(
                "source \"stripe\", sink \"http-0\" (http): option \"auto_pause_after_ms\": must be whole milliseconds from 1000 (1 s) to 2592000000 (30 days)"
            ),
            "{bad}: {m}"
        );
    }
    // The bounds themselves load.
    for good in ["1000", "2592000000"] {
        ok(&crate::helpers::with_sink(&format!(
            "{{type: http, url: 'https://a.example/', auto_pause_after_ms: {good}}}"
        )));
    }
}

/// A destination that is one of the relay's own listeners is refused: its
/// notifications would come back to it as hooks (the ingest: dead letters
/// that notify again without end) or act on it (the admin API). Another port
/// of the machine, or a host name, is not compared.
#[test]
fn a_destination_on_the_relays_own_listener_is_refused() {
    for (url, which, addr) in [
        (
            "http://127.0.0.1:8080/hooks/stripe",
            "ingest",
            "127.0.0.1:8080",
        ),
        ("http://localhost:8081/v1/reload", "admin", "127.0.0.1:8081"),
        ("http://[::1]:8080/x", "ingest", "127.0.0.1:8080"),
    ] {
        assert_eq!(
            one(&with_notify(&format!(
                "  destinations: [{{name: self, url: '{url}', events: [dead_lettered]}}]\n"
            ))),
            format!(
                "notify: option \"destinations[0].url\": is the relay's own {which} listener ({addr}): its notifications would come back to it"
            ),
            "{url}"
        );
    }
    for url in ["http://127.0.0.1:9000/x", "https://relay.example:8080/x"] {
        ok(&with_notify(&format!(
            "  destinations: [{{name: other, url: '{url}', events: [dead_lettered]}}]\n"
        )));
    }
}
