//! `sum -c` lists: any bytes, read line by line as `sha256sum -c` reads
//! them, never panic; and a line written for any name reads back as that
//! name and digest.
#![no_main]

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use blockio_tools::names::{self, ListState};
use libfuzzer_sys::fuzz_target;

const HEX: &str = "d41d8cd98f00b204e9800998ecf8427e";

fuzz_target!(|data: &[u8]| {
    let mut list = ListState::default();
    for line in data.split(|&b| b == b'\n') {
        let _ = list.parse(line);
    }
    // The round trip: every name but an empty one or one with a NUL (no
    // file has those) survives writing and reading.
    if !data.is_empty() && !data.contains(&0) {
        let name = OsStr::from_bytes(data);
        let line = names::line(HEX, name);
        let body = line.strip_suffix(b"\n").expect("a line ends in a newline");
        let read = names::parse(body).expect("a written line reads back");
        assert_eq!(read.name, name, "name of {line:?}");
        assert_eq!(read.hex, HEX, "digest of {line:?}");
    }
});
