//! The process-wide default engine, refused at a descriptor limit, is
//! built by a later look-up once descriptors are free: a lack of
//! descriptors or memory is not kept (its own test binary:
//! the limit and the engine are the whole process's).

use std::fs::File;

use blockio::aio::AsyncEngine;

mod common;

#[test]
fn a_default_engine_refused_for_descriptors_starts_once_they_are_free() {
    let open = std::fs::read_dir("/proc/self/fd").unwrap().count() as u64;
    common::set_fd_limit(open + 16);
    let mut held = Vec::new();
    while let Ok(f) = File::open("/dev/null") {
        held.push(f);
    }
    // Outside any runtime: the process-wide engine.
    let e = AsyncEngine::current().expect_err("an engine with no descriptor free");
    let msg = e.to_string();
    assert!(
        msg.starts_with("cannot start blockio's default engine"),
        "{msg}"
    );
    assert!(
        msg.contains(&std::io::Error::from_raw_os_error(libc::EMFILE).to_string()),
        "{msg}"
    );
    drop(held);
    let engine = AsyncEngine::current().expect("the engine, descriptors free");
    // The same engine from now on.
    let again = AsyncEngine::current().unwrap();
    assert_eq!(format!("{engine:?}"), format!("{again:?}"));
}
