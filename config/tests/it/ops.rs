//! The operating options (docs/design.md section 5, "Pause", "Quarantine",
//! "Retention"): defaults, what loads, and each rejection with its scope and
//! option.

use ankusa_config::{OnInvalidSignature, Retention, defaults};

use crate::helpers::{load, ok, one};

const FILE: &str = "{type: file, path: x}";

#[test]
fn operating_options_default_to_off_and_seven_days() {
    let c = ok(&format!("sources:\n  - {{name: a, sinks: [{FILE}]}}\n"));
    assert_eq!(
        c.retention,
        Retention {
            keep_ms: 7 * 24 * 3_600_000,
            interval_ms: 60_000
        }
    );
    assert_eq!(c.retention.keep_ms, defaults::RETENTION_KEEP_MS);
    let a = &c.sources[0];
    assert!(!a.paused && !a.quarantine && !a.sinks[0].paused);
    assert_eq!(a.on_invalid_signature, OnInvalidSignature::Reject);
}

#[test]
fn paused_quarantine_and_on_invalid_signature_load() {
    let c = ok(&format!(
        "retention: {{keep_ms: 2000, interval_ms: 100}}
sources:
  - name: a
    paused: true
    quarantine: true
    verification: {{type: github, secrets: [s]}}
    on_invalid_signature: quarantine
    sinks: [{FILE}, {{type: file, path: y, paused: true, name: later}}, {{type: file, path: z, paused: false}}]
"
    ));
    assert_eq!(
        c.retention,
        Retention {
            keep_ms: 2000,
            interval_ms: 100
        }
    );
    let a = &c.sources[0];
    assert!(a.paused && a.quarantine);
    assert_eq!(a.on_invalid_signature, OnInvalidSignature::Quarantine);
    assert_eq!(
        a.sinks.iter().map(|e| e.paused).collect::<Vec<_>>(),
        [false, true, false]
    );
    assert!(
        a.sinks.iter().all(|e| e.options.get("paused").is_none()),
        "paused is core's option"
    );
    let c = ok(&format!(
        "sources:\n  - {{name: a, verification: {{type: github, secrets: [s]}}, on_invalid_signature: reject, sinks: [{FILE}]}}\n"
    ));
    assert_eq!(
        c.sources[0].on_invalid_signature,
        OnInvalidSignature::Reject
    );
}

#[test]
fn bad_operating_options_are_refused_by_name() {
    assert_eq!(
        one(&format!(
            "sources:\n  - {{name: a, on_invalid_signature: quarantine, sinks: [{FILE}]}}\n"
        )),
        "source \"a\": option \"on_invalid_signature\": quarantine needs a verification scheme: with \
         verification none no signature can fail (use quarantine: true to hold every hook)"
    );
    assert_eq!(
        one(
            "sources:\n  - {name: a, sinks: [{type: file, path: x, name: out, paused: yes please}]}\n"
        ),
        "source \"a\", sink \"out\" (file): option \"paused\": must be true or false, found \"yes please\""
    );
    assert_eq!(
        one("retention: {keep_ms: 0}\nsources: []\n"),
        "retention: option \"keep_ms\": must be greater than 0"
    );
    assert_eq!(
        one("retention: {interval_ms: 0}\nsources: []\n"),
        "retention: option \"interval_ms\": must be greater than 0"
    );
    // Unknown and mistyped options are the parser's: named, with a position.
    for (yaml, named) in [
        (
            format!("sources:\n  - {{name: a, on_invalid_signature: drop, sinks: [{FILE}]}}\n"),
            "unknown variant `drop`",
        ),
        (
            format!("sources:\n  - {{name: a, paused: 1, sinks: [{FILE}]}}\n"),
            "sources[0].paused",
        ),
        (
            "retention: {hours: 2}\nsources: []\n".to_owned(),
            "unknown field `hours`",
        ),
    ] {
        let e = load(&yaml).expect_err("refused").to_string();
        assert!(e.contains(named), "{named:?} not in {e}");
    }
}
