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

const SIZES: [usize; 9] = [0, 1, 4095, 4096, 4097, 12_288, 50_001, 300_000, 1_048_579];

/// Copies a tree of files of `SIZES` with each option set and checks every
/// copy byte for byte.
fn copy_and_check(label: &str, variants: &[CopyOptions]) {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    for (i, &len) in SIZES.iter().enumerate() {
        std::fs::write(src.join(format!("f{i}")), data(len, i as u8)).unwrap();
    }
    for (n, opts) in variants.iter().enumerate() {
        let (block, wave) = (opts.block, opts.wave);
        let dst = dir.path().join(format!("dst-{n}"));
        let progress = Progress::default();
        let report = copy(std::slice::from_ref(&src), &dst, opts, &progress, &|e| {
            panic!("{label}: {e}")
        })
        .unwrap();
        assert_eq!(report.files, SIZES.len() as u64);
        assert_eq!(report.bytes, SIZES.iter().sum::<usize>() as u64);
        for (i, &len) in SIZES.iter().enumerate() {
            let got: PathBuf = dst.join(format!("f{i}"));
            let got = std::fs::read(&got).unwrap();
            assert_eq!(
                got.len(),
                len,
                "{label}: f{i} with block {block} wave {wave}"
            );
            assert!(
                got == data(len, i as u8),
                "{label}: f{i} differs with block {block} wave {wave}"
            );
        }
    }
}

#[test]
fn files_spanning_many_blocks_and_waves_are_copied_exactly() {
    let variants: Vec<CopyOptions> = [(4096, 4096), (4096, 3 * 4096 + 100), (8192, 64 << 10)]
        .into_iter()
        .map(|(block, wave)| CopyOptions {
            block,
            wave,
            // Every file through the arena, none through copy_file_range.
            copy_range_min: u64::MAX,
            group: 4,
            ..CopyOptions::default()
        })
        .collect();
    copy_and_check("buffered", &variants);
}

/// `--fsync` with every file written with `O_DIRECT` (where the file system
/// takes it): each last block is written whole and the copy cut back to
/// its size. With a block that is not a multiple of 4 KiB the copies stay
/// buffered, and must come out the same.
#[test]
fn durable_copies_written_with_o_direct_are_exact() {
    let variants: Vec<CopyOptions> = [
        (4096, 4096),
        (4096, 3 * 4096 + 100),
        (8192, 64 << 10),
        (4196, 64 << 10),
    ]
    .into_iter()
    .map(|(block, wave)| CopyOptions {
        block,
        wave,
        fsync: true,
        direct_write_min: 0,
        group: 4,
        ..CopyOptions::default()
    })
    .collect();
    copy_and_check("O_DIRECT", &variants);
}
