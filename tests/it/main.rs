//! End-to-end tests of issue 4: the real `ankusa serve` binary, real HTTP
//! clients posting hooks, and a real HTTP server as the http sink's
//! destination. One test binary for the root package (link size: RocksDB).
#![allow(dead_code)]

mod relay;
mod sink;
mod peer;

mod corpus;
mod ordering;
mod restart;
mod ingest;
mod config;
mod send;
mod routes;
mod starvation;
mod breakit;
mod ops;
mod breaker;
mod ratelimit;
mod challenge;
mod admin;
mod operate;
mod stripe;
mod retry;
mod filter;
mod signing;
mod provider;
mod leaks;
mod limits;
mod faults;
mod store;
mod damage;
mod dump;
mod migrate;
mod crash;
mod hangup;
mod metrics;
mod dashboard;
mod logs;
mod top;
mod console;
mod webdriver;
#[cfg(feature = "redis")]
mod redis;
#[cfg(feature = "rabbitmq")]
mod rabbitmq;
#[cfg(feature = "nats")]
mod nats;
#[cfg(feature = "kafka")]
mod kafka;
#[cfg(feature = "pubsub")]
mod pubsub;
#[cfg(feature = "sqs")]
mod sqs;
#[cfg(feature = "otel")]
mod otel;
