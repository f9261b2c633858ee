//! The SQS sink's delivery: the SendMessage request and the answer's
//! [`Outcome`].

use std::borrow::Cow;
use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use aws_config::BehaviorVersion;
use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_sdk_sqs::config::http::HttpResponse;
use aws_sdk_sqs::config::{Credentials, Region};
use aws_sdk_sqs::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_sqs::types::MessageAttributeValue;
use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode};
use base64::Engine as _;
use sha2::Digest as _;

use super::config::{BodyEncoding, MAX_ATTRIBUTES, SqsSinkConfig};
use crate::forward::{ForwardHeaders, Medium, Room};
use crate::{DeliveryCtx, Envelope, Outcome, Sink, SinkError};

/// The message attribute holding the provider's content type.
pub const CONTENT_TYPE_ATTR: &str = "content_type";
/// The message attribute saying the body is base64 (`body_encoding: base64`).
pub const BODY_ENCODING_ATTR: &str = "ankusa_body_encoding";
/// The longest MessageGroupId SQS accepts, characters.
pub const MAX_GROUP_ID_CHARS: usize = 128;
/// The data type of every attribute the sink sends.
const STRING: &str = "String";

/// SendMessages each hook to one queue (module docs: [`crate::sqs`]).
pub struct SqsSink {
    client: aws_sdk_sqs::Client,
    queue_url: String,
    fifo: bool,
    body_encoding: BodyEncoding,
    max_message_bytes: u64,
    timeout: Duration,
    /// The stored headers each message carries (`forward_headers`), on this
    /// medium.
    forward: ForwardHeaders,
    medium: Medium,
}

impl std::fmt::Debug for SqsSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqsSink")
            .field("queue_url", &self.queue_url)
            .field("fifo", &self.fifo)
            .field("body_encoding", &self.body_encoding)
            .field("max_message_bytes", &self.max_message_bytes)
            .field("timeout", &self.timeout)
            .field("forward", &self.forward)
            .finish_non_exhaustive()
    }
}

impl SqsSink {
    /// Validates `config` and builds the SDK client: region and credential
    /// providers (module docs), the HTTP client (hyper over rustls with
    /// ring), timeouts, SDK retries off. It sends nothing and does not
    /// resolve credentials (the first delivery does), so it works while the
    /// endpoint is down. With neither `region` nor a region in the queue URL
    /// it asks the standard region chain, which may query the instance
    /// metadata service (a few seconds when there is none).
    ///
    /// # Errors
    /// [`SinkError::InvalidOption`] for a bad config (naming the option), and
    /// [`SinkError::Setup`] when no region can be found.
    pub async fn new(config: &SqsSinkConfig) -> Result<SqsSink, SinkError> {
        config.validate()?;
        let timeout = Duration::from_millis(config.timeout_ms);
        let http = aws_smithy_http_client::Builder::new()
            .tls_provider(tls::Provider::Rustls(CryptoMode::Ring))
            .build_https();
        // The pipeline owns retrying (backoff with jitter, the retry
        // horizon): one attempt per delivery.
        let mut loader = aws_config::defaults(BehaviorVersion::latest())
            .http_client(http)
            .retry_config(RetryConfig::disabled())
            .timeout_config(
                TimeoutConfig::builder()
                    .connect_timeout(timeout)
                    .operation_attempt_timeout(timeout)
                    .operation_timeout(timeout)
                    .build(),
            );
        let region = config
            .region
            .as_deref()
            .or_else(|| config.region_from_url())
            .map(|r| Region::new(r.to_owned()));
        if let Some(region) = region {
            loader = loader.region(region);
        }
        if let Some(c) = &config.credentials {
            loader = loader.credentials_provider(Credentials::new(
                c.access_key_id.clone(),
                c.secret_access_key.clone(),
                None,
                None,
                "ankusa-static",
            ));
        }
        if let Some(endpoint) = &config.endpoint_url {
            loader = loader.endpoint_url(endpoint.clone());
        }
        let sdk_config = loader.load().await;
        if sdk_config.region().is_none() {
            return Err(SinkError::Setup(format!(
                "SQS sink for {}: no AWS region (set the sink's `region`, or AWS_REGION)",
                config.queue_url
            )));
        }
        Ok(SqsSink {
            client: aws_sdk_sqs::Client::new(&sdk_config),
            queue_url: config.queue_url.clone(),
            fifo: config.is_fifo(),
            body_encoding: config.body_encoding,
            max_message_bytes: config.max_message_bytes,
            timeout,
            forward: config.forward_headers.clone(),
            medium: config.forward_medium(),
        })
    }

    /// The message: body, attributes, and for a FIFO queue the group and
    /// deduplication ids; or the Permanent outcome of a hook SQS would refuse.
    fn message(&self, hook: &Envelope, ctx: &DeliveryCtx) -> Result<Message, Outcome> {
        let body: Cow<'_, str> = match self.body_encoding {
            BodyEncoding::Raw => Cow::Borrowed(raw_body(&hook.body).map_err(Outcome::permanent)?),
            BodyEncoding::Base64 => {
                Cow::Owned(base64::engine::general_purpose::STANDARD.encode(&hook.body))
            }
        };
        if body.is_empty() {
            return Err(Outcome::permanent(
                "SQS refuses an empty message body, and the hook's body is empty",
            ));
        }
        let mut attributes: Vec<(String, String)> = ctx
            .attributes()
            .into_iter()
            .map(|(name, value)| (name.to_owned(), attribute_text(&value).into_owned()))
            .collect();
        let content_type = ctx.content_type.as_deref().map(Cow::Borrowed).or_else(|| {
            hook.headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(b"content-type"))
                .map(|(_, v)| String::from_utf8_lossy(v))
        });
        if let Some(ct) = content_type.filter(|ct| !ct.is_empty()) {
            attributes.push((
                CONTENT_TYPE_ATTR.to_owned(),
                attribute_text(&ct).into_owned(),
            ));
        }
        if self.body_encoding == BodyEncoding::Base64 {
            attributes.push((BODY_ENCODING_ATTR.to_owned(), "base64".to_owned()));
        }
        // SQS refuses an attribute with an empty value.
        attributes.retain(|(_, v)| !v.is_empty());
        let size = message_size(&body, &attributes);
        if size > self.max_message_bytes {
            return Err(Outcome::permanent(format!(
                "message of {size} bytes (body {} bytes, encoding {}, plus attributes) is over the \
                 limit of {} bytes (max_message_bytes)",
                body.len(),
                match self.body_encoding {
                    BodyEncoding::Raw => "raw",
                    BodyEncoding::Base64 => "base64",
                },
                self.max_message_bytes
            )));
        }
        // The chosen provider headers in what is left of SQS's 10 attributes
        // and of max_message_bytes: what does not fit is dropped, never the
        // hook.
        let room = Room {
            count: MAX_ATTRIBUTES.saturating_sub(attributes.len()),
            bytes: usize::try_from(self.max_message_bytes - size).unwrap_or(usize::MAX),
        };
        for (name, value) in self.forward.select(&self.medium, hook, ctx, room) {
            // The medium takes only values SQS allows as they are (UTF-8).
            if let Ok(value) = String::from_utf8(value) {
                attributes.push((name, value));
            }
        }
        let (group_id, dedup_id) = if self.fifo {
            let group = match ctx.ordering_key() {
                Some(key) => message_group_id(key),
                // Not laned: a group of its own, so no order is implied and
                // consumers may take these hooks in parallel.
                None => ctx.idempotency_key.clone(),
            };
            (Some(group), Some(ctx.broker_dedupe_id()))
        } else {
            (None, None)
        };
        Ok(Message {
            body: body.into_owned(),
            attributes,
            group_id,
            dedup_id,
        })
    }
}

/// One SendMessage's fields.
struct Message {
    body: String,
    attributes: Vec<(String, String)>,
    group_id: Option<String>,
    dedup_id: Option<String>,
}

#[async_trait]
impl Sink for SqsSink {
    async fn deliver(&self, hook: &Envelope, ctx: &DeliveryCtx) -> Outcome {
        let message = match self.message(hook, ctx) {
            Ok(m) => m,
            Err(outcome) => return outcome,
        };
        let mut attributes = HashMap::with_capacity(message.attributes.len());
        for (name, value) in message.attributes {
            match MessageAttributeValue::builder()
                .data_type(STRING)
                .string_value(value)
                .build()
            {
                Ok(v) => {
                    attributes.insert(name, v);
                }
                // Only a missing data type fails, and it is set above.
                Err(e) => return Outcome::permanent(format!("SQS attribute {name}: {e}")),
            }
        }
        let request = self
            .client
            .send_message()
            .queue_url(&self.queue_url)
            .message_body(message.body)
            .set_message_attributes(Some(attributes))
            .set_message_group_id(message.group_id)
            .set_message_deduplication_id(message.dedup_id);
        // The SDK's operation timeout bounds the call; this bounds it too,
        // credential resolution included.
        let bound = self.timeout.saturating_mul(2);
        match tokio::time::timeout(bound, request.send()).await {
            Err(_) => Outcome::retry(format!(
                "SQS SendMessage: no answer within {} ms",
                bound.as_millis()
            )),
            Ok(Ok(_)) => Outcome::Ok,
            Ok(Err(e)) => classify(&e),
        }
    }

    fn kind(&self) -> &'static str {
        "sqs"
    }

    fn pipelined(&self) -> bool {
        true
    }
}

/// The outcome of a failed SendMessage.
fn classify<E>(e: &SdkError<E, HttpResponse>) -> Outcome
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    match e {
        SdkError::ServiceError(service) => {
            let err = service.err();
            let code = err.code().unwrap_or("");
            let message = err.message().unwrap_or("");
            let status = Some(service.raw().status().as_u16());
            let reason = format!(
                "SQS SendMessage: {}{}{}",
                if code.is_empty() { "error" } else { code },
                status.map_or(String::new(), |s| format!(" (HTTP {s})")),
                if message.is_empty() {
                    String::new()
                } else {
                    format!(": {}", truncate(message, 300))
                }
            );
            match classify_service_error(code, status) {
                ErrorClass::Retry => Outcome::retry(reason),
                ErrorClass::Permanent => Outcome::permanent(reason),
                ErrorClass::SinkGone => Outcome::SinkGone { reason },
            }
        }
        // Timeouts, connection refused/reset, DNS, TLS, an unreadable
        // answer, and a request that could not be built or signed (no
        // credentials yet): nothing says the hook is at fault.
        other => Outcome::retry(format!(
            "SQS SendMessage: {}",
            truncate(&error_chain(other), 400)
        )),
    }
}

/// An error and its sources, `: `-joined (the SDK's Display is terse:
/// "dispatch failure").
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// What an SQS service error comes to (module docs: the Outcome table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorClass {
    /// Try again later.
    Retry,
    /// The message is refused and would be again.
    Permanent,
    /// The queue does not exist.
    SinkGone,
}

/// Classifies an SQS error by its code (the query-protocol form,
/// `AWS.SimpleQueueService.NonExistentQueue`, or the JSON-protocol form,
/// `QueueDoesNotExist`) and, for a code it does not name, by the HTTP
/// status: 5xx and 429 retry, any other status is permanent.
pub fn classify_service_error(code: &str, status: Option<u16>) -> ErrorClass {
    // The JSON protocol may send `com.amazonaws.sqs#QueueDoesNotExist`.
    let code = code.rsplit('#').next().unwrap_or(code);
    let short = code.strip_prefix("AWS.SimpleQueueService.").unwrap_or(code);
    match short {
        "NonExistentQueue" | "QueueDoesNotExist" | "QueueDeletedRecently" => ErrorClass::SinkGone,
        "Throttling"
        | "ThrottlingException"
        | "RequestThrottled"
        | "KmsThrottled"
        | "ServiceUnavailable"
        | "InternalError"
        | "InternalFailure"
        | "RequestTimeout"
        | "RequestTimeoutException"
        | "ExpiredToken"
        | "ExpiredTokenException"
        | "RequestExpired"
        | "InvalidClientTokenId"
        | "UnrecognizedClientException"
        | "SignatureDoesNotMatch"
        | "IncompleteSignature"
        | "InvalidSignatureException" => ErrorClass::Retry,
        "AccessDenied"
        | "AccessDeniedException"
        | "InvalidParameterValue"
        | "InvalidMessageContents"
        | "InvalidAttributeName"
        | "InvalidAttributeValue"
        | "MissingParameter"
        | "UnsupportedOperation"
        | "InvalidAddress"
        | "InvalidSecurity"
        | "KmsAccessDenied"
        | "KmsDisabled"
        | "KmsInvalidKeyUsage"
        | "KmsInvalidState"
        | "KmsNotFound"
        | "KmsOptInRequired" => ErrorClass::Permanent,
        _ => match status {
            Some(s) if s >= 500 || s == 429 => ErrorClass::Retry,
            Some(_) => ErrorClass::Permanent,
            // No status: not an answer of SQS's.
            None => ErrorClass::Retry,
        },
    }
}

/// The MessageGroupId for an ordering key (docs/design.md section 10): the key
/// itself when it is 1 to 128 characters, each an ASCII letter, digit or
/// punctuation mark (`!"#$%&'()*+,-./:;<=>?@[\]^_`{|}~`); otherwise (a space,
/// a control byte, non-ASCII, over 128) `"sha256:"` and the lower-case hex of
/// sha256 of the key's bytes, so every key still gets one stable group.
pub fn message_group_id(key: &[u8]) -> String {
    let legal = !key.is_empty()
        && key.len() <= MAX_GROUP_ID_CHARS
        && key.iter().all(|b| b.is_ascii_graphic());
    match std::str::from_utf8(key) {
        Ok(text) if legal => text.to_owned(),
        _ => format!("sha256:{}", hex(&sha2::Sha256::digest(key))),
    }
}

fn hex(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(HEX[usize::from(b >> 4)]));
        s.push(char::from(HEX[usize::from(b & 0xf)]));
    }
    s
}

/// Whether SQS accepts `c` in a message body or a String attribute: `#x9 |
/// #xA | #xD | #x20-#xD7FF | #xE000-#xFFFD | #x10000-#x10FFFF` (surrogates
/// are not `char`s).
pub fn sqs_char_allowed(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | ' '..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..='\u{10FFFF}')
}

/// The body as SQS text, or why SQS would refuse it (raw encoding).
pub fn raw_body(body: &[u8]) -> Result<&str, String> {
    let text = std::str::from_utf8(body).map_err(|e| {
        format!(
            "body is not valid UTF-8 (at byte {}); SQS message bodies are text: use \
             `body_encoding: base64` for binary bodies",
            e.valid_up_to()
        )
    })?;
    if let Some((at, c)) = text.char_indices().find(|&(_, c)| !sqs_char_allowed(c)) {
        return Err(format!(
            "body has U+{:04X} at byte {at}, a character SQS refuses in a message body; use \
             `body_encoding: base64` for such bodies",
            u32::from(c)
        ));
    }
    Ok(text)
}

/// An attribute value with every character SQS refuses replaced by U+FFFD.
fn attribute_text(value: &str) -> Cow<'_, str> {
    if value.chars().all(sqs_char_allowed) {
        Cow::Borrowed(value)
    } else {
        Cow::Owned(
            value
                .chars()
                .map(|c| if sqs_char_allowed(c) { c } else { '\u{FFFD}' })
                .collect(),
        )
    }
}

/// The message's size as SQS counts it: the body plus each attribute's
/// name, data type and value, bytes.
fn message_size<N: AsRef<str>>(body: &str, attributes: &[(N, String)]) -> u64 {
    let attrs: usize = attributes
        .iter()
        .map(|(n, v)| n.as_ref().len() + STRING.len() + v.len())
        .sum();
    u64::try_from(body.len() + attrs).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_ids() {
        assert_eq!(message_group_id(b"cus_123"), "cus_123");
        assert_eq!(message_group_id(b"acme/stripe"), "acme/stripe");
        let punct = br##"!"#$%&'()*+,-./:;<=>?@[\]^_`{|}~"##;
        assert_eq!(
            message_group_id(punct),
            std::str::from_utf8(punct).unwrap_or("")
        );
        let max = [b'k'; 128];
        assert_eq!(message_group_id(&max), "k".repeat(128));
        let hashed = |k: &[u8]| format!("sha256:{}", hex(&sha2::Sha256::digest(k)));
        for k in [
            &[b'k'; 129][..],
            b"a b",
            b"caf\xc3\xa9",
            b"a\xffb",
            b"tab\t",
            b"",
        ] {
            assert_eq!(message_group_id(k), hashed(k), "{k:?}");
        }
        assert_eq!(hashed(b"a b").len(), 7 + 64);
        assert_eq!(
            message_group_id(b"a b"),
            "sha256:c8687a08aa5d6ed2044328fa6a697ab8e96dc34291e8c2034ae8c38e6fcc6d65"
        );
    }

    #[test]
    fn body_characters() {
        assert_eq!(
            raw_body(b"{\"a\":\"\xc3\xa9\"}\t\r\n"),
            Ok("{\"a\":\"é\"}\t\r\n")
        );
        assert!(raw_body(b"a\xffb").is_err_and(|r| r.contains("not valid UTF-8")));
        assert!(raw_body(b"a\x00b").is_err_and(|r| r.contains("U+0000")));
        assert!(raw_body(b"a\x1fb").is_err_and(|r| r.contains("U+001F")));
        assert!(raw_body("\u{FFFE}".as_bytes()).is_err_and(|r| r.contains("U+FFFE")));
        assert!(raw_body("\u{FFFD}\u{10FFFF}\u{E000}\u{D7FF}".as_bytes()).is_ok());
        assert_eq!(attribute_text("a\u{1}b"), "a\u{FFFD}b");
        assert!(matches!(attribute_text("plain"), Cow::Borrowed("plain")));
    }

    #[test]
    fn service_errors() {
        use ErrorClass::*;
        assert_eq!(
            classify_service_error("AWS.SimpleQueueService.NonExistentQueue", Some(400)),
            SinkGone
        );
        assert_eq!(
            classify_service_error("QueueDoesNotExist", Some(400)),
            SinkGone
        );
        assert_eq!(
            classify_service_error("com.amazonaws.sqs#QueueDoesNotExist", Some(400)),
            SinkGone
        );
        assert_eq!(
            classify_service_error("ThrottlingException", Some(400)),
            Retry
        );
        assert_eq!(classify_service_error("RequestThrottled", Some(403)), Retry);
        assert_eq!(classify_service_error("AccessDenied", Some(403)), Permanent);
        assert_eq!(
            classify_service_error("InvalidParameterValue", Some(400)),
            Permanent
        );
        assert_eq!(
            classify_service_error("InvalidMessageContents", Some(400)),
            Permanent
        );
        assert_eq!(classify_service_error("Whatever", Some(503)), Retry);
        assert_eq!(classify_service_error("", Some(500)), Retry);
        assert_eq!(classify_service_error("", Some(429)), Retry);
        assert_eq!(classify_service_error("Whatever", Some(400)), Permanent);
    }

    #[test]
    fn sizes_count_names_types_and_values() {
        assert_eq!(
            message_size("abc", &[("n", "vv".to_owned())]),
            3 + 1 + 6 + 2
        );
    }
}
