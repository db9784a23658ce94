//! LAST_LIP: IP decompression for TIP and FUP payloads (spec 4.2.3.1, Table 18).
//!
//! Every TIP/FUP updates LAST_LIP with its full IP, even when it was sent compressed. A
//! 2-byte payload keeps LAST_LIP[47:16], a 4-byte one keeps LAST_LIP[47:32], unless Zext
//! says the upper bytes are zero. IPs are 48 bits; like the RTIT_LIP registers read back,
//! tracemill sign-extends bit 47.
//!
//! The decoder never clears LAST_LIP at a PSB: the hardware clears it lazily, up to four
//! packets later (3.3.9), and until then keeps compressing against the old value; after
//! the clear it only sends self-contained payloads, so keeping the old value is right on
//! both sides of the clear.

use super::packet::IpPayload;

/// Sign-extend a 48-bit linear address.
#[inline]
pub fn sext48(ip: u64) -> u64 {
    (((ip << 16) as i64) >> 16) as u64
}

/// The decoder's copy of RTIT_LAST_LIP. `None` while unknown (start of a chunk, after an
/// error): a payload that needs the upper bytes cannot be resolved then.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LastIp {
    last: Option<u64>,
}

impl LastIp {
    pub fn unknown() -> Self {
        LastIp { last: None }
    }
    pub fn known(ip: u64) -> Self {
        LastIp {
            last: Some(ip & 0xFFFF_FFFF_FFFF),
        }
    }
    pub fn get(&self) -> Option<u64> {
        self.last
    }
    pub fn forget(&mut self) {
        self.last = None;
    }

    /// Decompress `p` and update LAST_LIP. `None` when the payload depends on an unknown
    /// LAST_LIP (LAST_LIP stays unknown: the packet's upper bytes are unknown too).
    #[inline]
    pub fn update(&mut self, p: &IpPayload) -> Option<u64> {
        let ip48 = match resolve(p, self.last) {
            Some(ip) => ip,
            None => {
                self.last = None;
                return None;
            }
        };
        self.last = Some(ip48);
        Some(sext48(ip48))
    }
}

/// The 48-bit IP for payload `p` given LAST_LIP `last` (Table 18), without side effects.
#[inline]
pub fn resolve(p: &IpPayload, last: Option<u64>) -> Option<u64> {
    let low_mask = match p.size {
        2 => 0xFFFF,
        4 => 0xFFFF_FFFF,
        _ => 0xFFFF_FFFF_FFFF,
    };
    let low = p.bits & low_mask;
    if p.zext || p.size >= 6 {
        return Some(low);
    }
    last.map(|l| (l & 0xFFFF_FFFF_FFFF & !low_mask) | low)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pl(size: u8, zext: bool, bits: u64) -> IpPayload {
        IpPayload { size, zext, bits }
    }

    #[test]
    fn table18_cnt0_zext0_keeps_bits_47_16() {
        let mut l = LastIp::known(0x7FFF_1234_5678);
        assert_eq!(l.update(&pl(2, false, 0xABCD)), Some(0x7FFF_1234_ABCD));
    }

    #[test]
    fn table18_cnt0_zext1_upper_zero() {
        let mut l = LastIp::known(0x7FFF_1234_5678);
        assert_eq!(l.update(&pl(2, true, 0xABCD)), Some(0xABCD));
        assert_eq!(l.get(), Some(0xABCD));
    }

    #[test]
    fn table18_cnt1_zext0_keeps_bits_47_32() {
        let mut l = LastIp::known(0x7FFF_1234_5678);
        assert_eq!(l.update(&pl(4, false, 0x0040_1000)), Some(0x7FFF_0040_1000));
    }

    #[test]
    fn table18_cnt1_zext1_upper_zero() {
        let mut l = LastIp::unknown();
        assert_eq!(l.update(&pl(4, true, 0x0040_1000)), Some(0x40_1000));
    }

    #[test]
    fn table18_cnt2_full_ip_sign_extended() {
        let mut l = LastIp::unknown();
        assert_eq!(
            l.update(&pl(6, false, 0xFFFF_8000_0000)),
            Some(0xFFFF_FFFF_8000_0000)
        );
        // LAST_LIP holds the 48-bit value; later 2-byte payloads extend from it.
        assert_eq!(l.update(&pl(2, false, 0x10)), Some(0xFFFF_FFFF_8000_0010));
    }

    #[test]
    fn compressed_payload_with_unknown_last_ip_is_unresolved() {
        let mut l = LastIp::unknown();
        assert_eq!(l.update(&pl(2, false, 0x1)), None);
        assert_eq!(l.update(&pl(4, false, 0x1)), None);
        assert_eq!(l.get(), None);
        assert_eq!(l.update(&pl(4, true, 0x1)), Some(1));
    }
}
