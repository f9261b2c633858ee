//! A minimal W3C WebDriver client (https://www.w3.org/TR/webdriver2/) for
//! driving headless Chromium through chromedriver: a session, navigation,
//! CSS lookups, clicks and typing, script execution, the window size and a
//! screenshot. Plain JSON over HTTP with the tests' reqwest, on loopback.
//!
//! Not the fantoccini crate: its `webdriver` dependency brings icu_segmenter
//! 1.5, whose yoke-derive turns on syn's `fold` feature; syn is a host
//! dependency of bindgen, so the test build would re-run librocksdb-sys's
//! build script (docs/contributing.md, "The RocksDB rebuild trap"). The
//! handful of commands below is all the console test needs, and it adds no
//! dependency.

use std::time::Duration;

use base64::Engine as _;
use serde_json::{Value, json};

/// The key of an element reference in WebDriver's JSON.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// One WebDriver session (one browser).
pub struct Session {
    http: reqwest::Client,
    /// `<driver>/session/<id>`.
    base: String,
}

/// An element reference of the current page.
pub struct Element(String);

impl Session {
    /// Starts a session with `capabilities` (the `alwaysMatch` object) on the
    /// driver at `driver` (`http://127.0.0.1:PORT`).
    ///
    /// # Errors
    /// The driver's error (its `error` and `message`), or the transport's.
    pub async fn start(driver: &str, capabilities: Value) -> Result<Session, String> {
        let http = reqwest::Client::builder()
            .no_proxy()
            // Starting a browser on a loaded 2-core machine can take a while.
            .timeout(Duration::from_secs(120))
            .build()
            .map_err(|e| e.to_string())?;
        let v = call(
            &http,
            reqwest::Method::POST,
            &format!("{driver}/session"),
            Some(json!({ "capabilities": { "alwaysMatch": capabilities } })),
        )
        .await?;
        let id = v["sessionId"]
            .as_str()
            .ok_or_else(|| format!("no sessionId in {v}"))?;
        Ok(Session {
            http,
            base: format!("{driver}/session/{id}"),
        })
    }

    async fn cmd(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, String> {
        call(&self.http, method, &format!("{}{path}", self.base), body).await
    }

    /// Navigates to `url` and waits for the page's load (WebDriver's
    /// default page load strategy).
    pub async fn goto(&self, url: &str) -> Result<(), String> {
        self.cmd(reqwest::Method::POST, "/url", Some(json!({ "url": url })))
            .await
            .map(drop)
    }

    /// Runs `script` (a function body; `arguments[i]` are `args`) in the
    /// page: what it returns, as JSON.
    pub async fn execute(&self, script: &str, args: Vec<Value>) -> Result<Value, String> {
        self.cmd(
            reqwest::Method::POST,
            "/execute/sync",
            Some(json!({ "script": script, "args": args })),
        )
        .await
    }

    /// The first element `css` matches (`no such element` when none does).
    pub async fn find(&self, css: &str) -> Result<Element, String> {
        let v = self
            .cmd(
                reqwest::Method::POST,
                "/element",
                Some(json!({ "using": "css selector", "value": css })),
            )
            .await?;
        v[ELEMENT]
            .as_str()
            .map(|id| Element(id.to_owned()))
            .ok_or_else(|| format!("no element reference in {v}"))
    }

    /// Clicks `el` as a user would (scrolled into view, at its centre; an
    /// error when another element would get the click).
    pub async fn click(&self, el: &Element) -> Result<(), String> {
        self.cmd(
            reqwest::Method::POST,
            &format!("/element/{}/click", el.0),
            Some(json!({})),
        )
        .await
        .map(drop)
    }

    /// Empties an input.
    pub async fn clear(&self, el: &Element) -> Result<(), String> {
        self.cmd(
            reqwest::Method::POST,
            &format!("/element/{}/clear", el.0),
            Some(json!({})),
        )
        .await
        .map(drop)
    }

    /// Types `text` into `el`.
    pub async fn send_keys(&self, el: &Element, text: &str) -> Result<(), String> {
        self.cmd(
            reqwest::Method::POST,
            &format!("/element/{}/value", el.0),
            Some(json!({ "text": text })),
        )
        .await
        .map(drop)
    }

    /// Sets the window's outer size, px.
    pub async fn set_window_size(&self, width: u32, height: u32) -> Result<(), String> {
        self.cmd(
            reqwest::Method::POST,
            "/window/rect",
            Some(json!({ "width": width, "height": height })),
        )
        .await
        .map(drop)
    }

    /// A PNG of the viewport.
    pub async fn screenshot(&self) -> Result<Vec<u8>, String> {
        let v = self.cmd(reqwest::Method::GET, "/screenshot", None).await?;
        let b64 = v
            .as_str()
            .ok_or_else(|| format!("the screenshot is not a string: {v}"))?;
        base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map_err(|e| e.to_string())
    }

    /// Ends the session (the driver quits the browser).
    pub async fn close(self) -> Result<(), String> {
        self.cmd(reqwest::Method::DELETE, "", None).await.map(drop)
    }
}

/// One command: its `value`, or the driver's error as text.
async fn call(
    http: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    body: Option<Value>,
) -> Result<Value, String> {
    let what = format!("{method} {url}");
    let mut req = http.request(method, url);
    if let Some(b) = body {
        req = req
            .header("content-type", "application/json")
            .body(b.to_string());
    }
    let resp = req.send().await.map_err(|e| format!("{what}: {e}"))?;
    let status = resp.status();
    let text = resp.text().await.map_err(|e| format!("{what}: {e}"))?;
    let v: Value =
        serde_json::from_str(&text).map_err(|_| format!("{what}: {status}, not JSON: {text}"))?;
    if !status.is_success() {
        return Err(format!(
            "{what}: {status} {}: {}",
            v["value"]["error"], v["value"]["message"]
        ));
    }
    Ok(v["value"].clone())
}
