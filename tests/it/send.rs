//! `ankusa send` of the GitHub and Stripe corpus files to a relay whose source
//! delivers to the file sink (the embedded demo's shape) puts every hook in the
//! NDJSON file, body byte for byte, in commit order on the ordered sink's
//! keyless lane.

use std::ffi::OsStr;
use std::time::Duration;

use base64::Engine;

use crate::corpus::{corpus_dir, sha256_hex};
use crate::relay::{Relay, config, run_cli};
use crate::sink::until;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_corpus_files_to_the_file_sink() {
    let relay = Relay::start(&config(
        "memory",
        "
sources:
  - name: demo
    path: /hooks/demo
    dedupe: {header: webhook-id}
    sinks:
      - {type: file, name: deliveries, path: '{DIR}/deliveries.ndjson', ordered: true, ordering_key: {header: x-entity-id}}
",
    ))
    .await;
    let mut files: Vec<std::path::PathBuf> = Vec::new();
    for dir in ["github", "stripe"] {
        let mut d: Vec<_> = std::fs::read_dir(corpus_dir().join(dir))
            .expect("corpus dir")
            .map(|e| e.expect("entry").path())
            .collect();
        d.sort();
        files.extend(d);
    }
    let url = format!("http://{}", relay.ingest);
    let mut args: Vec<&OsStr> = files.iter().map(|f| f.as_os_str()).collect();
    args.splice(
        0..0,
        [
            OsStr::new("send"),
            OsStr::new("--url"),
            OsStr::new(&url),
            OsStr::new("--path"),
            OsStr::new("/hooks/demo"),
        ],
    );
    let (status, out) = run_cli(&args, relay.dir.path());
    assert!(status.success(), "ankusa send: {out}");
    assert!(
        out.contains(&format!("{} sent, 0 not accepted", files.len())),
        "{out}"
    );

    let path = relay.dir.path().join("deliveries.ndjson");
    let lines = until(
        "every hook in the NDJSON file",
        Duration::from_secs(60),
        async || {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            // Only complete lines: the sink may be writing the next one (a 1 MiB
            // body is a long line) while this reads.
            let lines: Vec<serde_json::Value> = text
                .split_inclusive('\n')
                .filter(|l| l.ends_with('\n'))
                .map(|l| serde_json::from_str(l).expect("an NDJSON line"))
                .collect();
            (lines.len() >= files.len()).then_some(lines)
        },
    )
    .await;
    assert_eq!(lines.len(), files.len());
    let index: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(corpus_dir().join("index.json")).expect("index"),
    )
    .expect("json");
    let want: Vec<String> = files
        .iter()
        .map(|f| {
            let name = f
                .strip_prefix(corpus_dir())
                .expect("in corpus")
                .display()
                .to_string();
            index["files"]
                .as_array()
                .expect("files")
                .iter()
                .find(|e| e["file"] == name.as_str())
                .expect("indexed")["body_sha256"]
                .as_str()
                .expect("sha")
                .to_owned()
        })
        .collect();
    let got: Vec<String> = lines
        .iter()
        .map(|l| {
            sha256_hex(
                &base64::engine::general_purpose::STANDARD
                    .decode(l["body_base64"].as_str().expect("body_base64"))
                    .expect("base64"),
            )
        })
        .collect();
    assert_eq!(
        got, want,
        "bodies, in the order they were sent (one keyless lane)"
    );
    let mut last = 0;
    for l in &lines {
        assert_eq!(l["ordered"], true);
        assert_eq!(l["ordering_key"], "default/demo");
        assert_eq!(
            (
                l["tenant"].as_str(),
                l["source"].as_str(),
                l["sink"].as_str()
            ),
            (Some("default"), Some("demo"), Some("deliveries"))
        );
        let seq = l["seq"].as_u64().expect("seq");
        assert!(seq > last, "seq {seq} after {last}: not commit order");
        last = seq;
    }
}

/// A file `ankusa send` cannot read or parse is an error naming the file, and
/// then nothing is posted; `--keep-going` posts the others and the summary
/// counts only what was posted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_refuses_unreadable_files_and_counts_only_what_it_posted() {
    let relay = Relay::start(&config(
        "memory",
        "
sources:
  - name: demo
    path: /hooks/demo
    sinks:
      - {type: file, name: deliveries, path: '{DIR}/deliveries.ndjson'}
",
    ))
    .await;
    let url = format!("http://{}", relay.ingest);
    let good = corpus_dir().join("stripe/customer_created.json");
    let missing = relay.dir.path().join("no-such-hook.json");
    let not_corpus = relay.dir.path().join("not-a-hook.json");
    std::fs::write(&not_corpus, "{\"body\": 1}").expect("write");
    let send = |extra: &[&OsStr]| {
        let mut args: Vec<&OsStr> = vec![
            OsStr::new("send"),
            OsStr::new("--url"),
            OsStr::new(&url),
            OsStr::new("--path"),
            OsStr::new("/hooks/demo"),
        ];
        args.extend_from_slice(extra);
        args.extend([
            good.as_os_str(),
            missing.as_os_str(),
            not_corpus.as_os_str(),
            good.as_os_str(),
        ]);
        run_cli(&args, relay.dir.path())
    };

    let (status, out) = send(&[]);
    assert!(!status.success(), "{out}");
    assert!(
        out.contains(&format!("{}: cannot read it", missing.display())),
        "{out}"
    );
    assert!(
        out.contains(&format!("{}: not a corpus file", not_corpus.display())),
        "{out}"
    );
    assert!(
        out.contains("2 of 4 files could not be loaded; nothing sent"),
        "{out}"
    );
    assert!(
        !out.contains(" sent, "),
        "no summary of posts when nothing was posted: {out}"
    );
    let accepted = relay.metric("ankusa_ingest_accepted_total").await;
    assert_eq!(accepted, 0.0, "nothing posted: {out}");

    // An address without a scheme is refused before anything is read or sent.
    let (status, out) = run_cli(
        &[
            OsStr::new("send"),
            OsStr::new("--url"),
            OsStr::new("127.0.0.1:8080"),
            good.as_os_str(),
        ],
        relay.dir.path(),
    );
    assert!(!status.success(), "{out}");
    assert!(
        out.contains("is not an http:// or https:// address"),
        "{out}"
    );

    let (status, out) = send(&[OsStr::new("--keep-going")]);
    assert!(!status.success(), "files were skipped: {out}");
    assert!(
        out.contains("2 sent, 0 not accepted, 2 skipped (could not be loaded)"),
        "{out}"
    );
    let accepted = until(
        "the two posted hooks accepted",
        Duration::from_secs(60),
        async || {
            let n = relay.metric("ankusa_ingest_accepted_total").await;
            (n >= 2.0).then_some(n)
        },
    )
    .await;
    assert_eq!(accepted, 2.0, "{out}");
}
