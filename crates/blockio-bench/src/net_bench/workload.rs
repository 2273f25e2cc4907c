//! What `net-bench` measures: each workload is a service, a load and a
//! placement of the server's threads.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Result;

use super::load::{self, Outcome};
use super::servers::{Service, Threads};
use super::wrk;

/// One workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Workload {
    /// HTTP/1.1 keep-alive requests from wrk over `connections`, served by
    /// `threads` server threads (1: pinned, wrk on the other CPU; 2: both
    /// share the two CPUs with two wrk threads), while `idle` more
    /// keep-alive connections, each after one request, stay open and
    /// silent (held by `blockio-bench net-load idle` on the client's CPU): idle
    /// peers must not delay anyone else.
    Http {
        /// Connections wrk keeps open.
        connections: usize,
        /// Server threads.
        threads: usize,
        /// Idle connections held open beside them.
        idle: usize,
    },
    /// Messages of `size` bytes echoed over `connections`, one in flight
    /// per connection; the server reads up to a message at a time (at
    /// least 16 KiB).
    Echo {
        /// Bytes per message.
        size: usize,
        /// Connections.
        connections: usize,
        /// The server reads and writes through tokio's `AsyncReadExt` /
        /// `AsyncWriteExt` (the way code ported from tokio does) rather
        /// than the owned-buffer methods (monoio keeps its own).
        traits: bool,
    },
    /// One connection sending `bytes`, checksummed by the server as they
    /// arrive (Async_uring's TCP checksum stream).
    Stream {
        /// Bytes sent.
        bytes: u64,
    },
}

/// Where the load goes and how long it lasts.
pub struct Target {
    /// The server.
    pub addr: SocketAddr,
    /// Seconds of load (the stream runs until its bytes are through).
    pub duration: Duration,
    /// The CPU the single-threaded servers' clients run on.
    pub client_cpu: usize,
}

impl Workload {
    /// A short name for tables: `http 50c`, `echo 4096B 500c`, ...
    pub fn label(&self) -> String {
        match *self {
            Workload::Http {
                connections,
                threads: 1,
                idle: 0,
            } => format!("http {connections}c"),
            Workload::Http {
                connections,
                threads: 1,
                idle,
            } => format!("http {connections}c +{idle}i"),
            Workload::Http {
                connections,
                threads,
                idle: 0,
            } => format!("http {connections}c {threads}t"),
            Workload::Http {
                connections,
                threads,
                idle,
            } => format!("http {connections}c {threads}t +{idle}i"),
            Workload::Echo {
                size,
                connections,
                traits: false,
            } => format!("echo {size}B {connections}c"),
            Workload::Echo {
                size,
                connections,
                traits: true,
            } => format!("echo {size}B {connections}c traits"),
            Workload::Stream { bytes } => format!("stream {} MiB", bytes >> 20),
        }
    }

    /// Connections the workload keeps open at once, idle ones included.
    pub fn connections(&self) -> usize {
        match *self {
            Workload::Http {
                connections, idle, ..
            } => connections + idle,
            Workload::Echo { connections, .. } => connections,
            Workload::Stream { .. } => 1,
        }
    }

    /// What one unit of work is: `req`, `msg` or `MB` (10^6 bytes).
    pub fn unit(&self) -> &'static str {
        match self {
            Workload::Http { .. } => "req",
            Workload::Echo { .. } => "msg",
            Workload::Stream { .. } => "MB",
        }
    }

    /// Bytes per reported unit of the load's count.
    pub fn unit_scale(&self) -> f64 {
        match self {
            Workload::Stream { .. } => 1e6,
            _ => 1.0,
        }
    }

    /// The service the server runs.
    pub fn service(&self) -> Service {
        match *self {
            Workload::Http { .. } => Service::Http,
            Workload::Echo { size, traits, .. } => Service::Echo {
                buffer: size.max(super::service::ECHO_BUFFER),
                traits,
            },
            Workload::Stream { .. } => Service::Checksum,
        }
    }

    /// Whether one server thread serves it (pinned, with the client on a
    /// CPU of its own), rather than two sharing both CPUs with the client.
    pub fn one_server_thread(&self) -> bool {
        !matches!(self, Workload::Http { threads: 2.., .. })
    }

    /// How the server's threads are placed, given the server's CPU.
    pub fn threads(&self, server_cpu: usize) -> Threads {
        if self.one_server_thread() {
            Threads::One(server_cpu)
        } else {
            Threads::Two
        }
    }

    /// Runs the load against `target`.
    pub fn load(&self, target: &Target) -> Result<Outcome> {
        let addr = target.addr.to_string();
        let secs = target.duration.as_secs().max(1).to_string();
        let cpu = Some(target.client_cpu);
        match *self {
            Workload::Http {
                connections,
                threads,
                idle,
            } => {
                let cpu = (threads == 1).then_some(target.client_cpu);
                let holder = match idle {
                    0 => None,
                    n => Some(load::IdleHolder::start(target.addr, n, cpu)?),
                };
                let mut outcome = wrk::run(target.addr, connections, target.duration, cpu)?;
                if let Some(h) = holder {
                    // Idle connections the server dropped count as errors.
                    outcome.errors += h.finish()?.errors;
                }
                Ok(outcome)
            }
            Workload::Echo {
                size, connections, ..
            } => load::spawn(
                &[
                    "echo".into(),
                    "--addr".into(),
                    addr,
                    "--connections".into(),
                    connections.to_string(),
                    "--size".into(),
                    size.to_string(),
                    "--seconds".into(),
                    secs,
                ],
                cpu,
            ),
            Workload::Stream { bytes } => load::spawn(
                &[
                    "stream".into(),
                    "--addr".into(),
                    addr,
                    "--bytes".into(),
                    bytes.to_string(),
                ],
                cpu,
            ),
        }
    }
}
