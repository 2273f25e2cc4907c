//! Benchmarks of the blockio engine, run by the `blockio-bench` binary:
//!
//! * [`bench`](mod@bench): `blockio-bench read`, every reading strategy (pread, threads, an
//!   async runtime's thread pool, the engine on io_uring, the engine's auto
//!   read path) on every profile (O_DIRECT, cold and warm page cache,
//!   sequential), with a table, JSON, CSV and an SVG chart; with
//!   `--sum`, the [`sum_stream`] workload (stream a file, hash it as it arrives) instead;
//! * [`engine_bench`]: `blockio-bench engine`, the engine against fio and a
//!   raw io-uring loop on random O_DIRECT reads, with allocations per op;
//! * [`tree_bench`]: `blockio-bench tree`, `blockio cp` against `cp -r` and
//!   `blockio sum` against `b3sum` on generated trees, warm and cold; with
//!   `--after-deletion`, [`tree_bench::after_deletion`]: the copy in the states ext4
//!   passes through after a mass deletion;
//! * [`net_bench`]: `blockio-bench net`, one HTTP server on tokio's epoll
//!   reactor and on `blockio::net`, loaded by `wrk`.
#![warn(missing_docs)]

pub mod alloc_count;
pub mod bench;
pub mod cache;
pub mod data;
pub mod engine_bench;
pub mod fio;
pub mod measure;
pub mod net_bench;
pub mod profile;
pub mod report;
pub mod strategy;
pub mod sum_stream;
pub mod svg;
pub mod tree_bench;
