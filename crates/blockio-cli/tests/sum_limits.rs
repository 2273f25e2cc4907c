//! The sum tools under a limit on address space (`ulimit -v`), beside
//! GNU's `sha256sum` and Debian's `b3sum` on the same list, on both
//! backends: what the allocator is asked for, and the least room a check
//! runs in.

mod common;

use std::path::Path;
use std::process::{Command, Output};

/// The tools compared, and the programs they are compared with.
const TOOLS: [(&str, &str); 2] = [
    ("sha256sum", "/usr/bin/sha256sum"),
    ("b3sum", "/usr/bin/b3sum"),
];

/// The backends, as `BLOCKIO_BACKEND` names them.
const BACKENDS: [&str; 2] = ["uring", "threads"];

/// Links named after the tools, to the blockio binary, in `dir`.
fn link_tools(dir: &Path) {
    for (tool, _) in TOOLS {
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_blockio"), dir.join(tool)).unwrap();
    }
}

/// A file `a` and, for each tool, `<tool>.list`: `lines` lines checking
/// it, as that tool's reference writes them.
fn lists(dir: &Path, lines: usize) {
    std::fs::write(dir.join("a"), b"hi\n").unwrap();
    for (tool, reference) in TOOLS {
        let line = Command::new(reference)
            .arg("a")
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(line.status.success(), "{reference} a");
        let list = line.stdout.repeat(lines);
        std::fs::write(dir.join(format!("{tool}.list")), list).unwrap();
    }
}

/// `prog -c <tool>.list` in `dir` under `ulimit -v kib`, through `wrap`
/// (a command and its arguments, run before `prog`) if given, on
/// `backend` for ours; `prog` is a program and its first arguments.
fn check_within(
    dir: &Path,
    prog: &[&str],
    tool: &str,
    kib: u64,
    backend: &str,
    wrap: &[&str],
) -> Output {
    Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -v {kib} && exec \"$@\""))
        .arg("sh")
        .args(wrap)
        .args(prog)
        .args(["-c", &format!("{tool}.list")])
        .current_dir(dir)
        .env("LC_ALL", "C")
        .env("BLOCKIO_BACKEND", backend)
        .output()
        .unwrap()
}

/// The address space a check of 3,000 lines runs in below: room for two
/// hashing threads (and a pool thread), not for an allocator arena of
/// 64 MiB each. (At 60,000 KiB the check now runs on one thread; at
/// 100,000 and 140,000, before one arena was kept, it made some 80
/// failing calls a line.)
const ROOMY_KIB: u64 = 100_000;

/// Under a limit on address space, glibc could not reserve a hashing
/// thread's own arena (64 MiB), and then mapped each of that thread's
/// allocations on its own: two failing `mmap` calls and a third, and a
/// `munmap` at each free, about 120 failing calls a line of the list; a
/// 300,000-line check spent minutes in the kernel. Now the threads share
/// one arena, and a check (by the links and by `blockio sum -c`) makes no
/// failing `mmap`, `munmap`, `mremap` or `brk` call, as GNU's `sha256sum`
/// and `b3sum` make none (counted with strace, on both backends).
#[test]
fn a_check_under_a_limit_makes_no_failing_memory_calls() {
    let d = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let dir = d.path();
    link_tools(dir);
    lists(dir, 3_000);
    let failed = |prog: &[&str], tool: &str, backend: &str| {
        let trace = dir.join("trace");
        let trace_arg = trace.to_str().unwrap();
        let wrap = [
            "strace",
            "-f",
            "-qq",
            "-e",
            "trace=mmap,munmap,mremap,brk",
            "-e",
            "status=failed",
            "-o",
            trace_arg,
        ];
        let out = check_within(dir, prog, tool, ROOMY_KIB, backend, &wrap);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "{prog:?} -c under strace on {backend}: {err}"
        );
        let calls =
            std::fs::read_to_string(&trace).expect("strace is installed (scripts/install-deps)");
        failing_memory_calls(&calls)
    };
    let blockio = env!("CARGO_BIN_EXE_blockio");
    for (tool, reference) in TOOLS {
        let theirs = failed(&[reference], tool, "uring");
        let algo = if tool == "b3sum" { "blake3" } else { "sha256" };
        let link = format!("./{tool}");
        for backend in BACKENDS {
            for ours in [&[link.as_str()][..], &[blockio, "sum", "--algo", algo]] {
                let calls = failed(ours, tool, backend);
                assert!(
                    calls <= theirs,
                    "{ours:?} -c of 3,000 lines under ulimit -v {ROOMY_KIB} on {backend}: {calls} \
                     failing memory calls, {reference} {theirs}"
                );
            }
        }
    }
}

/// The failing memory calls in an strace log, one a line (`PID mmap(...) =
/// -1 ENOMEM ...`). Other lines are not counted: a thread that ends while
/// strace is stopping it at a call leaves `PID ???(`, with no call named
/// and no result (seen 2 runs in 5 on the thread-pool backend), and a
/// signal leaves `PID --- SIGCHLD ...`.
fn failing_memory_calls(log: &str) -> usize {
    log.lines()
        .filter(|line| {
            let call = line.trim_start_matches(|c: char| c.is_ascii_digit() || c == ' ');
            ["mmap(", "munmap(", "mremap(", "brk("]
                .iter()
                .any(|name| call.starts_with(name))
        })
        .count()
}

/// The least `ulimit -v` (KiB, to 32 KiB) in which `reference` checks
/// `<tool>.list`, by bisection.
fn reference_floor(dir: &Path, reference: &str, tool: &str) -> u64 {
    let fits = |kib| {
        check_within(dir, &[reference], tool, kib, "uring", &[])
            .status
            .success()
    };
    let (mut lo, mut hi) = (512, 65_536);
    assert!(fits(hi), "{reference} -c under ulimit -v {hi}");
    while hi - lo > 32 {
        let mid = (lo + hi) / 2;
        if fits(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    hi
}

/// What a check may take beyond the reference's floor besides its own
/// executable image (2.4 MB released, 6.4 MB a debug build, where GNU's
/// `sha256sum` maps 60 KiB): the Rust runtime, the engine, the list's
/// batch buffers and results, and the 1 MiB step glibc's allocator maps
/// in once the heap cannot grow. `docs/tools.md` gives both floors,
/// measured with the release binary.
const ALLOWANCE_KIB: u64 = 2_048;

/// A check of 30,000 lines runs under the least `ulimit -v` in which the
/// reference tool (GNU's `sha256sum`, Debian's `b3sum`) runs it, plus
/// blockio's executable image and [`ALLOWANCE_KIB`], on both backends:
/// the thread-pool backend starts a pool thread per hashing thread beyond
/// the first (not 64 of 2 MiB of stack each), the hashing threads share
/// one allocator arena, and a thread that cannot be had leaves its work
/// to the caller.
#[test]
fn a_check_fits_beside_the_reference_on_both_backends() {
    let d = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let dir = d.path();
    link_tools(dir);
    lists(dir, 30_000);
    let ours = env!("CARGO_BIN_EXE_blockio");
    let image = common::executable_image_kib(ours);
    for (tool, reference) in TOOLS {
        let floor = reference_floor(dir, reference, tool);
        let limit = floor + image + ALLOWANCE_KIB;
        for backend in BACKENDS {
            let link = format!("./{tool}");
            let out = check_within(dir, &[&link], tool, limit, backend, &[]);
            assert_eq!(
                (
                    out.status.code(),
                    String::from_utf8_lossy(&out.stderr).as_ref()
                ),
                (Some(0), ""),
                "{tool} -c of 30,000 lines on {backend} under ulimit -v {limit} ({reference}'s \
                 floor {floor} KiB, plus blockio's image of {image} KiB, plus {ALLOWANCE_KIB} KiB)"
            );
            assert_eq!(out.stdout, b"a: OK\n".repeat(30_000), "{tool} on {backend}");
        }
    }
}

/// `b3sum -l` of 100,000,000 bytes (200 MB of hex a file) under
/// `ulimit -v 20000`: the output is streamed a piece at a time, never
/// held whole, and ends as the line of the whole output ends.
#[test]
fn a_long_b3sum_output_is_streamed_in_bounded_memory() {
    let d = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let dir = d.path();
    link_tools(dir);
    std::fs::write(dir.join("a"), b"hi\n").unwrap();
    let tail = |length: &str, kib: Option<u64>| {
        let limit = kib.map_or(String::new(), |k| format!("ulimit -v {k} && "));
        let out = Command::new("sh")
            .arg("-c")
            .arg(format!("{limit}./b3sum -l {length} a | tail -c 100"))
            .current_dir(dir)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(
            (out.status.code(), err.as_str()),
            (Some(0), ""),
            "b3sum -l {length}"
        );
        out.stdout
    };
    let streamed = tail("100000000", Some(20_000));
    // The last bytes of the output, from the whole output of the same
    // length read from its end with --seek.
    let end = tail("47 --seek 99999953", None);
    assert_eq!(end.len(), 2 * 47 + b"  a\n".len());
    assert!(
        streamed.len() == 100 && streamed.ends_with(&end),
        "the end of the streamed line"
    );
}
