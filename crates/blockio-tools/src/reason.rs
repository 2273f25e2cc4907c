//! The system's reason for a failure in the coreutils' words.

use std::io;

/// `"No such file or directory"` for an errno-carrying error (without the
/// `" (os error 2)"` Rust appends), else the error's text.
pub fn reason(e: &io::Error) -> String {
    match blockio::errno(e) {
        Some(code) => {
            let s = io::Error::from_raw_os_error(code).to_string();
            match s.rfind(" (os error") {
                Some(i) => s[..i].to_string(),
                None => s,
            }
        }
        None => e.to_string(),
    }
}
