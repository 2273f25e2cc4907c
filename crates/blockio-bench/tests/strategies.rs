//! Every strategy reads the right bytes on every profile, and the check
//! that says so catches a wrong byte.

use std::os::unix::fs::FileExt;
use std::sync::Arc;

use blockio_bench::data;
use blockio_bench::profile::{Profile, Workload};
use blockio_bench::strategy::{self, Plan, Strategy};

fn plans(profile: Profile) -> Vec<Plan> {
    let mut v = vec![
        Plan {
            strategy: Strategy::Sync,
            qd: 1,
            threads: 1,
        },
        Plan {
            strategy: Strategy::Threads,
            qd: 3,
            threads: 3,
        },
        Plan {
            strategy: Strategy::PoolBlocking,
            qd: 8,
            threads: 8,
        },
        Plan {
            strategy: Strategy::Uring,
            qd: 1,
            threads: 1,
        },
        Plan {
            strategy: Strategy::Uring,
            qd: 16,
            threads: 1,
        },
        Plan {
            strategy: Strategy::UringMt,
            qd: 16,
            threads: 2,
        },
        Plan {
            strategy: Strategy::Auto,
            qd: 16,
            threads: 2,
        },
        Plan {
            strategy: Strategy::Auto,
            qd: 2,
            threads: 2,
        },
    ];
    // The async API, driven by the runtime, by its own thread, and with
    // every read sent to the driver.
    for strategy in [
        Strategy::Async,
        Strategy::AsyncThread,
        Strategy::AsyncSubmit,
    ] {
        v.push(Plan {
            strategy,
            qd: 8,
            threads: 8,
        });
    }
    if !profile.direct() {
        v.push(Plan {
            strategy: Strategy::PoolTokioFs,
            qd: 8,
            threads: 8,
        });
    }
    v
}

fn data_file(dir: &tempfile::TempDir) -> std::path::PathBuf {
    data::create(dir.path(), "d.dat", 1 << 20).unwrap()
}

#[test]
fn every_strategy_reads_the_right_bytes_on_every_profile() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let path = data_file(&dir);
    for profile in Profile::ALL {
        let w = Arc::new(Workload::open(profile, &path, true).unwrap());
        for plan in plans(profile) {
            let (m, backend) = strategy::run(plan, &w, 0.05)
                .unwrap_or_else(|e| panic!("{profile} {plan:?}: {e:#}"));
            assert!(m.ops > 0, "{profile} {plan:?} completed nothing");
            let engine = blockio::Engine::new().unwrap();
            let on = engine.backend().to_string();
            let want: Vec<String> = match plan.strategy {
                // One read per thread at a time: each alone in its batch.
                strategy::Strategy::Auto if plan.qd == plan.threads => vec!["inline".into()],
                // The async API serves cached reads at their first poll:
                // all of them ("inline"), some, or none.
                strategy::Strategy::Auto
                | strategy::Strategy::Async
                | strategy::Strategy::AsyncThread => {
                    vec![on.clone(), format!("{on} + inline"), "inline".into()]
                }
                s if s.uses_blockio() => vec![on],
                strategy::Strategy::Sync | strategy::Strategy::Threads => vec!["pread".into()],
                _ => vec!["tokio blocking pool".into()],
            };
            assert!(want.contains(&backend), "{profile} {plan:?}: {backend}");
            assert_eq!(m.bytes, m.ops * profile.block_size() as u64);
        }
    }
}

#[test]
fn a_wrong_byte_in_the_file_fails_every_strategy() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let path = data_file(&dir);
    // Corrupt one byte in every 4 KiB block, so any read sees one.
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    for block in 0..256u64 {
        f.write_at(&[0], block * 4096 + 777).unwrap();
    }
    f.sync_all().unwrap();
    for profile in [Profile::Direct, Profile::Warm] {
        let w = Arc::new(Workload::open(profile, &path, true).unwrap());
        for plan in plans(profile) {
            let err = strategy::run(plan, &w, 0.05).expect_err("corruption went unnoticed");
            let msg = format!("{err:#}");
            assert!(msg.contains("wrong data at offset"), "{plan:?}: {msg}");
        }
    }
}

#[test]
fn tokio_fs_refuses_direct_with_a_reason() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let path = data_file(&dir);
    let w = Arc::new(Workload::open(Profile::Direct, &path, false).unwrap());
    let plan = Plan {
        strategy: Strategy::PoolTokioFs,
        qd: 4,
        threads: 4,
    };
    let err = strategy::run(plan, &w, 0.05).unwrap_err();
    assert!(format!("{err}").contains("O_DIRECT"));
}
