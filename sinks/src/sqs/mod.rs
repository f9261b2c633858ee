//! The SQS sink (cargo feature `sqs`, default on): one `SendMessage` per hook
//! to one queue, standard or FIFO (docs/design.md sections 6 and 10, ADR 0004
//! section 6).
//!
//! # The message
//! - Body: the stored body, unchanged, as the message body. SQS bodies are
//!   XML text: UTF-8 of the characters `#x9 | #xA | #xD | #x20-#xD7FF |
//!   #xE000-#xFFFD | #x10000-#x10FFFF`. With `body_encoding: raw` (the
//!   default) a body that is not valid UTF-8 or holds another character (a
//!   NUL, a control byte, U+FFFE) is [`Outcome::Permanent`](crate::Outcome)
//!   with the byte offset in the reason, before any call: SQS would refuse it
//!   every time. With `body_encoding: base64` every body is sent
//!   base64-encoded (standard alphabet, padded) with the attribute
//!   `ankusa_body_encoding = base64`, so any bytes travel (at 4/3 of their
//!   size). An empty body is refused by SQS: Permanent.
//! - Message attributes, all of data type `String`: the metadata of
//!   [`crate::DeliveryCtx::attributes`] (`ankusa_message_version` = `"1"`,
//!   `ankusa_idempotency_key`, `ankusa_tenant`, `ankusa_source`,
//!   `ankusa_received_at` in unix ms, and for a laned row
//!   `ankusa_ordering_key`), `content_type` (the provider's content type,
//!   from the context or the stored `content-type` header; absent if none)
//!   and `ankusa_body_encoding` in base64 mode. An attribute value's
//!   characters that SQS refuses become U+FFFD (a non-UTF-8 ordering key
//!   already reads lossily); the MessageGroupId below keeps the key exact.
//!   With `forward_headers`, the chosen provider headers too, named as the
//!   lower-case header, in what is left of SQS's 10 attributes and of
//!   `max_message_bytes` ([`crate::forward`],
//!   [`FORWARD_MEDIUM`](crate::sqs::FORWARD_MEDIUM)).
//! - Size: SQS counts the body plus each attribute's name, type and value.
//!   Over `max_message_bytes` (default 262,144 = 256 KiB, SQS's classic
//!   limit) is Permanent before any call; no fallback (no S3 offload, no
//!   truncation). A queue whose `MaximumMessageSize` is larger (up to 1 MiB
//!   since 2025) may raise the option to match.
//!
//! # FIFO queues and ordered mode
//! A queue URL ending `.fifo` is a FIFO queue. Every message gets
//! `MessageDeduplicationId` = `"<idempotency key>.<sink index>"`
//! ([`crate::DeliveryCtx::broker_dedupe_id`]: a redelivery to this sink within
//! SQS's 5-minute window is dropped by the queue, while the hook's other sinks
//! writing into the same queue are not mistaken for duplicates) and a `MessageGroupId`:
//! - a laned row: the lane's ordering key ([`crate::DeliveryCtx::ordering_key`];
//!   the keyless lane's is `"<tenant>/<source>"`), as is when it is 1 to 128
//!   ASCII letters, digits and punctuation, else `"sha256:"` + the hex of
//!   sha256 of its bytes (docs/design.md section 10; [`message_group_id`]);
//! - a row that is not laned: the idempotency key, a group of its own, so no
//!   order is implied and consumers may take such hooks in parallel.
//!
//! The pipeline hands a lane's hooks over one at a time, each after the
//! previous was accepted, and SQS keeps a group's order for its consumers:
//! per-key order holds end to end (a consumer sees a redelivered head again
//! before later hooks, ADR 0004). `ordered: true` with a queue URL not ending
//! `.fifo` is a load error (the config crate's rule, and
//! [`SqsSinkConfig::validate`]'s). A standard queue gets neither id; a laned
//! row (ingested while the sink was ordered) sent to a standard queue after
//! a config change goes out in lane order with its `ankusa_ordering_key`
//! attribute, and the queue does not keep that order.
//!
//! # Outcomes
//! | answer | outcome |
//! | --- | --- |
//! | a message id | [`Outcome::Ok`](crate::Outcome::Ok) |
//! | body not UTF-8 or with a refused character (raw), empty, over `max_message_bytes` | `Permanent` (no call) |
//! | timeout (`timeout_ms`), connection refused/reset, DNS, TLS, an unreadable answer, no credentials yet | `Retry` |
//! | `Throttling`/`ThrottlingException`/`RequestThrottled`/`KmsThrottled`, `ServiceUnavailable`, `InternalError`, any 5xx or 429 | `Retry` |
//! | expired or unknown credentials, bad signature (`ExpiredToken`, `InvalidClientTokenId`, `SignatureDoesNotMatch`, ...) | `Retry` (credentials rotate; the chain refreshes them) |
//! | `AccessDenied`, `InvalidParameterValue`, `InvalidMessageContents`, `InvalidAttributeName/Value`, `MissingParameter`, `UnsupportedOperation`, KMS key errors, any other 4xx | `Permanent` |
//! | `AWS.SimpleQueueService.NonExistentQueue` / `QueueDoesNotExist` | `SinkGone` |
//!
//! SQS sends no Retry-After: `after` is always `None`.
//!
//! # Client, region, credentials
//! One SDK client per sink ([`aws_sdk_sqs::Client`]); its HTTP client is
//! aws-smithy-http-client's hyper 1.x client over rustls with the `ring`
//! provider and the platform's root certificates, like the HTTP sink (no
//! aws-lc-sys). SDK retries are off: the pipeline retries with its backoff.
//! `timeout_ms` bounds connecting, each attempt and the operation.
//! Region: `region`, else the queue URL's (`sqs.<region>.amazonaws.com`),
//! else the standard chain (`AWS_REGION`, profile, IMDS). Credentials: the
//! standard chain (environment, shared files and `credential_process`, web
//! identity, ECS, IMDS), resolved on the first delivery and cached, so
//! [`SqsSink::new`] works while the endpoint is down and the first
//! deliveries retry. `endpoint_url` points the client elsewhere (moto,
//! LocalStack, a VPC endpoint).

mod config;
mod sink;

pub use config::{
    BodyEncoding, DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_TIMEOUT_MS, FORWARD_MEDIUM, MAX_ATTRIBUTES,
    MAX_MESSAGE_BYTES_LIMIT, MIN_MESSAGE_BYTES, OWN_ATTRIBUTES_AT_LEAST, SqsSinkConfig,
    StaticCredentials, sqs_attribute_name, sqs_attribute_value,
};
pub use sink::{
    BODY_ENCODING_ATTR, CONTENT_TYPE_ATTR, ErrorClass, MAX_GROUP_ID_CHARS, SqsSink,
    classify_service_error, message_group_id, raw_body, sqs_char_allowed,
};
