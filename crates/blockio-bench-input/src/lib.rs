//! What `blockio-bench` takes from outside: the names of its reading
//! strategies ([`strategy`]) and of the runtimes its servers run on
//! ([`runtime`]), given on its command line, and the HTTP requests its
//! servers parse from the network ([`http`]).
//!
//! These parsers are fuzzed (`fuzz/fuzz_targets/bench_values.rs`); they
//! live apart from the benchmarks, which need tokio, monoio and their load
//! clients, so that the fuzz targets build without any of those.
#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod http;
pub mod runtime;
pub mod strategy;
