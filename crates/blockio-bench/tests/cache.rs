//! Page-cache eviction and warming, as `mincore` sees them.

use std::fs::File;
use std::io::Write;

use blockio_bench::cache::{evict, resident_fraction, warm};

#[test]
fn eviction_and_warming_are_seen_by_mincore() {
    let mut f = tempfile::NamedTempFile::new_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    assert!(
        !blockio_bench::data::is_memory_filesystem(f.path()).unwrap(),
        "CARGO_TARGET_TMPDIR is on tmpfs: eviction cannot be tested there"
    );
    f.write_all(&vec![0x5a; 8 << 20]).unwrap();
    let file = File::open(f.path()).unwrap();
    evict(f.as_file()).unwrap();
    let cold = resident_fraction(&file).unwrap();
    assert!(cold < 0.05, "after eviction {cold} of the file is resident");
    warm(&file).unwrap();
    let hot = resident_fraction(&file).unwrap();
    assert!(
        hot > 0.99,
        "after warming only {hot} of the file is resident"
    );
    evict(&file).unwrap();
    assert!(resident_fraction(&file).unwrap() < 0.05);
}

#[test]
fn empty_files_count_as_resident() {
    let f = tempfile::NamedTempFile::new_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    assert_eq!(resident_fraction(f.as_file()).unwrap(), 1.0);
}
