//! File-tree jobs on the blockio engine, used by the `blockio` binary:
//!
//! * [`copy`]: recursive copies (`blockio cp`) with GNU `cp -r` semantics.
//! * [`sum`]: checksums of files and trees (`blockio sum`), with output and
//!   check files compatible with `b3sum` and `sha256sum`.
#![warn(missing_docs)]

pub mod algo;
pub mod copy;
pub mod getopt;
mod list_batches;
pub mod names;
pub mod quote;
pub mod reason;
pub mod room;
pub mod size;
pub mod sum;
pub mod sum_limits;
pub mod sum_program;
pub mod sum_room;
pub mod sum_tool;
pub mod sum_xof;
pub mod walk;
