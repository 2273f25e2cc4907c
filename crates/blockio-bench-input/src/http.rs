//! The HTTP/1.1 requests `blockio-bench net`'s servers read, parsed with
//! `httparse`.

use std::io;

/// Complete requests at the start of `data`: how many, and how many bytes
/// they take. A malformed request is an error.
///
/// # Examples
///
/// ```
/// let one = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";
/// let mut data = one.repeat(2);
/// data.extend_from_slice(b"GET / HT"); // a third, not complete yet
/// let (count, used) = blockio_bench_input::http::parse_requests(&data).unwrap();
/// assert_eq!((count, used), (2, 2 * one.len()));
/// ```
pub fn parse_requests(data: &[u8]) -> io::Result<(usize, usize)> {
    let (mut count, mut used) = (0, 0);
    loop {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(&data[used..]) {
            Ok(httparse::Status::Complete(n)) => {
                count += 1;
                used += n;
            }
            Ok(httparse::Status::Partial) => return Ok((count, used)),
            Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pipelined_and_partial_requests() {
        let one = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";
        let mut data = one.repeat(3);
        data.extend_from_slice(b"GET / HT");
        assert_eq!(parse_requests(&data).unwrap(), (3, one.len() * 3));
        assert!(parse_requests(b"\x00\x01garbage\r\n\r\n").is_err());
    }
}
