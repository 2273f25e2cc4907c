//! Metadata batches (open, statx, close, mkdir, symlink), checked against
//! `std::fs`. `.ci/run` runs this suite on both backends, like `engine.rs`.

use std::ffi::CString;
use std::fs::{self, File};
use std::io::{ErrorKind, Read};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;

use blockio::{errno, Engine, OpenRequest, PathAt};

fn engine() -> Engine {
    Engine::builder().queue_depth(16).build().unwrap()
}

#[test]
fn a_batch_of_opens_mixes_successes_and_failures_in_order() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("a"), b"alpha").unwrap();
    fs::write(dir.path().join("b"), b"bravo").unwrap();
    let base = File::open(dir.path()).unwrap();
    let e = engine();
    let names = [c"a", c"missing", c"b", c"a/not-a-dir"];
    let opens: Vec<OpenRequest<'_>> = names
        .iter()
        .map(|n| OpenRequest::new(PathAt::in_dir(&base, n)))
        .collect();
    let mut res = e.open_batch(&opens).unwrap();
    assert_eq!(res.len(), 4);
    let err = res[1].as_ref().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert_eq!(errno(err), Some(libc::ENOENT));
    assert!(err.to_string().contains("missing"), "{err}");
    assert_eq!(errno(res[3].as_ref().unwrap_err()), Some(libc::ENOTDIR));
    for (i, want) in [(2, "bravo"), (0, "alpha")] {
        let fd = res.swap_remove(i).unwrap();
        // O_CLOEXEC is always set.
        // SAFETY: F_GETFD on an open descriptor only reads its flags.
        let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFD) };
        assert_ne!(flags & libc::FD_CLOEXEC, 0);
        let mut s = String::new();
        File::from(fd).read_to_string(&mut s).unwrap();
        assert_eq!(s, want);
    }
}

#[test]
fn created_files_stat_like_std_and_close_in_a_batch() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine();
    let paths: Vec<CString> = (0..40)
        .map(|i| CString::new(format!("{}/f{i}", dir.path().display())).unwrap())
        .collect();
    let opens: Vec<OpenRequest<'_>> = paths
        .iter()
        .map(|p| {
            OpenRequest::new(PathAt::cwd(p))
                .flags(libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL)
                .mode(0o640)
        })
        .collect();
    let fds: Vec<_> = e
        .open_batch(&opens)
        .unwrap()
        .into_iter()
        .map(|r| r.unwrap())
        .collect();
    let by_fd: Vec<PathAt<'_>> = fds.iter().map(PathAt::file).collect();
    let stats = e.stat_batch(&by_fd, 0).unwrap();
    for (st, p) in stats.iter().zip(&paths) {
        let st = st.as_ref().unwrap();
        let md = fs::metadata(p.to_str().unwrap()).unwrap();
        assert_eq!(st.stx_ino, md.ino());
        assert_eq!(u32::from(st.stx_mode), md.mode());
        assert_eq!(st.stx_size, 0);
    }
    let closed = e.close_batch(fds).unwrap();
    assert_eq!(closed.len(), 40);
    assert!(closed.iter().all(|r| r.is_ok()));
    // Opening them again with O_EXCL fails: they exist.
    let again = e.open_batch(&opens).unwrap();
    assert!(again
        .iter()
        .all(|r| errno(r.as_ref().unwrap_err()) == Some(libc::EEXIST)));
}

#[test]
fn mkdir_and_symlink_batches_and_stat_without_following() {
    let dir = tempfile::tempdir().unwrap();
    let base = File::open(dir.path()).unwrap();
    let e = engine();
    let made = e
        .mkdir_batch(&[
            (PathAt::in_dir(&base, c"d1"), 0o750),
            (PathAt::in_dir(&base, c"d1/d2"), 0o700),
            (PathAt::in_dir(&base, c"nope/d3"), 0o755),
        ])
        .unwrap();
    // Operations in a batch may run in any order: d1/d2 may or may not find
    // d1, but nope/d3 never can.
    assert!(made[0].is_ok());
    assert_eq!(errno(made[2].as_ref().unwrap_err()), Some(libc::ENOENT));
    // SAFETY: umask has no preconditions; the old mask is put back at once.
    let umask = unsafe {
        let m = libc::umask(0o022);
        libc::umask(m);
        m
    };
    let md = fs::metadata(dir.path().join("d1")).unwrap();
    assert!(md.is_dir());
    assert_eq!(md.mode() & 0o777, 0o750 & !umask);

    let links = e
        .symlink_batch(&[
            (PathAt::in_dir(&base, c"l1"), c"d1"),
            (PathAt::in_dir(&base, c"l2"), c"target with spaces\n"),
            (PathAt::in_dir(&base, c"l1"), c"again"),
        ])
        .unwrap();
    assert!(links[0].is_ok() || links[2].is_ok());
    assert!(
        links[0].is_err() || links[2].is_err(),
        "one of two links with one name fails"
    );
    assert!(links[1].is_ok());
    assert_eq!(
        fs::read_link(dir.path().join("l2"))
            .unwrap()
            .to_str()
            .unwrap(),
        "target with spaces\n"
    );
    let st = e
        .stat_batch(
            &[PathAt::in_dir(&base, c"l2"), PathAt::in_dir(&base, c"l2")],
            libc::AT_SYMLINK_NOFOLLOW,
        )
        .unwrap();
    let st = st[0].as_ref().unwrap();
    assert_eq!(u32::from(st.stx_mode) & libc::S_IFMT, libc::S_IFLNK);
    // Following the dangling link fails, naming the path.
    let err = e
        .stat_batch(&[PathAt::in_dir(&base, c"l2")], 0)
        .unwrap()
        .remove(0)
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert!(err.to_string().contains("l2"), "{err}");
}
