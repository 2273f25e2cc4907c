//! Backend selection, shared by [`Engine`](crate::Engine) and
//! [`AsyncEngine`](crate::aio::AsyncEngine): which backend was asked for
//! ([`BACKEND_ENV`] overrides the builder), whether io_uring is required,
//! and how a failed ring setup is explained to the user.

use std::fmt;
use std::io;

/// The environment variable that chooses the backend, with one of
/// [`BACKEND_ENV_VALUES`]: `threads` forces the thread-pool fallback,
/// `uring` requires io_uring (building fails if it is unavailable), `auto`
/// (or unset, or empty) uses io_uring when the kernel allows it. The
/// Python package reads it with the same values.
pub const BACKEND_ENV: &str = "BLOCKIO_BACKEND";

/// The values [`BACKEND_ENV`] takes; any other is an error naming the
/// variable and these.
pub const BACKEND_ENV_VALUES: [&str; 3] = ["uring", "threads", "auto"];

/// The fallback reason of an engine whose thread pool was asked for (by
/// [`BACKEND_ENV`] or the builder) rather than forced by an unavailable
/// io_uring; see [`Engine::fallback_reason`](crate::Engine::fallback_reason).
pub const FALLBACK_REQUESTED: &str = "requested (BLOCKIO_BACKEND or the builder)";

/// Which backend an engine runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// Linux io_uring.
    IoUring,
    /// `pread`/`pwrite` on a thread pool.
    ThreadPool,
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::IoUring => "io_uring",
            Backend::ThreadPool => "thread pool",
        })
    }
}

/// Which backend to ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BackendChoice {
    /// io_uring if the kernel allows it, else the thread pool; overridden by
    /// [`BACKEND_ENV`].
    #[default]
    Auto,
    /// io_uring or an error.
    IoUring,
    /// Always the thread pool.
    ThreadPool,
}

impl BackendChoice {
    /// The backend [`BACKEND_ENV`] asks for: `None` when it is unset,
    /// empty or `auto` (the builder's choice stands), an error naming the
    /// variable when its value is none of those it takes.
    pub fn from_env() -> io::Result<Option<BackendChoice>> {
        match std::env::var(BACKEND_ENV) {
            Ok(v) => BackendChoice::from_env_value(&v),
            Err(_) => Ok(None),
        }
    }

    /// The backend `value` of [`BACKEND_ENV`] asks for (see
    /// [`from_env`](Self::from_env)); surrounding blanks are ignored.
    fn from_env_value(value: &str) -> io::Result<Option<BackendChoice>> {
        match value.trim() {
            "threads" => Ok(Some(BackendChoice::ThreadPool)),
            "uring" => Ok(Some(BackendChoice::IoUring)),
            "auto" | "" => Ok(None),
            other => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{BACKEND_ENV}={other:?}: expected one of {}",
                    BACKEND_ENV_VALUES.join(", ")
                ),
            )),
        }
    }
}

/// The backend asked for: [`BACKEND_ENV`] if set, else `configured`.
fn choice_from_env(configured: BackendChoice) -> io::Result<BackendChoice> {
    Ok(BackendChoice::from_env()?.unwrap_or(configured))
}

/// Why ring setup failed, in words that say what to do about it.
fn describe_setup_error(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::ENOSYS) => "io_uring_setup is not implemented by this kernel (ENOSYS)".into(),
        Some(libc::EPERM) => {
            "io_uring_setup was denied (EPERM): kernel.io_uring_disabled or a seccomp profile"
                .into()
        }
        _ => e.to_string(),
    }
}

/// Builds a backend as `configured` (and [`BACKEND_ENV`]) ask: io_uring
/// with `uring`, or the thread pool with `threads`, which is given the
/// reason it is in use. With [`BackendChoice::Auto`] a failed io_uring
/// setup falls back to the pool; with [`BackendChoice::IoUring`] it is an
/// error that says why. Out of descriptors (`EMFILE`, `ENFILE`) is the
/// setup's error as it is, with either choice.
pub(crate) fn select<T>(
    configured: BackendChoice,
    uring: impl FnOnce() -> io::Result<T>,
    threads: impl FnOnce(String) -> io::Result<T>,
) -> io::Result<T> {
    select_as(choice_from_env(configured)?, uring, threads)
}

/// [`select`] for `choice`, the environment already read.
fn select_as<T>(
    choice: BackendChoice,
    uring: impl FnOnce() -> io::Result<T>,
    threads: impl FnOnce(String) -> io::Result<T>,
) -> io::Result<T> {
    if choice == BackendChoice::ThreadPool {
        return threads(FALLBACK_REQUESTED.to_string());
    }
    match uring() {
        Ok(backend) => Ok(backend),
        // Out of descriptors (the process's limit, or the system's) is no
        // sign that io_uring is unavailable: the pool would need
        // descriptors too, and falling back would keep the pool for good
        // over a shortage that passes. The error is the caller's, errno
        // and all.
        Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => Err(e),
        Err(e) if choice == BackendChoice::Auto => threads(format!(
            "io_uring unavailable: {}",
            describe_setup_error(&e)
        )),
        Err(e) => Err(io::Error::new(
            e.kind(),
            format!(
                "io_uring was required but is unavailable: {}",
                describe_setup_error(&e)
            ),
        )),
    }
}

/// The threads of a thread-pool backend: `configured`, or when that is 0
/// the queue depth, at most 64. Both engines' builders mean the same by
/// `fallback_threads`.
pub(crate) fn fallback_threads(configured: usize, queue_depth: usize) -> usize {
    if configured == 0 {
        queue_depth.clamp(1, 64)
    } else {
        configured
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_descriptors_is_the_setups_error_never_a_fallback() {
        for choice in [BackendChoice::Auto, BackendChoice::IoUring] {
            for errno in [libc::EMFILE, libc::ENFILE] {
                let r: io::Result<&str> = select_as(
                    choice,
                    || Err(io::Error::from_raw_os_error(errno)),
                    |_| Ok("threads"),
                );
                assert_eq!(r.unwrap_err().raw_os_error(), Some(errno), "{choice:?}");
            }
        }
        // (any other failure of the ring's setup still falls back under Auto)
        let r: io::Result<&str> = select_as(
            BackendChoice::Auto,
            || Err(io::Error::from_raw_os_error(libc::ENOSYS)),
            |_| Ok("threads"),
        );
        assert_eq!(r.unwrap(), "threads");
    }

    #[test]
    fn the_backend_variable_takes_exactly_its_three_values() {
        let parse = BackendChoice::from_env_value;
        assert_eq!(parse("uring").unwrap(), Some(BackendChoice::IoUring));
        assert_eq!(
            parse(" threads\n").unwrap(),
            Some(BackendChoice::ThreadPool)
        );
        assert_eq!(parse("auto").unwrap(), None);
        assert_eq!(parse("").unwrap(), None);
        for other in [
            "io_uring",
            "io-uring",
            "thread-pool",
            "threadpool",
            "epoll",
            "Threads",
        ] {
            let err = parse(other).expect_err(other);
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
            let msg = err.to_string();
            assert!(
                msg.contains("BLOCKIO_BACKEND") && msg.contains(other),
                "the error names neither the variable nor the value: {msg}"
            );
            assert!(
                msg.ends_with("expected one of uring, threads, auto"),
                "{msg}"
            );
        }
    }
}
