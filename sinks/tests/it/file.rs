//! The file sink against real files.

use std::sync::Arc;

use ankusa_keys::Seq;
use ankusa_sinks::file::{FileSink, FileSinkConfig};
use ankusa_sinks::{Options, Outcome, Sink, SinkError};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

use crate::{SHOPIFY_BODY, ctx, hook, ordered_ctx, sha256_hex};

fn lines(path: &std::path::Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).expect("read");
    assert!(text.ends_with('\n'), "file ends with a newline");
    text.lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

fn body(line: &Value) -> Vec<u8> {
    STANDARD
        .decode(line["body_base64"].as_str().expect("body_base64"))
        .expect("base64")
}

async fn open(path: &std::path::Path) -> FileSink {
    FileSink::open(&FileSinkConfig {
        path: path.to_owned(),
    })
    .await
    .expect("open")
}

#[tokio::test]
async fn lines_decode_to_the_hook() {
    let dir = tempfile::tempdir().expect("tempdir");
    // The directory is created.
    let path = dir.path().join("data/deliveries.ndjson");
    let s = open(&path).await;
    assert_eq!(s.kind(), "file");

    let mut odd = hook(b"\x00\xff\xfe binary \n body");
    odd.headers.push((b"X-Raw".to_vec(), b"\xff\x01".to_vec()));
    odd.query = None;
    let mut c2 = ordered_ctx(b"cus_9");
    c2.seq = Seq(43);
    c2.attempt = 2;
    c2.content_type = None;

    assert_eq!(s.deliver(&hook(SHOPIFY_BODY), &ctx()).await, Outcome::Ok);
    assert_eq!(s.deliver(&odd, &c2).await, Outcome::Ok);
    s.flush().await.expect("flush");

    let l = lines(&path);
    assert_eq!(l.len(), 2);
    assert_eq!(sha256_hex(&body(&l[0])), crate::SHOPIFY_SHA256);
    assert_eq!(body(&l[1]), b"\x00\xff\xfe binary \n body");

    let mut first = l[0].clone();
    first.as_object_mut().expect("object").remove("body_base64");
    assert_eq!(
        first,
        json!({
            "message_version": "1",
            "tenant": "acme",
            "source": "shopify",
            "sink": "out",
            "sink_ix": 1,
            "seq": 42,
            "idempotency_key": "01932c4e-5f60-7abc-8def-0123456789ab",
            "attempt": 1,
            "received_at_ms": 1_764_500_000_123_u64,
            "ordered": false,
            "ordering_key": null,
            "lane": null,
            "lane_seq": null,
            "method": "POST",
            "path": "/hooks/shopify",
            "query": "shop=corpus-test-shop",
            "content_type": "application/json",
            "headers": [["Content-Type", "application/json"], ["X-Shopify-Topic", "orders/create"]],
        })
    );
    // Field order is the documented one.
    let keys: Vec<&str> = l[0]
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    assert!(
        keys.contains(&"body_base64") && keys.len() == 19,
        "{keys:?}"
    );

    assert_eq!(l[1]["seq"], 43);
    assert_eq!(l[1]["attempt"], 2);
    assert_eq!(l[1]["ordered"], true);
    assert_eq!(l[1]["ordering_key"], "cus_9");
    assert_eq!(l[1]["lane"], "00112233445566778899aabbccddeeff");
    assert_eq!(l[1]["lane_seq"], 3);
    assert_eq!(l[1]["query"], Value::Null);
    assert_eq!(l[1]["content_type"], Value::Null);
    // A non-UTF-8 header value keeps its bytes.
    assert_eq!(l[1]["headers"][2][0], "X-Raw");
    assert_eq!(
        STANDARD
            .decode(
                l[1]["headers"][2][1]["base64"]
                    .as_str()
                    .expect("base64 form")
            )
            .expect("decode"),
        b"\xff\x01"
    );
}

#[tokio::test]
async fn line_order_is_the_file_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("d.ndjson");
    let s = open(&path).await;
    let mut raw = ordered_ctx(b"\xc3\x28");
    raw.seq = Seq(7);
    assert_eq!(s.deliver(&hook(b"x"), &raw).await, Outcome::Ok);
    s.flush().await.expect("flush");
    let l = lines(&path);
    // An ordering key that is not UTF-8 keeps its bytes too.
    assert_eq!(
        STANDARD
            .decode(l[0]["ordering_key"]["base64"].as_str().expect("base64"))
            .expect("decode"),
        b"\xc3\x28"
    );
}

#[tokio::test]
async fn reopen_appends() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("d.ndjson");
    {
        let s = open(&path).await;
        for seq in 1..=2 {
            let mut c = ctx();
            c.seq = Seq(seq);
            assert_eq!(
                s.deliver(&hook(format!("{{\"n\":{seq}}}").as_bytes()), &c)
                    .await,
                Outcome::Ok
            );
        }
        s.flush().await.expect("flush");
    }
    let s = open(&path).await;
    let mut c = ctx();
    c.seq = Seq(3);
    assert_eq!(s.deliver(&hook(b"{\"n\":3}"), &c).await, Outcome::Ok);
    s.flush().await.expect("flush");
    let l = lines(&path);
    assert_eq!(
        l.iter()
            .map(|x| x["seq"].as_u64().expect("seq"))
            .collect::<Vec<_>>(),
        [1, 2, 3]
    );
    assert_eq!(
        l.iter().map(body).collect::<Vec<_>>(),
        [
            b"{\"n\":1}".to_vec(),
            b"{\"n\":2}".to_vec(),
            b"{\"n\":3}".to_vec()
        ]
    );
}

#[tokio::test]
async fn a_torn_last_line_is_ended_before_appending() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("d.ndjson");
    std::fs::write(&path, b"{\"seq\":1}\n{\"seq\":2,\"tena").expect("write");
    let s = open(&path).await;
    assert_eq!(s.deliver(&hook(b"{}"), &ctx()).await, Outcome::Ok);
    s.flush().await.expect("flush");
    let text = std::fs::read_to_string(&path).expect("read");
    let all: Vec<&str> = text.lines().collect();
    assert_eq!(all.len(), 3);
    assert_eq!(all[1], "{\"seq\":2,\"tena");
    let last: Value = serde_json::from_str(all[2]).expect("the new line is whole");
    assert_eq!(last["seq"], 42);
}

#[tokio::test]
async fn concurrent_deliveries_never_interleave() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("d.ndjson");
    let s = Arc::new(open(&path).await);
    let big = vec![b'z'; 300_000];
    let mut tasks = Vec::new();
    for seq in 0..40u64 {
        let s = s.clone();
        let body = if seq % 4 == 0 {
            big.clone()
        } else {
            seq.to_string().into_bytes()
        };
        tasks.push(tokio::spawn(async move {
            let mut c = ctx();
            c.seq = Seq(seq);
            s.deliver(&hook(&body), &c).await
        }));
    }
    for t in tasks {
        assert_eq!(t.await.expect("join"), Outcome::Ok);
    }
    s.flush().await.expect("flush");
    let l = lines(&path);
    assert_eq!(l.len(), 40);
    let mut seqs: Vec<u64> = l.iter().map(|x| x["seq"].as_u64().expect("seq")).collect();
    for x in &l {
        let seq = x["seq"].as_u64().expect("seq");
        let expect = if seq % 4 == 0 {
            big.clone()
        } else {
            seq.to_string().into_bytes()
        };
        assert_eq!(body(x), expect, "seq {seq}");
    }
    seqs.sort_unstable();
    assert_eq!(seqs, (0..40).collect::<Vec<_>>());
}

#[tokio::test]
async fn flush_with_nothing_written_is_ok_and_writes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("d.ndjson");
    let s = open(&path).await;
    s.flush().await.expect("flush");
    s.flush().await.expect("flush again");
    assert_eq!(std::fs::metadata(&path).expect("created").len(), 0);
}

#[tokio::test]
async fn a_directory_path_cannot_be_opened() {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = FileSink::open(&FileSinkConfig {
        path: dir.path().to_owned(),
    })
    .await
    .expect_err("a directory");
    assert!(matches!(e, SinkError::Io { .. }), "{e:?}");
    assert!(e.to_string().starts_with("opening "), "{e}");
}

fn options(v: Value) -> Options {
    v.as_object().expect("object").clone()
}

#[test]
fn config_from_options() {
    assert_eq!(
        FileSinkConfig::from_options(&options(json!({"path": "./data/deliveries.ndjson"})))
            .expect("valid"),
        FileSinkConfig {
            path: "./data/deliveries.ndjson".into()
        }
    );
    assert!(matches!(
        FileSinkConfig::from_options(&options(json!({}))),
        Err(SinkError::MissingOption { option: "path" })
    ));
    for bad in [
        json!({"path": ""}),
        json!({"path": 3}),
        json!({"path": "out/"}),
    ] {
        match FileSinkConfig::from_options(&options(bad)) {
            Err(SinkError::InvalidOption { option, .. }) => assert_eq!(option, "path"),
            other => panic!("{other:?}"),
        }
    }
    match FileSinkConfig::from_options(&options(json!({"path": "a", "fsync": "always"}))) {
        Err(SinkError::UnknownOption { option, .. }) => assert_eq!(option, "fsync"),
        other => panic!("{other:?}"),
    }
    // Every problem at once, in option order; a missing path comes last.
    let e =
        FileSinkConfig::from_options(&options(json!({"path": 3, "fsync": "always", "mode": 1})))
            .expect_err("three problems");
    let got: Vec<String> = e.problems().iter().map(ToString::to_string).collect();
    assert_eq!(
        got,
        [
            "unknown sink option `fsync` (valid: path)",
            "unknown sink option `mode` (valid: path)",
            "sink option `path`: must be a string",
        ]
    );
    let e = FileSinkConfig::from_options(&options(json!({"fsync": 1}))).expect_err("two problems");
    assert_eq!(
        e.to_string(),
        "2 problems: unknown sink option `fsync` (valid: path); sink option `path` is required"
    );
}

/// A sink without an answer to give (every adapter but HTTP) reports none
/// from `attempt`: the default of the trait, the outcome of `deliver`.
#[tokio::test]
async fn attempt_reports_no_answer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = open(&dir.path().join("out.ndjson")).await;
    let a = s.attempt(&hook(b"{}"), &ctx()).await;
    assert_eq!(
        a,
        ankusa_sinks::Attempted {
            outcome: Outcome::Ok,
            response: None
        }
    );
}
