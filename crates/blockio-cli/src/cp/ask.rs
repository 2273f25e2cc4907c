//! `-i`'s questions on standard error and their answers on standard input.

use std::os::fd::AsFd;
use std::sync::atomic::Ordering;

use super::program::program;

/// `-i`: asks on standard error, one question at a time, and reads the
/// answer from standard input: yes when it starts with `y` or `Y`.
pub(super) fn ask(question: &str) -> bool {
    use std::io::Write;
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut err = std::io::stderr().lock();
    let _ = write!(err, "{}: {question}", program());
    let _ = err.flush();
    let line = match read_answer() {
        Ok(line) => line,
        Err(e) => {
            record_stdin_error(&e);
            String::new()
        }
    };
    matches!(line.trim_start().chars().next(), Some('y' | 'Y'))
}

/// One line of standard input, read a byte at a time (nothing after the
/// line is taken from a later question's answer), from descriptor 0
/// itself: `std::io::stdin` takes a closed descriptor (`EBADF`) for an
/// empty input, and GNU reports it.
fn read_answer() -> std::io::Result<String> {
    use std::io::Read;
    let mut input = std::fs::File::from(std::io::stdin().as_fd().try_clone_to_owned()?);
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    loop {
        match input.read(&mut byte) {
            Ok(0) => break,
            Ok(_) => {
                line.push(byte[0]);
                if byte[0] == b'\n' {
                    break;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(String::from_utf8_lossy(&line).into_owned())
}

/// Keeps the first error of reading an answer (which counts as "no"),
/// reported once at the end as GNU's "error closing file".
fn record_stdin_error(e: &std::io::Error) {
    let code = e.raw_os_error().unwrap_or(libc::EIO);
    let _ = STDIN_ERROR.compare_exchange(0, code, Ordering::Relaxed, Ordering::Relaxed);
}

/// The first error of reading an answer from standard input (`-i`), as an
/// errno; 0 for none. Reported when the copy ends, with status 1.
pub(super) static STDIN_ERROR: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);
