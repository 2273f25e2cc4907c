//! The buffered copy path (reads into the arena, then writes) with blocks
//! and waves far smaller than the files, so that files span many blocks
//! and blocks of different files share and cross waves.

use std::path::PathBuf;

use blockio_tools::copy::{copy, CopyOptions, Progress};

fn data(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[3] ^ seed)
        .collect()
}

#[test]
fn files_spanning_many_blocks_and_waves_are_copied_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let sizes = [0, 1, 4095, 4096, 4097, 12_288, 50_001, 300_000, 1_048_579];
    for (i, &len) in sizes.iter().enumerate() {
        std::fs::write(src.join(format!("f{i}")), data(len, i as u8)).unwrap();
    }
    for (block, wave) in [(4096, 4096), (4096, 3 * 4096 + 100), (8192, 64 << 10)] {
        let dst = dir.path().join(format!("dst-{block}-{wave}"));
        let opts = CopyOptions {
            block,
            wave,
            // Every file through the arena, none through copy_file_range.
            copy_range_min: u64::MAX,
            group: 4,
            ..CopyOptions::default()
        };
        let progress = Progress::default();
        let report = copy(std::slice::from_ref(&src), &dst, &opts, &progress, &|e| {
            panic!("{e}")
        })
        .unwrap();
        assert_eq!(report.files, sizes.len() as u64);
        assert_eq!(report.bytes, sizes.iter().sum::<usize>() as u64);
        for (i, &len) in sizes.iter().enumerate() {
            let got: PathBuf = dst.join(format!("f{i}"));
            let got = std::fs::read(&got).unwrap();
            assert_eq!(got.len(), len, "f{i} with block {block} wave {wave}");
            assert!(
                got == data(len, i as u8),
                "f{i} differs with block {block} wave {wave}"
            );
        }
    }
}
