//! Helpers shared by the tool tests (`mod common;` in each that uses them).

/// The address space, in KiB, that the loadable segments of the
/// executable at `path` (a 64-bit ELF file) take once mapped, each from
/// its page's start.
pub fn executable_image_kib(path: &str) -> u64 {
    let elf = std::fs::read(path).unwrap();
    assert_eq!(&elf[..5], b"\x7fELF\x02", "{path}: not a 64-bit ELF file");
    let u16_at = |o: usize| u64::from(u16::from_le_bytes([elf[o], elf[o + 1]]));
    let u64_at = |o: usize| u64::from_le_bytes(elf[o..o + 8].try_into().unwrap());
    let (phoff, phentsize, phnum) = (u64_at(0x20), u16_at(0x36), u16_at(0x38));
    let mut bytes = 0;
    for i in 0..phnum {
        let ph = (phoff + i * phentsize) as usize;
        let p_type = u32::from_le_bytes(elf[ph..ph + 4].try_into().unwrap());
        if p_type == 1 {
            let (vaddr, memsz) = (u64_at(ph + 0x10), u64_at(ph + 0x28));
            bytes += (vaddr % 4096 + memsz).next_multiple_of(4096);
        }
    }
    bytes / 1024
}
