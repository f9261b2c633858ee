//! End-to-end tests of the relay: the real `ankusa serve` binary, real HTTP
//! clients posting hooks, and a real HTTP server as the http sink's
//! destination. One test binary for the root package (link size: RocksDB).
#![allow(dead_code)]

mod admin;
mod etcd;
mod history;
mod peer;
mod relay;
mod sink;

mod admin_access;
mod admin_input;
mod attempt_log;
mod backup;
mod bounds;
mod breaker;
mod challenge;
mod cli;
mod cluster;
mod config;
mod console;
mod corpus;
mod crash;
mod damage;
mod dashboard;
mod dedupe;
mod dump;
mod faults;
mod filter;
mod hangup;
mod held_lane;
#[cfg(feature = "kafka")]
mod kafka;
mod keyed;
mod lane_seq;
mod leaks;
mod limits;
mod logs;
mod metrics;
mod migrate;
mod moved_source;
#[cfg(feature = "nats")]
mod nats;
mod notify;
mod ordering;
#[cfg(feature = "otel")]
mod otel;
mod pause;
mod provider;
#[cfg(feature = "pubsub")]
mod pubsub;
mod purge;
mod quarantine;
#[cfg(feature = "rabbitmq")]
mod rabbitmq;
mod ratelimit;
#[cfg(feature = "redis")]
mod redis;
mod reload;
mod replay;
mod restart;
mod retention;
mod retire;
mod retry;
mod revive;
mod routes;
mod send;
mod shutdown;
mod signing;
#[cfg(feature = "sqs")]
mod sqs;
mod startup;
mod starvation;
mod store;
mod stripe;
mod takeover;
mod top;
mod transform;
mod unconfigured;
mod webdriver;
