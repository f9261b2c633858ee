//! Slack's url_verification handshake.

use ankusa_edge::ParsedBody;
use ankusa_edge::slack::{challenge_response, url_verification_challenge};

use crate::corpus;

#[test]
fn url_verification_returns_the_challenge_after_the_signature_verifies() {
    let hook = corpus::hook("slack/url_verification.json");
    let v = hook.verifier().expect("signed");
    assert!(v.verify(&hook.headers(), &hook.body, hook.now_ms()).is_ok());
    let body = ParsedBody::new(&hook.body);
    let challenge = url_verification_challenge(&body);
    assert_eq!(
        challenge,
        Some("3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P")
    );
    assert_eq!(
        challenge_response(challenge.expect("challenge")),
        br#"{"challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"}"#
    );
    assert_eq!(challenge_response("a\"b\\"), br#"{"challenge":"a\"b\\"}"#);
}

#[test]
fn other_bodies_are_not_a_challenge() {
    for file in [
        "slack/event_callback_app_mention.json",
        "slack/slash_command_docs_vector.json",
        "github/ping.json",
        "salesforce/opportunity_outbound_message.json",
    ] {
        let hook = corpus::hook(file);
        assert_eq!(
            url_verification_challenge(&ParsedBody::new(&hook.body)),
            None,
            "{file}"
        );
    }
    for raw in [
        &br#"{"type":"url_verification"}"#[..],
        br#"{"type":"url_verification","challenge":42}"#,
        br#"{"type":"event_callback","challenge":"x"}"#,
        br#"{"challenge":"x"}"#,
    ] {
        assert_eq!(url_verification_challenge(&ParsedBody::new(raw)), None);
    }
}
