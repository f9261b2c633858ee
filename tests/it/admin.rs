//! The admin API client the tests share: [`Admin`] (every answer validated
//! against the OpenAPI document's schema for its route and status by
//! [`validate`]), [`cli`] (the operator's CLI) and [`two_sources`] (a relay
//! with two tenants' sources, one sink ordered). The tests are in the module
//! of each behaviour (revive, pause, admin_access, admin_input, cli, ...).

use serde_json::{Value, json};

use crate::relay::{BIN, Relay, client, config};
use crate::sink::Sink;

const OPENAPI: &str = include_str!("../../admin/src/http/openapi.json");

/// Validates `body` against the schema of `(method, pattern, status)` in the
/// OpenAPI document (its `$ref`s resolved against the whole document).
pub(crate) fn validate(method: &str, pattern: &str, status: u16, body: &Value) {
    let doc: Value = serde_json::from_str(OPENAPI).expect("openapi.json");
    let esc = pattern.replace('~', "~0").replace('/', "~1");
    let pointer = format!(
        "#/paths/{esc}/{}/responses/{status}/content/application~1json/schema",
        method.to_ascii_lowercase()
    );
    assert!(
        doc.pointer(&pointer[1..]).is_some(),
        "openapi.json documents no JSON answer {status} for {method} {pattern}: {body}"
    );
    let mut root = doc.clone();
    // A URI fragment: `{` and `}` of path templates percent-encoded.
    root["$ref"] = json!(pointer.replace('{', "%7B").replace('}', "%7D"));
    let v = jsonschema::draft202012::new(&root).expect("schema compiles");
    let errors: Vec<String> = v
        .iter_errors(body)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{method} {pattern} {status}: {errors:?}\n{body:#}"
    );
}

/// A client of one relay's admin API, validating every answer.
pub(crate) struct Admin {
    base: String,
    token: Option<String>,
    http: reqwest::Client,
}

impl Admin {
    pub(crate) fn new(relay: &Relay, token: Option<&str>) -> Admin {
        Admin {
            base: format!("http://{}", relay.admin),
            token: token.map(str::to_owned),
            http: client(),
        }
    }

    /// `method path` (with `pattern`, its route, for the schema): status and
    /// JSON body.
    pub(crate) async fn call(
        &self,
        method: &str,
        pattern: &str,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut req = self.http.request(
            reqwest::Method::from_bytes(method.as_bytes()).expect("method"),
            format!("{}{path}", self.base),
        );
        if let Some(t) = &self.token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        if let Some(b) = body {
            req = req
                .header("content-type", "application/json")
                .body(b.to_string());
        }
        let resp = req
            .send()
            .await
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let status = resp.status().as_u16();
        let text = resp.text().await.expect("body");
        let v: Value = serde_json::from_str(&text)
            .unwrap_or_else(|_| panic!("{method} {path}: {status} not JSON: {text}"));
        validate(method, pattern, status, &v);
        (status, v)
    }

    pub(crate) async fn ok(
        &self,
        method: &str,
        pattern: &str,
        path: &str,
        body: Option<Value>,
    ) -> Value {
        let (status, v) = self.call(method, pattern, path, body).await;
        assert!(
            (200..300).contains(&status),
            "{method} {path}: {status} {v}"
        );
        v
    }

    /// `POST /v1/dead-letters/{row}/revive`: status and JSON body.
    pub(crate) async fn revive(&self, row: &str) -> (u16, Value) {
        self.call(
            "POST",
            "/v1/dead-letters/{id}/revive",
            &format!("/v1/dead-letters/{row}/revive"),
            None,
        )
        .await
    }

    pub(crate) async fn dead(&self, query: &str) -> Vec<Value> {
        let v = self
            .ok(
                "GET",
                "/v1/dead-letters",
                &format!("/v1/dead-letters?{query}"),
                None,
            )
            .await;
        v["items"].as_array().expect("items").clone()
    }

    pub(crate) async fn tenant(&self, name: &str) -> Value {
        self.ok(
            "GET",
            "/v1/tenants/{tenant}",
            &format!("/v1/tenants/{name}"),
            None,
        )
        .await
    }

    pub(crate) async fn job(&self, id: u64) -> Value {
        self.ok("GET", "/v1/jobs/{id}", &format!("/v1/jobs/{id}"), None)
            .await
    }
}

/// Two sources of two tenants (`default`, `other`) into `sink`, one ordered on
/// `x-entity-id`; `extra` is prepended to the relay's configuration.
pub(crate) fn two_sources(sink: &Sink, store: &str, extra: &str) -> String {
    config(
        store,
        &format!(
            "{extra}
retry: {{base_ms: 10, max_ms: 20}}
breaker: {{failures: 100000, open_ms: 10}}
tenants: [{{name: default}}, {{name: other}}]
sources:
  - name: orders
    tenant: default
    sinks:
      - {{type: http, name: web, url: '{url}', timeout_ms: 60000, ordered: true, ordering_key: {{header: x-entity-id}}}}
  - name: spare
    tenant: other
    sinks:
      - {{type: http, name: backup, url: '{url}', timeout_ms: 60000}}
",
            url = sink.url()
        ),
    )
}

/// Runs the binary with `args` (and `ANKUSA_ADMIN_TOKEN` when given): exit
/// code and stdout, stderr.
pub(crate) fn cli(args: &[&str], token: Option<&str>) -> (i32, String, String) {
    let mut c = std::process::Command::new(BIN);
    c.args(args)
        .env_remove("ANKUSA_ADMIN_TOKEN")
        .env_remove("ANKUSA_ADMIN")
        .env_remove("HTTP_PROXY")
        .env_remove("http_proxy");
    if let Some(t) = token {
        c.env("ANKUSA_ADMIN_TOKEN", t);
    }
    let out = c.output().expect("run ankusa");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
