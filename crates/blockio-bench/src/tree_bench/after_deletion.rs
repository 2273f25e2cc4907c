//! `blockio tree-bench --after-deletion`: `blockio cp` against `cp -r` on
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
    /// Seconds after the deletion the first copy of this state started.
    pub age_s: f64,
    /// Inodes deleted.
    pub deleted: u64,
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
    let want = tree_totals(&src)?;
    let deleted = super::scaled(args.deleted, args.scale).max(1);
    progress(format!(
        "after-deletion: creating and deleting {deleted} files"
    ));
    let victims = root.join("to-delete");
    make_victims(&victims, deleted)?;
    Command::new("sync").status()?;
    std::fs::remove_dir_all(&victims)
        .with_context(|| format!("cannot remove {}", victims.display()))?;
    let deleted_at = Instant::now();
    let mut rows = Vec::new();
    let mut k = 0;
    for &age in &args.ages {
        let wait = Duration::from_secs(age).saturating_sub(deleted_at.elapsed());
        progress(format!(
            "after-deletion: waiting {} s for the state {age} s after the deletion",
            wait.as_secs()
        ));
        std::thread::sleep(wait);
        let age_s = deleted_at.elapsed().as_secs_f64();
        let (mut base, mut ours) = (Vec::new(), Vec::new());
        for round in 0..args.rounds {
            let order = if round % 2 == 0 {
                [false, true]
            } else {
                [true, false]
            };
            for is_ours in order {
                k += 1;
                let dst = root.join(format!("copy-after-deletion-{k}"));
                let (mut c, dst) = super::copy_command(me, &src, dst, Mode::Warm, is_ours);
                let t = timed(&mut c, false)?;
                super::check_copy(&dst, want)?;
                if is_ours { &mut ours } else { &mut base }.push(t);
            }
        }
        let pairs: Vec<f64> = base.iter().zip(&ours).map(|(b, o)| b / o).collect();
        let lo = pairs.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = pairs.iter().copied().fold(0.0, f64::max);
        rows.push(StateRow {
            age_s,
            deleted,
            speedup: median(&base) / median(&ours),
            speedup_range: (lo, hi),
            baseline_s: base,
            ours_s: ours,
            target: TARGET,
        });
    }
    progress("after-deletion: removing the copies".into());
    for i in 1..=k {
        let dst = root.join(format!("copy-after-deletion-{i}"));
        std::fs::remove_dir_all(&dst)
            .with_context(|| format!("cannot remove {}", dst.display()))?;
    }
    Ok(rows)
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
