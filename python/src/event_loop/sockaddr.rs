//! A socket address filled in by the kernel, as Python's `socket` module
//! spells it: `(host, port)` for IPv4, `(host, port, flowinfo, scope_id)`
//! for IPv6, a path (`str`, or `bytes` for Linux's abstract namespace, `''`
//! for an unnamed socket) for Unix sockets.

use std::ffi::OsStr;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::unix::ffi::OsStrExt;

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use super::ops::AddrSlot;

/// `slot` as a Python address; `None` for a family Python's `socket`
/// module has no tuple form for here.
pub(crate) fn to_python(py: Python<'_>, slot: &AddrSlot) -> PyResult<PyObject> {
    let len = slot.len as usize;
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
            let ip = Ipv6Addr::from(a.sin6_addr.s6_addr);
            let t = (
                ip.to_string(),
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
