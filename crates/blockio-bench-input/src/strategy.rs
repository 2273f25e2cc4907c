//! The ways of reading that `blockio-bench read` compares, by name.

use std::fmt;
use std::str::FromStr;

/// A way of reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum Strategy {
    /// A `pread` loop on one thread.
    #[serde(rename = "sync")]
    Sync,
    /// `pread` loops on N threads.
    #[serde(rename = "threads")]
    Threads,
    /// tokio's thread-pool file I/O (`tokio::fs::File`: seek + read), N tasks.
    #[serde(rename = "pool-tokio-fs")]
    PoolTokioFs,
    /// tokio `spawn_blocking` + `pread`, N tasks.
    #[serde(rename = "pool-blocking")]
    PoolBlocking,
    /// The engine's batch API from one thread, every read through io_uring.
    #[serde(rename = "uring")]
    Uring,
    /// The engine from N threads, every read through io_uring.
    #[serde(rename = "uring-mt")]
    UringMt,
    /// The engine's default read path (cached reads inline, misses through
    /// io_uring) from N threads.
    #[serde(rename = "auto")]
    Auto,
    /// The async API (`AsyncFile::read_at`) from N tasks on tokio's
    /// multi-thread runtime, the engine built on that runtime as a tokio
    /// program builds it (`Driving::Auto`: the runtime drives the ring).
    #[serde(rename = "async")]
    Async,
    /// The async API with every read sent to the driver
    /// (`ReadPath::AlwaysSubmit`): the comparison behind its default read
    /// path, run only when named.
    #[serde(rename = "async-submit")]
    AsyncSubmit,
    /// The async API driven by the engine's own thread
    /// (`Driving::Thread`; an engine built outside any runtime), run
    /// only when named.
    #[serde(rename = "async-thread")]
    AsyncThread,
    /// fio's io_uring engine (a reference, run with `--fio`).
    #[serde(rename = "fio")]
    Fio,
}

impl Strategy {
    /// The strategies `blockio-bench read` runs by default, in report order.
    pub const ALL: [Strategy; 8] = [
        Strategy::Sync,
        Strategy::Threads,
        Strategy::PoolTokioFs,
        Strategy::PoolBlocking,
        Strategy::Uring,
        Strategy::UringMt,
        Strategy::Auto,
        Strategy::Async,
    ];

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Sync => "sync",
            Strategy::Threads => "threads",
            Strategy::PoolTokioFs => "pool-tokio-fs",
            Strategy::PoolBlocking => "pool-blocking",
            Strategy::Uring => "uring",
            Strategy::UringMt => "uring-mt",
            Strategy::Auto => "auto",
            Strategy::Async => "async",
            Strategy::AsyncSubmit => "async-submit",
            Strategy::AsyncThread => "async-thread",
            Strategy::Fio => "fio",
        }
    }
}

impl Strategy {
    /// Whether this strategy runs on blockio (and so on io_uring or on its
    /// thread-pool fallback, whichever the kernel allows).
    pub fn uses_blockio(self) -> bool {
        matches!(
            self,
            Strategy::Uring
                | Strategy::UringMt
                | Strategy::Auto
                | Strategy::Async
                | Strategy::AsyncSubmit
                | Strategy::AsyncThread
        )
    }

    /// What serves the reads of a strategy that does not use blockio.
    pub fn own_backend(self) -> &'static str {
        match self {
            Strategy::PoolTokioFs | Strategy::PoolBlocking => "tokio blocking pool",
            Strategy::Fio => "fio io_uring",
            _ => "pread",
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Parses a strategy name; `pool` means both pool strategies.
pub fn parse_strategies(s: &str) -> std::result::Result<Vec<Strategy>, String> {
    if s == "pool" {
        return Ok(vec![Strategy::PoolTokioFs, Strategy::PoolBlocking]);
    }
    Strategy::from_str(s).map(|x| vec![x])
}

impl FromStr for Strategy {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Strategy, String> {
        Strategy::ALL
            .into_iter()
            .chain([Strategy::AsyncSubmit, Strategy::AsyncThread])
            .find(|x| x.name() == s)
            .ok_or_else(|| {
                format!(
                    "unknown strategy {s:?}: expected sync, threads, pool, pool-tokio-fs, pool-blocking, uring, uring-mt, auto, async, async-submit or async-thread"
                )
            })
    }
}
