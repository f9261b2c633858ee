//! The operator console (docs/design.md section 5, "Operator console"): one
//! HTML page, one script and one style sheet in `console/` beside this file,
//! compiled into the binary (`include_str!`) and served by the admin listener
//! at [`PAGE`] and its assets under `/console/`.
//!
//! The files hold no data, so they are served without the admin token; the
//! page asks the operator for the token (kept in the tab's sessionStorage)
//! and reads everything it shows from the admin API and `/metrics` with
//! `Authorization: Bearer`. Every console answer carries [`CSP`], a strict
//! Content-Security-Policy: scripts, styles and API calls from the listener's
//! own origin only, no inline script or style, no frames, no form posts. The
//! script sets every value the API returns as text (never `innerHTML`); a
//! test below holds the files to both rules.

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{CACHE_CONTROL, CONTENT_TYPE, HeaderName, HeaderValue};
use hyper::{Response, StatusCode};

/// The console page's path.
pub const PAGE: &str = "/console";
/// The script's path.
pub const SCRIPT: &str = "/console/console.js";
/// The style sheet's path.
pub const STYLE: &str = "/console/console.css";

/// The Content-Security-Policy of every console answer: everything from the
/// admin listener's own origin (`'self'`), no inline script or style (neither
/// `'unsafe-inline'` nor `'unsafe-eval'`), images also as `data:` (the empty
/// favicon), no plugins, no `<base>`, no framing, no form submission.
pub const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                       connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'none'";

const INDEX_HTML: &str = include_str!("console/index.html");
const CONSOLE_JS: &str = include_str!("console/console.js");
const CONSOLE_CSS: &str = include_str!("console/console.css");

/// The console's files as `(path, content type, body)`.
pub const FILES: &[(&str, &str, &str)] = &[
    (PAGE, "text/html; charset=utf-8", INDEX_HTML),
    (SCRIPT, "text/javascript; charset=utf-8", CONSOLE_JS),
    (STYLE, "text/css; charset=utf-8", CONSOLE_CSS),
];

/// True when `path` is one of the console's files (served without the
/// token).
pub fn is_console_path(path: &str) -> bool {
    FILES.iter().any(|(p, _, _)| *p == path)
}

/// The answer to `GET path` for a console file: 200 with its content type,
/// [`CSP`], `nosniff`, no referrer, no framing, and `no-cache` (a new binary's
/// files are picked up at once); `None` when `path` is not a console file.
pub(crate) fn response(path: &str) -> Option<Response<Full<Bytes>>> {
    let (_, content_type, body) = FILES.iter().find(|(p, _, _)| *p == path)?;
    let mut r = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *r.status_mut() = StatusCode::OK;
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(
        HeaderName::from_static("content-security-policy"),
        HeaderValue::from_static(CSP),
    );
    h.insert(
        HeaderName::from_static("x-content-type-options"),
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        HeaderName::from_static("referrer-policy"),
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(
        HeaderName::from_static("x-frame-options"),
        HeaderValue::from_static("DENY"),
    );
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    Some(r)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn every_file_is_answered_with_the_policy() {
        for (path, content_type, body) in FILES {
            let r = response(path).unwrap();
            assert_eq!(r.status(), StatusCode::OK);
            assert_eq!(r.headers()[CONTENT_TYPE], *content_type);
            assert_eq!(r.headers()["content-security-policy"], CSP);
            assert_eq!(r.headers()["x-content-type-options"], "nosniff");
            assert!(!body.is_empty(), "{path}");
            assert!(is_console_path(path));
        }
        assert!(response("/console/").is_none());
        assert!(!is_console_path("/console/other.js"));
        assert!(!is_console_path("/v1/tenants"));
    }

    /// The policy allows no inline code and no other origin.
    #[test]
    fn the_policy_is_strict() {
        for bad in ["unsafe-inline", "unsafe-eval", "*", "http:", "https:"] {
            assert!(!CSP.contains(bad), "{bad} in {CSP}");
        }
        assert!(CSP.starts_with("default-src 'self';"));
        assert!(CSP.contains("script-src 'self';"));
    }

    /// The page loads its script and style from the listener (no inline
    /// `<script>`, `<style>`, `style=` or `on...=` handler, which the policy
    /// would block), and the script never turns text into markup.
    #[test]
    fn the_files_have_no_inline_code_and_the_script_no_html_sinks() {
        let html = INDEX_HTML.to_ascii_lowercase();
        let scripts: Vec<&str> = html
            .match_indices("<script")
            .map(|(i, _)| &html[i..i + html[i..].find('>').unwrap()])
            .collect();
        assert_eq!(scripts, [r#"<script src="/console/console.js" defer"#]);
        assert!(html.contains(r#"<link rel="stylesheet" href="/console/console.css">"#));
        assert!(!html.contains("<style"));
        assert!(!html.contains(" style="));
        // An event handler attribute: ` on` + letters + `=` inside a tag.
        for (i, _) in html.match_indices(" on") {
            let rest = &html[i + 3..];
            let name: String = rest.chars().take_while(char::is_ascii_alphabetic).collect();
            assert!(
                !(name.len() > 2 && rest[name.len()..].starts_with('=')),
                "an inline handler on{name}= in index.html"
            );
        }
        for sink in [
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "document.write",
            "eval(",
            "new Function",
            "setAttribute('style",
        ] {
            assert!(!CONSOLE_JS.contains(sink), "console.js uses {sink}");
        }
    }
}
