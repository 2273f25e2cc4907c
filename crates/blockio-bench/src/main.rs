//! The `blockio-bench` binary: the benchmarks of the blockio engine, apart
//! from the `blockio` tool users run, so that the tool links none of the
//! runtimes (tokio, monoio) and load generators they compare against.
//! `scripts/bench`, `scripts/engine-bench` and `scripts/tree-bench` build
//! and run it.

use clap::{Parser, Subcommand};

use blockio_bench::{bench, engine_bench, net_bench, tree_bench};

/// Counts allocations for `engine`, in builds that ask for it only.
#[cfg(feature = "count-allocations")]
#[global_allocator]
static GLOBAL: blockio_bench::alloc_count::Counting = blockio_bench::alloc_count::Counting;

/// When and by how much io_uring (through blockio) beats the other ways of
/// doing the same I/O, measured on this machine.
#[derive(Parser)]
#[command(name = "blockio-bench", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// When does io_uring make file reads faster, and by how much: every
    /// strategy (pread, threads, thread pools, io_uring, auto) on every
    /// profile (O_DIRECT, cold, warm, sequential), on a file it creates.
    Read(bench::BenchArgs),
    /// Random 4 KiB O_DIRECT reads: the engine against fio and a raw io_uring
    /// loop, from 1, 2 and 64 threads, with heap allocations per operation.
    Engine(engine_bench::EngineBenchArgs),
    /// `blockio cp` against GNU `cp -r` and `blockio sum` against `b3sum`,
    /// on trees it generates, warm and cold.
    Tree(tree_bench::TreeBenchArgs),
    /// The same servers (HTTP/1.1, echo, a checksum stream) on tokio's
    /// epoll reactor, on blockio::net and on monoio, loaded from another
    /// CPU: rates, latency and the server's cost per request, side by side.
    Net(net_bench::NetBenchArgs),
    /// The echo and stream client `net` runs as a child process.
    #[command(hide = true)]
    NetLoad(net_bench::load::LoadArgs),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Cmd::Read(args) => bench::run(args),
        Cmd::Engine(args) => engine_bench::run(args),
        Cmd::Tree(args) => tree_bench::run(args),
        Cmd::Net(args) => net_bench::run(args),
        Cmd::NetLoad(args) => net_bench::load::run_child(args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("blockio-bench: error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
