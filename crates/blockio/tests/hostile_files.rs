//! The batch engine's registered files, tried as a hostile user would:
//! descriptor numbers reused behind a registration, and registrations made
//! while other threads wait in the kernel. The tests here depend on which
//! descriptor numbers the process hands out, so they run one at a time
//! (`SERIAL`).

mod common;
use common::pipe;

use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::{mpsc, Mutex};
use std::time::Duration;

use blockio::{Engine, Op, RawTarget, ReadPath, Target};

/// How long a test waits for what a bug would make never happen.
const DEADLINE: Duration = Duration::from_secs(60);

/// Held by every test of this file: descriptor numbers are process-wide.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn engine(slots: u32) -> Engine {
    Engine::builder()
        .registered_files(slots)
        .read_path(ReadPath::AlwaysSubmit)
        .build()
        .unwrap()
}

/// Opens files in `dir` until one gets descriptor number `fd` (the
/// others stay open meanwhile); fails if none does.
fn open_at_number(dir: &std::path::Path, fd: i32) -> (File, std::path::PathBuf) {
    let mut others = Vec::new();
    for i in 0..256 {
        let path = dir.join(format!("reuse-{i}"));
        let f = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        if f.as_raw_fd() == fd {
            return (f, path);
        }
        others.push(f);
    }
    panic!("descriptor number {fd} was never handed out again");
}

fn write_one(e: &Engine, op: Op<'_>) {
    let res = e.submit(&mut [op]).unwrap();
    res.into_iter().next().unwrap().unwrap();
}

/// Point 3: register file `a`, write once, drop `a`, open `b` on the same
/// descriptor number: a write to `b` lands in `b`, not in `a`.
#[test]
fn a_reused_descriptor_number_never_reaches_the_registered_file() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let e = engine(4);
    let pa = dir.path().join("a");
    let a = File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&pa)
        .unwrap();
    let number = a.as_raw_fd();
    let reg = e.register_file(&a).unwrap();
    write_one(&e, Op::write(&a, 0, b"first"));
    drop(a);
    let (b, pb) = open_at_number(dir.path(), number);
    write_one(&e, Op::write(&b, 0, b"second"));
    assert_eq!(std::fs::read(&pb).unwrap(), b"second", "b");
    assert_eq!(std::fs::read(&pa).unwrap(), b"first", "a");
    drop(reg);
}

/// Point 3, through the registration itself: operations on it reach the
/// registered file through its slot; once it is dropped, its descriptor
/// number named as a raw target reaches whatever file has the number now.
#[test]
fn a_dropped_registration_releases_its_slot_and_its_number() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let e = engine(1);
    let pa = dir.path().join("a");
    let a = File::create(&pa).unwrap();
    let reg = e.register_file(&a).unwrap();
    drop(a);
    // The registration keeps the file open by itself.
    write_one(&e, Op::write(&reg, 0, b"through the slot"));
    assert_eq!(std::fs::read(&pa).unwrap(), b"through the slot");
    let number = reg.raw_fd();
    // One slot: a second registration waits for the first to go.
    let other = File::create(dir.path().join("other")).unwrap();
    let err = e.register_file(&other).map(drop);
    if e.probe().is_some() {
        let err = err.expect_err("the only slot is taken");
        assert!(err.to_string().contains("slots are in use"), "{err}");
    }
    drop(reg);
    let (b, pb) = open_at_number(dir.path(), number);
    write_one(&e, Op::write(&RawTarget(number), 0, b"raw"));
    assert_eq!(std::fs::read(&pb).unwrap(), b"raw", "b");
    assert_eq!(std::fs::read(&pa).unwrap(), b"through the slot", "a");
    // The slot is free again.
    let again = e.register_file(&b).unwrap();
    write_one(&e, Op::write(&again, 3, b"!"));
    assert_eq!(std::fs::read(&pb).unwrap(), b"raw!", "b");
}

/// Point 4: a thread waits in the kernel on an empty pipe, a second
/// registers a file, a third writes what the first waits for. All three
/// finish: no lock is held across a kernel call that waits on another
/// thread.
#[test]
fn registering_while_a_thread_waits_in_the_kernel_deadlocks_nothing() {
    let _serial = serial();
    let (path, _) = common::data_file(4096, 3);
    let e = engine(4);
    let (r, w) = pipe();
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|s| {
        let (e, r, w, path) = (&e, &r, &w, &path);
        // The waits below make the order that deadlocked (reader in the
        // kernel, then a registration waiting, then the writer) the likely
        // one; any order must finish.
        let (tid_tx, tid_rx) = mpsc::channel();
        let t = tx.clone();
        let tid = tid_tx.clone();
        s.spawn(move || {
            tid.send(common::thread_id()).unwrap();
            let mut buf = [0u8; 5];
            write_one(e, Op::read(r, 0, &mut buf));
            let _ = t.send("reader");
        });
        let reader = tid_rx.recv().unwrap();
        common::wait_until("the reader sleeps in the kernel", || {
            common::sleeps_in_a_call_or_ended(reader)
        });
        let t = tx.clone();
        s.spawn(move || {
            tid_tx.send(common::thread_id()).unwrap();
            let f = File::open(path).unwrap();
            let reg = e.register_file(&f).unwrap();
            let _ = t.send("registration");
            drop(reg);
        });
        let registration = tid_rx.recv().unwrap();
        common::wait_until("the registration waits or is done", || {
            common::sleeps_in_a_call_or_ended(registration)
        });
        let t = tx.clone();
        s.spawn(move || {
            write_one(e, Op::write(w, 0, b"hello"));
            let _ = t.send("writer");
        });
        for _ in 0..3 {
            if rx.recv_timeout(DEADLINE).is_err() {
                eprintln!("deadlocked: the threads never finished");
                std::process::abort();
            }
        }
    });
}

/// A batch keeps the table of registered files it took when it checked
/// out a ring. Meanwhile another thread drops the registration and a new
/// file gets its descriptor number: the batch's later write on that number
/// (a raw target, not the registration) reaches the new file, never the
/// closed one through the slot.
#[test]
fn a_batch_in_flight_never_reaches_a_dropped_registration_by_number() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::builder()
        .registered_files(4)
        .queue_depth(1)
        .rings(1)
        .read_path(ReadPath::AlwaysSubmit)
        .build()
        .unwrap();
    let pa = dir.path().join("a");
    let a = File::create(&pa).unwrap();
    let reg = e.register_file(&a).unwrap();
    drop(a);
    let number = reg.raw_fd();
    let (r, mut w) = pipe();
    std::thread::scope(|s| {
        let (e, r) = (&e, &r);
        let (tid_tx, tid_rx) = mpsc::channel();
        let batch = s.spawn(move || {
            tid_tx.send(common::thread_id()).unwrap();
            let (mut one, mut two) = ([0u8; 4], [0u8; 4]);
            let by_number = RawTarget(number);
            let mut ops = [
                Op::read(r, 0, &mut one),
                Op::read(r, 0, &mut two),
                Op::write(&by_number, 0, b"batch"),
            ];
            let res = e.submit(&mut ops).unwrap();
            res.into_iter().map(|r| r.unwrap()).collect::<Vec<_>>()
        });
        // The wait makes the order that broke the promise (the batch
        // holding its table, waiting on the pipe, while the registration
        // goes) the likely one; any order must end with the write in the
        // file that has the number.
        let batch_thread = tid_rx.recv().unwrap();
        common::wait_until("the batch sleeps in the kernel", || {
            common::sleeps_in_a_call_or_ended(batch_thread)
        });
        drop(reg);
        let (c, pc) = open_at_number(dir.path(), number);
        std::io::Write::write_all(&mut w, b"12345678").unwrap();
        assert_eq!(batch.join().unwrap(), [4, 4, 5]);
        assert_eq!(
            std::fs::read(&pc).unwrap(),
            b"batch",
            "the file with the number"
        );
        assert_eq!(
            std::fs::read(&pa).unwrap(),
            b"",
            "the dropped registration's file"
        );
        drop(c);
    });
}

/// Threads register files, write through the registrations and drop them,
/// all at once: a ring brought to a table that another thread changed
/// meanwhile never fails a whole batch (EBADF) nor sends a write elsewhere.
#[test]
fn registering_and_dropping_from_many_threads_fails_no_batch() {
    let _serial = serial();
    let e = Engine::builder()
        .registered_files(2)
        .rings(2)
        .read_path(ReadPath::AlwaysSubmit)
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::thread::scope(|s| {
        for t in 0..3 {
            let (e, dir) = (&e, dir.path());
            s.spawn(move || {
                let path = dir.join(format!("f{t}"));
                for round in 0..3000u32 {
                    let f = File::create(&path).unwrap();
                    let reg = match e.register_file(&f) {
                        Ok(reg) => reg,
                        // Both slots taken by the other threads.
                        Err(err) if err.to_string().contains("slots are in use") => continue,
                        Err(err) => panic!("register_file: {err}"),
                    };
                    let tag = format!("{t}:{round:08}");
                    let res = e
                        .submit(&mut [Op::write(&reg, 0, tag.as_bytes()), Op::fsync(&reg)])
                        .unwrap_or_else(|err| panic!("thread {t} round {round}: {err}"));
                    for r in res {
                        r.unwrap();
                    }
                    drop(reg);
                    assert_eq!(std::fs::read(&path).unwrap(), tag.as_bytes());
                }
            });
        }
    });
}

/// A `Target` whose `supports_polling` panics (safe user code may).
struct PanicsWhenAsked(File);

impl Target for PanicsWhenAsked {
    fn raw_fd(&self) -> std::os::fd::RawFd {
        self.0.as_raw_fd()
    }
    fn supports_polling(&self) -> bool {
        panic!("a hostile Target panics")
    }
}

/// `register_file` asks the `Target` everything before it fills a slot,
/// so a panicking `Target` leaves no slot (and no duplicate) behind.
#[test]
fn a_panicking_target_leaves_no_registered_slot_behind() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let e = engine(1);
    let hostile = PanicsWhenAsked(File::create(dir.path().join("a")).unwrap());
    let panicked =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| e.register_file(&hostile)));
    assert!(panicked.is_err(), "the Target's panic reaches the caller");
    // The only slot is still free.
    let pb = dir.path().join("b");
    let b = File::create(&pb).unwrap();
    let reg = e.register_file(&b).unwrap();
    write_one(&e, Op::write(&reg, 0, b"b"));
    assert_eq!(std::fs::read(&pb).unwrap(), b"b");
    assert_eq!(std::fs::read(dir.path().join("a")).unwrap(), b"");
}

/// A registration is one engine's: an operation on it submitted to
/// another engine uses its descriptor, never that engine's slot of the
/// same index (which names another file there).
#[test]
fn a_registration_used_on_another_engine_reaches_its_own_file() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (engine(1), engine(1));
    let (px, py) = (dir.path().join("x"), dir.path().join("y"));
    let x = File::create(&px).unwrap();
    let y = File::create(&py).unwrap();
    let on_b = b.register_file(&x).unwrap();
    let on_a = a.register_file(&y).unwrap();
    write_one(&b, Op::write(&on_a, 0, b"y, through b"));
    write_one(&b, Op::write(&on_b, 0, b"x"));
    assert_eq!(std::fs::read(&py).unwrap(), b"y, through b");
    assert_eq!(std::fs::read(&px).unwrap(), b"x");
}
