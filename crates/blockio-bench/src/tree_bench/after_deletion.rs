//! `blockio-bench tree --after-deletion`: `blockio cp` against `cp -r` on
//! tree (a) in the states a file system passes through after a mass
//! deletion.
//!
//! On ext4 without a journal, an inode freed in the last minute (six
//! while its inode-table block is dirty, as creating a neighbour makes it)
//! is skipped by a scan on every creation, and concurrent creators in one
//! block group collide on it. So the same copy costs very different times
//! 10 s, 1, 5 and 15 minutes after deleting a few hundred thousand files.
//! This mode makes that state on purpose: it creates `--deleted` empty files,
//! writes them out, deletes them all, and then, at each of `--ages`
//! seconds after the deletion, copies tree (a) with both tools in
//! alternating rounds (the source in the page cache, nothing deleted in
//! between: every copy is kept until the end, then removed).
//!
//! Within one state the rounds run back to back, and the state improves
//! by the second as freed inodes age past the kernel's window, so the
//! tool that runs first in a pair meets a worse state. `--fresh-state`
//! removes that drift: before every round it makes the state anew
//! (create, write out, delete, wait the age), so each pair starts at the
//! same age. Each round then takes the age plus about a minute.
//!
//! The target: `blockio cp` at least 0.95 of `cp -r`'s speed in every
//! state (see `blockio_tools::copy`'s adaptive number of creators).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::Serialize;

use super::{
    make_tree, scaled_shape, source_dir, timed, tree_totals, Mode, TreeBenchArgs, TreeKind,
};
use crate::measure::median;

/// The ratio `blockio cp` must reach in every state.
pub const TARGET: f64 = 0.95;

/// One state's measurement.
#[derive(Debug, Clone, Serialize)]
pub struct StateRow {
    /// Seconds after the deletion the first copy of this state started
    /// (of the first round, with `fresh_state`).
    pub age_s: f64,
    /// Inodes deleted (before every round with `fresh_state`).
    pub deleted: u64,
    /// Whether the state was made anew before each round (`--fresh-state`)
    /// rather than once for all the rounds.
    pub fresh_state: bool,
    /// `cp -r`'s seconds, one per round.
    pub baseline_s: Vec<f64>,
    /// Ours, one per round.
    pub ours_s: Vec<f64>,
    /// Median of `baseline_s` over median of `ours_s`: above 1, we are faster.
    pub speedup: f64,
    /// The lowest and highest ratio of one round's pair.
    pub speedup_range: (f64, f64),
    /// [`TARGET`].
    pub target: f64,
}

/// Runs the mode and returns its rows.
pub fn run(args: &TreeBenchArgs, me: &Path, root: &Path) -> Result<Vec<StateRow>> {
    let (n, size) = scaled_shape(TreeKind::Small, args.scale);
    let src = source_dir(root, TreeKind::Small);
    let progress = |msg: String| {
        if !args.json {
            eprintln!("{msg}");
        }
    };
    progress("after-deletion: the small tree (made if not already there)".into());
    make_tree(&src, TreeKind::Small, n, size)?;
    let mut copies = Copies {
        me,
        root,
        want: tree_totals(&src)?,
        src,
        made: 0,
    };
    let deleted = super::scaled(args.deleted, args.scale).max(1);
    let victims = root.join("to-delete");
    let new_state = |what: String| {
        progress(format!(
            "after-deletion: creating and deleting {deleted} files{what}"
        ));
        make_state(&victims, deleted)
    };
    let wait_for = |age: u64, at: Instant| {
        let wait = Duration::from_secs(age).saturating_sub(at.elapsed());
        progress(format!(
            "after-deletion: waiting {} s for the state {age} s after the deletion",
            wait.as_secs()
        ));
        std::thread::sleep(wait);
    };
    // One state for every round, unless each round makes its own.
    let shared = if args.fresh_state {
        None
    } else {
        Some(new_state(String::new())?)
    };
    let mut rows = Vec::new();
    for &age in &args.ages {
        let (mut base, mut ours) = (Vec::new(), Vec::new());
        let mut age_s = None;
        for round in 0..args.rounds {
            let at = match shared {
                Some(at) => at,
                None => new_state(format!(" (round {} of the {age} s state)", round + 1))?,
            };
            // A shared state is waited for once per age, a fresh one every round.
            if shared.is_none() || round == 0 {
                wait_for(age, at);
            }
            age_s.get_or_insert(at.elapsed().as_secs_f64());
            copies.round(round, &mut base, &mut ours)?;
        }
        rows.push(StateRow::new(
            age_s.unwrap_or(age as f64),
            deleted,
            base,
            ours,
            args.fresh_state,
        ));
    }
    progress("after-deletion: removing the copies".into());
    copies.remove_all()?;
    Ok(rows)
}

impl StateRow {
    fn new(age_s: f64, deleted: u64, base: Vec<f64>, ours: Vec<f64>, fresh_state: bool) -> Self {
        let pairs: Vec<f64> = base.iter().zip(&ours).map(|(b, o)| b / o).collect();
        let lo = pairs.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = pairs.iter().copied().fold(0.0, f64::max);
        StateRow {
            age_s,
            deleted,
            fresh_state,
            speedup: median(&base) / median(&ours),
            speedup_range: (lo, hi),
            baseline_s: base,
            ours_s: ours,
            target: TARGET,
        }
    }
}

/// The copies of tree (a) this mode makes, each kept until the end so
/// that no deletion happens between the rounds.
struct Copies<'a> {
    me: &'a Path,
    root: &'a Path,
    src: PathBuf,
    /// The source's file count and bytes, which every copy must match.
    want: (u64, u64),
    made: usize,
}

impl Copies<'_> {
    /// One round: tree (a) copied by both tools, `cp -r` first in even
    /// rounds and ours first in odd ones.
    fn round(&mut self, round: usize, base: &mut Vec<f64>, ours: &mut Vec<f64>) -> Result<()> {
        let order = if round % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for is_ours in order {
            self.made += 1;
            let dst = self.path(self.made);
            let (mut c, dst) = super::copy_command(self.me, &self.src, dst, Mode::Warm, is_ours);
            let t = timed(&mut c, false)?;
            super::check_copy(&dst, self.want)?;
            if is_ours { &mut *ours } else { &mut *base }.push(t);
        }
        Ok(())
    }

    fn path(&self, i: usize) -> PathBuf {
        self.root.join(format!("copy-after-deletion-{i}"))
    }

    fn remove_all(&self) -> Result<()> {
        for i in 1..=self.made {
            let dst = self.path(i);
            std::fs::remove_dir_all(&dst)
                .with_context(|| format!("cannot remove {}", dst.display()))?;
        }
        Ok(())
    }
}

/// Creates `count` empty files, writes them out and deletes them all;
/// returns when the deletion ended.
fn make_state(victims: &Path, count: u64) -> Result<Instant> {
    make_victims(victims, count)?;
    Command::new("sync").status()?;
    std::fs::remove_dir_all(victims)
        .with_context(|| format!("cannot remove {}", victims.display()))?;
    Ok(Instant::now())
}

/// `count` empty files in directories of 1,000.
fn make_victims(dir: &Path, count: u64) -> Result<()> {
    let mut made = 0;
    let mut d = 0;
    while made < count {
        let sub: PathBuf = dir.join(format!("d{d}"));
        std::fs::create_dir_all(&sub)
            .with_context(|| format!("cannot create {}", sub.display()))?;
        for i in 0..1000.min(count - made) {
            let p = sub.join(format!("f{i}"));
            std::fs::File::create(&p).with_context(|| format!("cannot create {}", p.display()))?;
        }
        made += 1000.min(count - made);
        d += 1;
    }
    Ok(())
}

/// The rows as a table: one line per state, with the rounds' spread.
pub fn table(rows: &[StateRow]) -> String {
    use std::fmt::Write as _;
    let mut s = String::from(
        "state (after deleting)             cp -r median (range)     ours median (range)      speedup (pairs)        target\n",
    );
    let range = |v: &[f64]| {
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(0.0, f64::max);
        format!("{:.3} s ({lo:.2}-{hi:.2})", median(v))
    };
    for r in rows {
        let met = if r.speedup >= r.target {
            "met"
        } else {
            "NOT MET"
        };
        let _ = writeln!(
            s,
            "{:>6.0} s after {:>7} inodes     {:<24} {:<24} {:.2} ({:.2}-{:.2})       >= {} {met}",
            r.age_s,
            r.deleted,
            range(&r.baseline_s),
            range(&r.ours_s),
            r.speedup,
            r.speedup_range.0,
            r.speedup_range.1,
            r.target
        );
    }
    s
}
