//! Routes of the ingest listener: a TenantPath source (`<path>/<tenant>`),
//! 404 for an unknown path or tenant, 405 for a method other than POST.

use std::time::Duration;

use crate::corpus::Hook;
use crate::relay::{Relay, config};
use crate::sink::{Sink, until};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_path_source_and_refused_routes() {
    let sink = Sink::ok().await;
    let relay = Relay::start(&config(
        "memory",
        &format!(
            "
tenants: [{{name: acme}}, {{name: globex}}]
sources:
  - name: shopify
    tenant_path: true
    verification: {{type: shopify, secrets: [shpss_corpus_test_secret_0001]}}
    dedupe: {{header: x-shopify-webhook-id}}
    sinks: [{{type: http, url: '{}', ordered: true, ordering_key: {{header: x-shopify-product-id}}}}]
",
            sink.url()
        ),
    ))
    .await;
    let h = Hook::load("shopify/products_update.json");
    let acme = relay
        .post("/hooks/shopify/acme", &h.send_headers(), h.body.clone())
        .await
        .id();
    let globex = relay
        .post("/hooks/shopify/globex", &h.send_headers(), h.body.clone())
        .await
        .id();
    assert_ne!(
        acme, globex,
        "dedupe is per tenant: the same webhook id for two shops is two hooks"
    );
    let again = relay
        .post("/hooks/shopify/acme", &h.send_headers(), h.body.clone())
        .await;
    assert_eq!(
        (
            again.status,
            again.body["id"].as_str(),
            &again.body["duplicate"]
        ),
        (200, Some(acme.as_str()), &serde_json::json!(true))
    );
    for (path, status) in [
        ("/hooks/shopify/initech", 404),
        ("/hooks/shopify", 404),
        ("/hooks/nope", 404),
        ("/hooks/shopify/acme/x", 404),
    ] {
        let a = relay.post(path, &h.send_headers(), h.body.clone()).await;
        assert_eq!(a.status, status, "{path}: {a:?}");
    }
    let get = crate::relay::client()
        .get(relay.url("/hooks/shopify/acme"))
        .send()
        .await
        .expect("GET");
    assert_eq!(get.status().as_u16(), 405);
    let got = until("two deliveries", Duration::from_secs(60), async || {
        let d = sink.delivered();
        (d.len() >= 2).then_some(d)
    })
    .await;
    let mut tenants: Vec<(String, String, String)> = got
        .iter()
        .map(|r| {
            (
                r.header("x-ankusa-tenant").expect("tenant"),
                r.id(),
                r.key().expect("ordering key"),
            )
        })
        .collect();
    tenants.sort();
    assert_eq!(
        tenants,
        [
            ("acme".to_owned(), acme, "788032119674292922".to_owned()),
            ("globex".to_owned(), globex, "788032119674292922".to_owned())
        ]
    );
    let m = relay.metrics().await;
    assert_eq!(m["ankusa_ingest_accepted_total"], 2.0);
    assert_eq!(m["ankusa_ingest_duplicates_total"], 1.0);
    assert_eq!(sink.requests().len(), 2);
}
