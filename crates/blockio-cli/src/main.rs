//! The `blockio` command-line tool. Thin: the work is in the library crates.

use clap::{Parser, Subcommand};

use blockio_bench::{alloc_count, bench, engine_bench};

#[global_allocator]
static GLOBAL: alloc_count::Counting = alloc_count::Counting;

/// Batched disk I/O on io_uring: benchmarks and tools.
#[derive(Parser)]
#[command(name = "blockio", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// When does io_uring make file reads faster, and by how much: every
    /// strategy (pread, threads, thread pools, io_uring, auto) on every
    /// profile (O_DIRECT, cold, warm, sequential), on a file it creates.
    Bench(bench::BenchArgs),
    /// Random 4 KiB O_DIRECT reads: the engine against fio and a raw io_uring
    /// loop, from 1, 2 and 64 threads, with heap allocations per operation.
    EngineBench(engine_bench::EngineBenchArgs),
}

fn main() {
    let cli = Cli::parse();
    let result = match &cli.command {
        Cmd::Bench(args) => bench::run(args),
        Cmd::EngineBench(args) => engine_bench::run(args),
    };
    if let Err(e) = result {
        eprintln!("blockio: error: {e:#}");
        std::process::exit(1);
    }
}
