//! The runtimes `blockio-bench net`'s servers run on, by name.

/// A runtime the server runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Runtime {
    /// tokio and its epoll reactor (current-thread; the multi-thread pool
    /// with two server threads).
    Tokio,
    /// `blockio::net` on tokio (current-thread; the multi-thread pool with
    /// two), an engine with default settings (`Driving::Auto`): built on
    /// the runtime, which drives it (as `blockio-round`, with the default
    /// queue depth).
    Blockio,
    /// `blockio::net` on tokio with the engine's own driver thread
    /// (`Driving::Thread`): completions reaped there and handed to the
    /// runtime's thread.
    BlockioThread,
    /// `blockio::net` on tokio's current-thread runtime with the ring
    /// driven by the runtime's thread: tokio's reactor watches the ring
    /// and a task reaps completions (`blockio::aio::drive_on_tokio`; no
    /// driver thread). With two
    /// server threads, a ring and a listener per thread.
    BlockioCaller,
    /// As `blockio-caller`, and operations started in one round of tasks
    /// reach the kernel together, in one `io_uring_enter` by the driving
    /// task (`Submit::PerRound`).
    BlockioRound,
    /// As `blockio-round`, and each connection reads through its
    /// `recv_stream`: one multishot
    /// receive into the engine's shared buffer ring, armed once, so bytes
    /// arriving cost a completion and no submission (each read copies them
    /// out of the ring's buffer, which goes straight back).
    BlockioRoundStream,
    /// monoio: a ring per thread, thread-per-core, futures not `Send`; a
    /// listener per thread.
    Monoio,
}

impl Runtime {
    /// Every runtime, in report order.
    pub const ALL: [Runtime; 7] = [
        Runtime::Tokio,
        Runtime::Blockio,
        Runtime::BlockioThread,
        Runtime::BlockioCaller,
        Runtime::BlockioRound,
        Runtime::BlockioRoundStream,
        Runtime::Monoio,
    ];

    /// The name in tables and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Runtime::Tokio => "tokio",
            Runtime::Blockio => "blockio",
            Runtime::BlockioThread => "blockio-thread",
            Runtime::BlockioCaller => "blockio-caller",
            Runtime::BlockioRound => "blockio-round",
            Runtime::BlockioRoundStream => "blockio-round-stream",
            Runtime::Monoio => "monoio",
        }
    }

    /// The runtime named `name` (as `name` gives it).
    pub fn from_name(name: &str) -> Option<Runtime> {
        Runtime::ALL.into_iter().find(|r| r.name() == name)
    }

    /// Whether the runtime serves two threads with one listener per
    /// thread (rather than one pool of workers sharing one listener).
    pub fn listener_per_thread(self) -> bool {
        matches!(
            self,
            Runtime::BlockioCaller
                | Runtime::BlockioRound
                | Runtime::BlockioRoundStream
                | Runtime::Monoio
        )
    }
}

/// Parses `--runtimes`' values.
pub fn parse_runtime(name: &str) -> Result<Runtime, String> {
    Runtime::from_name(name).ok_or_else(|| {
        let names: Vec<&str> = Runtime::ALL.iter().map(|r| r.name()).collect();
        format!("unknown runtime {name:?}: one of {}", names.join(", "))
    })
}
