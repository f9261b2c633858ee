//! End-to-end tests of the relay: the real `ankusa serve` binary, real HTTP
//! clients posting hooks, and a real HTTP server as the http sink's
//! destination. One test binary for the root package (link size: RocksDB).
#![allow(dead_code)]

mod peer;
mod relay;
mod sink;

mod admin;
mod breaker;
mod breakit;
mod challenge;
mod config;
mod console;
mod corpus;
mod crash;
mod damage;
mod dashboard;
mod dump;
mod faults;
mod filter;
mod hangup;
mod ingest;
#[cfg(feature = "kafka")]
mod kafka;
mod leaks;
mod limits;
mod logs;
mod metrics;
mod migrate;
#[cfg(feature = "nats")]
mod nats;
mod operate;
mod ops;
mod ordering;
#[cfg(feature = "otel")]
mod otel;
mod provider;
#[cfg(feature = "pubsub")]
mod pubsub;
#[cfg(feature = "rabbitmq")]
mod rabbitmq;
mod ratelimit;
#[cfg(feature = "redis")]
mod redis;
mod restart;
mod retry;
mod routes;
mod send;
mod signing;
#[cfg(feature = "sqs")]
mod sqs;
mod starvation;
mod store;
mod stripe;
mod top;
mod webdriver;
