//! Slack's Events API handshake (docs/design.md section 5): when a request URL is
//! saved, Slack sends a signed `url_verification` event and expects its
//! `challenge` back in the response. A store-and-forward relay must answer it
//! itself, or Slack never enables the URL. The edge verifies the signature
//! first ([`crate::verify`]), then answers with [`challenge_response`] and
//! stores nothing.

use crate::ParsedBody;

/// The challenge of a Slack `url_verification` body: a JSON object whose
/// `type` is `"url_verification"` and whose `challenge` is a string. `None`
/// for any other body (an `event_callback`, a form-encoded slash command, not
/// JSON, over [`crate::JSON_KEY_MAX_BYTES`]). Shares `body`'s JSON decode.
pub fn url_verification_challenge<'a>(body: &'a ParsedBody<'_>) -> Option<&'a str> {
    if body.str_at(&["type".to_owned()])? != "url_verification" {
        return None;
    }
    body.str_at(&["challenge".to_owned()])
}

/// The 200 response body for a challenge: `{"challenge":"..."}`, to send with
/// `Content-Type: application/json` (Slack also accepts the bare challenge as
/// text/plain; JSON escapes any byte safely).
pub fn challenge_response(challenge: &str) -> Vec<u8> {
    let mut map = serde_json::Map::new();
    map.insert(
        "challenge".to_owned(),
        serde_json::Value::String(challenge.to_owned()),
    );
    serde_json::Value::Object(map).to_string().into_bytes()
}
