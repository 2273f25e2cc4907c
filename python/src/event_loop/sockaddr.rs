//! A socket address filled in by the kernel, as Python's `socket` module
//! spells it: `(host, port)` for IPv4, `(host, port, flowinfo, scope_id)`
//! for IPv6, a path (`str`, or `bytes` for Linux's abstract namespace, `''`
//! for an unnamed socket) for Unix sockets.

use std::ffi::OsStr;
use std::net::Ipv4Addr;
use std::os::unix::ffi::OsStrExt;

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use super::ops::AddrSlot;

/// How many IP addresses [`to_python`] keeps made, per thread.
const RECENT: usize = 8;

/// The longest IP address the cache keys on: a `sockaddr_in6`.
const KEY: usize = std::mem::size_of::<libc::sockaddr_in6>();

/// An IP address [`to_python`] made: the kernel's bytes of it, and the
/// tuple made of them.
struct Made {
    key: [u8; KEY],
    len: usize,
    obj: PyObject,
}

thread_local! {
    /// The IP addresses made last on this thread, the next to replace at
    /// `.1`. A datagram endpoint's peers are few, and each datagram's
    /// sender is made into a tuple (its host as text, with the
    /// formatting that costs): about 1,100 instructions per datagram
    /// from a known peer saved (docs/benchmarks.md, "A datagram's sender
    /// made once per peer"). Tuples are immutable, so handing one out
    /// again is handing out an equal value, as `socket.recvfrom`'s is.
    static MADE: std::cell::RefCell<(Vec<Made>, usize)> = const { std::cell::RefCell::new((Vec::new(), 0)) };
}

/// `slot` as a Python address; `None` for a family Python's `socket`
/// module has no tuple form for here. An IP address made recently on
/// this thread is handed out again (see [`MADE`]).
pub(crate) fn to_python(py: Python<'_>, slot: &AddrSlot) -> PyResult<PyObject> {
    let len = slot.len as usize;
    let family = i32::from(slot.storage.ss_family);
    if (family == libc::AF_INET || family == libc::AF_INET6) && len <= KEY {
        // SAFETY: `storage` is a plain sockaddr_storage, at least `KEY`
        // bytes long; its first `len` bytes are the kernel's address.
        let bytes = unsafe {
            std::slice::from_raw_parts(std::ptr::addr_of!(slot.storage).cast::<u8>(), len)
        };
        let found = MADE.with(|m| {
            let m = m.try_borrow().ok()?;
            m.0.iter()
                .find(|made| made.len == len && &made.key[..len] == bytes)
                .map(|made| made.obj.clone_ref(py))
        });
        if let Some(obj) = found {
            return Ok(obj);
        }
        let obj = make(py, slot)?;
        let mut key = [0u8; KEY];
        key[..len].copy_from_slice(bytes);
        let made = Made {
            key,
            len,
            obj: obj.clone_ref(py),
        };
        // (Not kept if the cache is in use: making a tuple can run a
        // collection, whose finalizers could come here.)
        MADE.with(|m| {
            if let Ok(mut m) = m.try_borrow_mut() {
                let (list, next) = &mut *m;
                if list.len() < RECENT {
                    list.push(made);
                } else {
                    list[*next] = made;
                    *next = (*next + 1) % RECENT;
                }
            }
        });
        return Ok(obj);
    }
    make(py, slot)
}

/// `slot` as a new Python address (see [`to_python`]).
fn make(py: Python<'_>, slot: &AddrSlot) -> PyResult<PyObject> {
    let len = slot.len as usize;
    if len == 0 {
        // (no address: a datagram from an unnamed Unix socket, as
        // `socket.recvfrom` says it)
        return Ok(py.None());
    }
    let family = i32::from(slot.storage.ss_family);
    let base = std::ptr::addr_of!(slot.storage);
    match family {
        libc::AF_INET if len >= std::mem::size_of::<libc::sockaddr_in>() => {
            // SAFETY: the kernel wrote a sockaddr_in (family AF_INET, length
            // checked); sockaddr_storage is large and aligned enough for it.
            let a = unsafe { &*base.cast::<libc::sockaddr_in>() };
            let ip = Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
            Ok((ip.to_string(), u16::from_be(a.sin_port))
                .into_pyobject(py)?
                .into_any()
                .unbind())
        }
        libc::AF_INET6 if len >= std::mem::size_of::<libc::sockaddr_in6>() => {
            // SAFETY: as above, for sockaddr_in6.
            let a = unsafe { &*base.cast::<libc::sockaddr_in6>() };
            let t = (
                ipv6_text(&a.sin6_addr),
                u16::from_be(a.sin6_port),
                u32::from_be(a.sin6_flowinfo),
                a.sin6_scope_id,
            );
            Ok(t.into_pyobject(py)?.into_any().unbind())
        }
        libc::AF_UNIX => {
            // SAFETY: as above, for sockaddr_un; only the `len` bytes the
            // kernel filled in are read below.
            let a = unsafe { &*base.cast::<libc::sockaddr_un>() };
            let offset = std::mem::size_of::<libc::sa_family_t>();
            let path_len = len.saturating_sub(offset).min(a.sun_path.len());
            let path: Vec<u8> = a.sun_path[..path_len].iter().map(|&c| c as u8).collect();
            if path.first() == Some(&0) {
                return Ok(PyBytes::new(py, &path).into_any().unbind());
            }
            let end = path.iter().position(|&c| c == 0).unwrap_or(path.len());
            Ok(OsStr::from_bytes(&path[..end])
                .into_pyobject(py)?
                .into_any()
                .unbind())
        }
        _ => Ok(py.None()),
    }
}

extern "C" {
    /// The C library's `inet_ntop` (POSIX), which the `libc` crate does
    /// not declare.
    fn inet_ntop(
        af: libc::c_int,
        src: *const libc::c_void,
        dst: *mut libc::c_char,
        size: libc::socklen_t,
    ) -> *const libc::c_char;
}

/// An IPv6 address as `inet_ntop` spells it, as Python's `socket` module
/// does (an IPv4-compatible `::a.b.c.d` included, which Rust's
/// `Ipv6Addr` spells in hexadecimal groups).
fn ipv6_text(addr: &libc::in6_addr) -> String {
    let mut buf = [0 as libc::c_char; 64];
    // SAFETY: `addr` is an `in6_addr`, read only; `buf` has room for the
    // longest IPv6 text (46 bytes with its NUL), its length given.
    let text = unsafe {
        inet_ntop(
            libc::AF_INET6,
            std::ptr::from_ref(addr).cast(),
            buf.as_mut_ptr(),
            buf.len() as libc::socklen_t,
        )
    };
    if text.is_null() {
        return std::net::Ipv6Addr::from(addr.s6_addr).to_string();
    }
    // SAFETY: on success `inet_ntop` wrote a NUL-terminated string into
    // `buf`, which outlives this borrow.
    unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}
