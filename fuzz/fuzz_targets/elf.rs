//! ELF loading: arbitrary bytes through `ImageSet::add_elf` (with and without a load base
//! and CR3), then lookups and basic blocks built at the segment bounds and at addresses
//! taken from the input. No panic, and what is built stays inside what was loaded.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tracemill_decode::block::{build_block, BlockCache, BlockEnd};
use tracemill_decode::image::ImageSet;

fuzz_target!(|data: &[u8]| {
    // libFuzzer hands over a fresh heap copy: 8-byte aligned, as a memory map is (object's
    // ELF reader wants aligned headers).
    let file = data;
    let sel = data.first().copied().unwrap_or(0);
    // The tail of the file, read as addresses (into the ELF's own range or anywhere).
    let tail = &data[data.len().saturating_sub(16)..];
    let word = |i: usize| -> u64 {
        let mut w = [0u8; 8];
        for (j, b) in tail.iter().skip(i * 8).take(8).enumerate() {
            w[j] = *b;
        }
        u64::from_le_bytes(w)
    };
    for (base, cr3) in [
        (None, None),
        (Some(word(0)), Some(0x1000u64)),
        (Some(0xffff_ffff_ffff_f000), None),
    ] {
        let mut set = ImageSet::new();
        if set.add_elf("fuzz", file, base, cr3).is_err() {
            continue;
        }
        if sel & 1 == 1 {
            // A second, differently tagged copy: lookups with an unknown CR3 are ambiguous.
            let _ = set.add_elf("fuzz2", file, base, Some(0x2000));
        }
        let segs: Vec<_> = set.segments().iter().map(|s| (s.start, s.end())).collect();
        let mut cache = BlockCache::new();
        let mut probes: Vec<u64> = Vec::new();
        for &(s, e) in &segs {
            probes.extend([s, e.wrapping_sub(1), e, s.wrapping_add(word(1) % 4096)]);
        }
        probes.push(word(1));
        for a in probes {
            for c in [None, cr3, Some(0x2000)] {
                let b = build_block(&set, a, c);
                assert_eq!(b.start, a);
                assert!(b.lens.len() <= 4096, "block longer than the cap");
                if b.end == BlockEnd::Branch {
                    assert!(set.code_at(b.last_ip, c).is_ok(), "branch outside the image");
                }
                let _ = set.image_of(a, c);
                let i = cache.index(&set, a, c);
                let _ = cache.block(i);
            }
        }
        assert!(cache.bytes() < 1 << 30);
    }
});
