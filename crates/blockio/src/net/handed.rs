//! What `from_std` checks of a socket handed over: that it is a stream
//! socket of the family its type serves, listening for a listener and not
//! listening for a stream. A socket of another kind would be taken, and
//! misbehave later (a datagram read in pieces loses its tail, a UDP
//! socket's accept waits for ever), so it is refused at once, with an
//! error naming the call and what was found.

use std::io;

use socket2::{Domain, Socket, Type};

/// The families a `from_std` call takes.
#[derive(Clone, Copy)]
pub(crate) enum Family {
    /// IPv4 or IPv6 (TCP).
    Ip,
    /// Unix domain.
    Unix,
}

/// Checks that `socket`, handed to `call` (`"TcpStream::from_std"`...), is
/// a stream socket of `family`, listening if and only if `listener`.
///
/// # Errors
/// Kind [`InvalidInput`](io::ErrorKind::InvalidInput), naming `call` and
/// the type, family or state found; the kernel's error asking them (a
/// descriptor that is no socket: `ENOTSOCK`), named the same way, with its
/// kind.
pub(crate) fn check(socket: &Socket, call: &str, family: Family, listener: bool) -> io::Result<()> {
    let asking = |what: &str, err: io::Error| {
        io::Error::new(
            err.kind(),
            format!("{call}: asking the socket's {what}: {err}"),
        )
    };
    let refuse =
        |msg: String| io::Error::new(io::ErrorKind::InvalidInput, format!("{call}: {msg}"));
    let ty = socket.r#type().map_err(|e| asking("type (SO_TYPE)", e))?;
    let domain = socket
        .domain()
        .map_err(|e| asking("family (SO_DOMAIN)", e))?;
    let (family_ok, wanted) = match family {
        Family::Ip => (
            domain == Domain::IPV4 || domain == Domain::IPV6,
            "an IPv4 or IPv6",
        ),
        Family::Unix => (domain == Domain::UNIX, "a Unix-domain"),
    };
    if ty != Type::STREAM || !family_ok {
        return Err(refuse(format!(
            "the socket is of type {ty:?} and family {domain:?}, not {wanted} SOCK_STREAM socket"
        )));
    }
    let listening = socket
        .is_listener()
        .map_err(|e| asking("state (SO_ACCEPTCONN)", e))?;
    match (listener, listening) {
        (true, false) => Err(refuse(
            "the socket is not listening (call listen(2) on it before handing it over)".into(),
        )),
        (false, true) => Err(refuse(
            "the socket is a listening one, not a connected stream (hand it to the listener's from_std)"
                .into(),
        )),
        _ => Ok(()),
    }
}
