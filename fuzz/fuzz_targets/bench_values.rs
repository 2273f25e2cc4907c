//! The benchmarks' outside input: strategy and runtime names given on the
//! command line, and the HTTP requests net-bench's servers parse from the
//! network. Any input is a value or an error, never a panic, and a parsed
//! request never claims more bytes than arrived.
#![no_main]

use blockio_bench_input::{http, runtime, strategy};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = strategy::parse_strategies(s);
        let _ = runtime::parse_runtime(s);
    }
    if let Ok((count, used)) = http::parse_requests(data) {
        assert!(used <= data.len(), "{used} of {} bytes", data.len());
        assert!(count <= used, "{count} requests in {used} bytes");
    }
});
