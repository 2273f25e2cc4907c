//! Size arguments (`--block-size 1M`): any text is a size or an error
//! naming it, never a panic, and a size given back in bytes reads the same.
#![no_main]

use blockio_tools::size;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|s: &str| {
    match size::parse(s) {
        Ok(n) => assert_eq!(size::parse(&n.to_string()), Ok(n), "{s:?}"),
        Err(e) => assert!(e.contains(&format!("{s:?}")), "{e} does not name {s:?}"),
    }
});
