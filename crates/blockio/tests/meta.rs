//! Metadata batches (open, statx, close, mkdir, symlink, ftruncate) and
//! the same kinds one at a time on the calling thread (`blockio::blocking`),
//! checked against `std::fs`. `.ci/run` runs this suite on both backends, like `engine.rs`.

use std::ffi::CString;
use std::fs::{self, File};
use std::io::{ErrorKind, Read};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;

use blockio::{blocking, errno, Engine, Op, OpKind, OpenRequest, PathAt};

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

#[test]
fn ftruncate_cuts_and_extends_files_in_a_batch_as_set_len_does() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine();
    let paths: Vec<_> = (0..3).map(|i| dir.path().join(format!("t{i}"))).collect();
    for p in &paths {
        fs::write(p, [9u8; 10_000]).unwrap();
    }
    let files: Vec<File> = paths
        .iter()
        .map(|p| File::options().write(true).open(p).unwrap())
        .collect();
    let read_only = File::open(&paths[0]).unwrap();
    let mut ops = vec![
        Op::ftruncate(&files[0], 100),
        Op::ftruncate(&files[1], 0),
        Op::ftruncate(&files[2], 1 << 20),
        Op::ftruncate(&read_only, 5),
        Op::ftruncate(&files[0], u64::MAX),
    ];
    assert!(ops.iter().all(|op| op.kind() == OpKind::Ftruncate));
    let res = e.submit(&mut ops).unwrap();
    drop(ops);
    assert_eq!(res[0].as_ref().unwrap(), &0);
    assert_eq!(res[1].as_ref().unwrap(), &0);
    assert_eq!(res[2].as_ref().unwrap(), &0);
    // A descriptor not open for writing fails as `set_len` fails on it.
    let want = read_only.set_len(5).unwrap_err().raw_os_error();
    let err = res[3].as_ref().unwrap_err();
    assert_eq!(errno(err), want);
    assert!(err.to_string().contains("ftruncate of fd"), "{err}");
    // A length past i64::MAX is a negative loff_t to the kernel.
    assert_eq!(errno(res[4].as_ref().unwrap_err()), Some(libc::EINVAL));
    let lens: Vec<u64> = paths
        .iter()
        .map(|p| fs::metadata(p).unwrap().len())
        .collect();
    assert_eq!(lens, [100, 0, 1 << 20]);
    // Extended with a hole that reads as zeroes; the kept part is intact.
    let extended = fs::read(&paths[2]).unwrap();
    assert!(extended[..10_000].iter().all(|&b| b == 9));
    assert!(extended[10_000..].iter().all(|&b| b == 0));
}

/// Every blocking call gives what the engine gives for a batch of one:
/// the same result, and on failure the same errno and message.
#[test]
fn blocking_calls_give_what_a_batch_of_one_gives() {
    let dir = tempfile::tempdir().unwrap();
    let base = File::open(dir.path()).unwrap();
    let e = engine();
    let at = |p| PathAt::in_dir(&base, p);

    blocking::mkdir(at(c"d"), 0o700).unwrap();
    let (a, b) = (
        blocking::mkdir(at(c"d"), 0o700).unwrap_err(),
        e.mkdir_batch(&[(at(c"d"), 0o700)])
            .unwrap()
            .remove(0)
            .unwrap_err(),
    );
    assert_eq!((errno(&a), a.to_string()), (errno(&b), b.to_string()));
    assert_eq!(errno(&a), Some(libc::EEXIST));

    let create = OpenRequest::new(at(c"d/f"))
        .flags(libc::O_RDWR | libc::O_CREAT)
        .mode(0o640);
    let fd = blocking::open(&create).unwrap();
    // O_CLOEXEC is always set, as on the batch's opens.
    // SAFETY: F_GETFD on an open descriptor only reads its flags.
    let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFD) };
    assert_ne!(flags & libc::FD_CLOEXEC, 0);
    blocking::ftruncate(&fd, 12_345).unwrap();
    let mine = blocking::stat(PathAt::file(&fd), 0).unwrap();
    let batch = e
        .stat_batch(&[PathAt::file(&fd)], 0)
        .unwrap()
        .remove(0)
        .unwrap();
    assert_eq!(
        (mine.stx_size, mine.stx_mode, mine.stx_ino),
        (batch.stx_size, batch.stx_mode, batch.stx_ino)
    );
    assert_eq!(mine.stx_size, 12_345);
    blocking::close(fd).unwrap();

    let missing = OpenRequest::new(at(c"d/missing"));
    let (a, b) = (
        blocking::open(&missing).unwrap_err(),
        e.open_batch(&[missing]).unwrap().remove(0).unwrap_err(),
    );
    assert_eq!((errno(&a), a.to_string()), (errno(&b), b.to_string()));
    assert!(a.to_string().contains("d/missing"), "{a}");

    blocking::symlink(at(c"l"), c"d/f").unwrap();
    let link = blocking::stat(at(c"l"), libc::AT_SYMLINK_NOFOLLOW).unwrap();
    assert_eq!(u32::from(link.stx_mode) & libc::S_IFMT, libc::S_IFLNK);
    let followed = blocking::stat(at(c"l"), 0).unwrap();
    assert_eq!(followed.stx_size, 12_345);
    let (a, b) = (
        blocking::symlink(at(c"l"), c"x").unwrap_err(),
        e.symlink_batch(&[(at(c"l"), c"x")])
            .unwrap()
            .remove(0)
            .unwrap_err(),
    );
    assert_eq!((errno(&a), a.to_string()), (errno(&b), b.to_string()));

    let (a, b) = (
        blocking::stat(at(c"nope"), 0).unwrap_err(),
        e.stat_batch(&[at(c"nope")], 0)
            .unwrap()
            .remove(0)
            .unwrap_err(),
    );
    assert_eq!((errno(&a), a.to_string()), (errno(&b), b.to_string()));
}

/// An open on the calling thread waits for a FIFO's writer, as `open(2)`
/// does: the reader is seen blocked in `openat` (its `/proc` syscall
/// entry) before any writer exists, and reads what the writer then wrote.
#[test]
fn a_blocking_open_of_a_fifo_waits_for_its_writer() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    let c = CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: `c` is a NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        // SAFETY: gettid has no preconditions.
        tx.send(Some(unsafe { libc::gettid() })).unwrap();
        let fd = blocking::open(&OpenRequest::new(PathAt::cwd(&c))).unwrap();
        tx.send(None).unwrap();
        let mut s = String::new();
        File::from(fd).read_to_string(&mut s).unwrap();
        s
    });
    let tid = rx.recv().unwrap().unwrap();
    let syscall = format!("/proc/self/task/{tid}/syscall");
    loop {
        assert!(
            rx.try_recv().is_err(),
            "the open returned with no writer on the FIFO"
        );
        let now = fs::read_to_string(&syscall).unwrap();
        if now.split(' ').next() == Some(&libc::SYS_openat.to_string()) {
            break;
        }
        std::thread::yield_now();
    }
    let mut w = File::options().write(true).open(&fifo).unwrap();
    std::io::Write::write_all(&mut w, b"after the writer").unwrap();
    drop(w);
    assert_eq!(reader.join().unwrap(), "after the writer");
}

/// A path operation's error names its kind by the kind's one name (the
/// name an `OpError` uses), in a batch and one at a time alike.
#[test]
fn path_errors_name_each_kind_as_the_kind_table_does() {
    let dir = tempfile::tempdir().unwrap();
    let base = File::open(dir.path()).unwrap();
    let missing = PathAt::in_dir(&base, c"missing/x");
    let action = |e: std::io::Error| -> &'static str {
        let inner = e.into_inner().expect("a PathError");
        inner.downcast::<blockio::PathError>().unwrap().action
    };
    let e = engine();
    let stat = OpKind::Stat.to_string();
    assert_eq!(
        action(e.stat_batch(&[missing], 0).unwrap().remove(0).unwrap_err()),
        stat
    );
    assert_eq!(action(blocking::stat(missing, 0).unwrap_err()), stat);
    let open = OpKind::Open.to_string();
    let req = OpenRequest::new(missing);
    assert_eq!(
        action(e.open_batch(&[req]).unwrap().remove(0).unwrap_err()),
        open
    );
    assert_eq!(action(blocking::open(&req).unwrap_err()), open);
    let mkdir = OpKind::Mkdir.to_string();
    assert_eq!(
        action(
            e.mkdir_batch(&[(missing, 0o755)])
                .unwrap()
                .remove(0)
                .unwrap_err()
        ),
        mkdir
    );
    assert_eq!(action(blocking::mkdir(missing, 0o755).unwrap_err()), mkdir);
    let symlink = OpKind::Symlink.to_string();
    let t = c"target";
    assert_eq!(
        action(
            e.symlink_batch(&[(missing, t)])
                .unwrap()
                .remove(0)
                .unwrap_err()
        ),
        symlink
    );
    assert_eq!(action(blocking::symlink(missing, t).unwrap_err()), symlink);
}
