//! The `blockio` command-line tool.

use clap::{Parser, Subcommand};

mod alloc_count;
mod engine_bench;

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
    /// Random 4 KiB O_DIRECT reads: the engine against fio and a raw io_uring
    /// loop, from 1, 2 and 64 threads, with heap allocations per operation.
    EngineBench(engine_bench::EngineBenchArgs),
}

fn main() {
    let cli = Cli::parse();
    let result = match &cli.command {
        Cmd::EngineBench(args) => engine_bench::run(args),
    };
    if let Err(e) = result {
        eprintln!("blockio: error: {e:#}");
        std::process::exit(1);
    }
}
