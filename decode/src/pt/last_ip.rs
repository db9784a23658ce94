//! Last IP: how a TIP, TIP.PGE, TIP.PGD or FUP payload becomes an IP (SDM 36.4.2.2,
//! "IP Compression", Table 36-18).
//!
//! The processor compares each IP it sends with the last one it sent and leaves out the
//! upper bytes they share; the decoder keeps the same Last IP to fill them back in.
//! Unlike RTIT's LAST_LIP (cleared lazily, some packets after a PSB), Intel PT's Last IP
//! is "guaranteed to be reset to zero when a PSB is sent out", and it starts at zero: a
//! decoder that starts, or resynchronises, at a PSB knows it exactly. A suppressed IP
//! (IPBytes 000) leaves it unchanged: it "refers to the last IP packet with a non-zero
//! IPBytes field".

use super::packet::{IpCompression, IpPayload};

/// Sign-extend bit 47 (IPBytes 011).
#[inline]
pub fn sext48(v: u64) -> u64 {
    (((v << 16) as i64) >> 16) as u64
}

/// Why [`LastIp::current`] has no IP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoIp {
    /// No IP packet with a payload since the start or the last reset.
    None,
    /// The last IP packet had its IP suppressed (out of context).
    Suppressed,
}

/// The decoder's copy of the processor's Last IP.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LastIp {
    /// The 64-bit value payloads are compressed against (zero at a PSB).
    ip: u64,
    /// An IP packet with a payload was seen since the last reset.
    have_ip: bool,
    /// The most recent IP packet was suppressed.
    suppressed: bool,
}

impl LastIp {
    /// Last IP at the start of a trace, or right after a PSB: zero.
    pub fn new() -> Self {
        LastIp::default()
    }

    /// At a PSB the processor resets its Last IP to zero (36.4.2.2).
    pub fn reset(&mut self) {
        *self = LastIp::default();
    }

    /// The value payloads are compressed against (zero until a payload sets it).
    pub fn value(&self) -> u64 {
        self.ip
    }

    /// The IP of the most recent IP packet.
    pub fn current(&self) -> Result<u64, NoIp> {
        if !self.have_ip {
            Err(NoIp::None)
        } else if self.suppressed {
            Err(NoIp::Suppressed)
        } else {
            Ok(self.ip)
        }
    }

    /// Apply an IP packet's payload (Table 36-18) and return its IP, or `None` when the
    /// IP was suppressed.
    #[inline]
    pub fn update(&mut self, p: &IpPayload) -> Option<u64> {
        let keep_above = |bits: u32| (self.ip >> bits) << bits;
        let ip = match p.compression {
            IpCompression::Suppressed => {
                self.suppressed = true;
                return None;
            }
            IpCompression::Update16 => keep_above(16) | (p.bits & 0xFFFF),
            IpCompression::Update32 => keep_above(32) | (p.bits & 0xFFFF_FFFF),
            IpCompression::Sext48 => sext48(p.bits),
            IpCompression::Update48 => keep_above(48) | (p.bits & 0xFFFF_FFFF_FFFF),
            IpCompression::Full => p.bits,
        };
        self.ip = ip;
        self.have_ip = true;
        self.suppressed = false;
        Some(ip)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pl(ipb: u8, bits: u64) -> IpPayload {
        IpPayload {
            compression: IpCompression::from_ip_bytes(ipb).unwrap(),
            bits,
        }
    }

    fn at(ip: u64) -> LastIp {
        let mut l = LastIp::new();
        l.update(&pl(6, ip));
        l
    }

    #[test]
    fn sdm_36_4_2_2_table_36_18_ipbytes_001_replaces_bits_15_0() {
        let mut l = at(0xFFFF_8000_1234_5678);
        assert_eq!(l.update(&pl(1, 0xABCD)), Some(0xFFFF_8000_1234_ABCD));
    }

    #[test]
    fn sdm_36_4_2_2_table_36_18_ipbytes_010_replaces_bits_31_0() {
        let mut l = at(0xFFFF_8000_1234_5678);
        assert_eq!(l.update(&pl(2, 0x0040_1000)), Some(0xFFFF_8000_0040_1000));
    }

    #[test]
    fn sdm_36_4_2_2_table_36_18_ipbytes_011_sign_extends_bit_47() {
        let mut l = at(0x1234);
        assert_eq!(
            l.update(&pl(3, 0x8000_0000_1000)),
            Some(0xFFFF_8000_0000_1000)
        );
        assert_eq!(l.update(&pl(3, 0x7FFF_0000_1000)), Some(0x7FFF_0000_1000));
    }

    #[test]
    fn sdm_36_4_2_2_table_36_18_ipbytes_100_replaces_bits_47_0() {
        // Keeps bits 63:48 of Last IP, whatever they are (no sign extension).
        let mut l = at(0x00CC_0000_0000_0000);
        assert_eq!(
            l.update(&pl(4, 0xFFFF_FFFF_4000)),
            Some(0x00CC_FFFF_FFFF_4000)
        );
    }

    #[test]
    fn sdm_36_4_2_2_table_36_18_ipbytes_110_is_the_full_ip() {
        let mut l = at(0x1234);
        assert_eq!(
            l.update(&pl(6, 0x0A00_CCCC_DDDD_EEEE)),
            Some(0x0A00_CCCC_DDDD_EEEE)
        );
        assert_eq!(l.current(), Ok(0x0A00_CCCC_DDDD_EEEE));
    }

    #[test]
    fn sdm_36_4_2_2_ipbytes_000_suppressed_keeps_last_ip() {
        let mut l = at(0x4000_1000);
        assert_eq!(l.update(&pl(0, 0)), None);
        assert_eq!(l.current(), Err(NoIp::Suppressed));
        // The next compressed IP is against the last non-suppressed one.
        assert_eq!(l.update(&pl(1, 0x2000)), Some(0x4000_2000));
        assert_eq!(l.current(), Ok(0x4000_2000));
    }

    #[test]
    fn sdm_36_4_2_2_last_ip_starts_at_zero_and_resets_at_psb() {
        let mut l = LastIp::new();
        assert_eq!(l.current(), Err(NoIp::None));
        // "The first IP in the trace may be compressed if the upper bytes are zeroes."
        assert_eq!(l.update(&pl(1, 0x1002)), Some(0x1002));
        let mut l = at(0xFFFF_FFFF_8100_0000);
        l.reset();
        assert_eq!(l.value(), 0);
        assert_eq!(l.current(), Err(NoIp::None));
        assert_eq!(l.update(&pl(2, 0x0040_1000)), Some(0x0040_1000));
    }

    #[test]
    fn suppressed_first_ip_is_no_ip() {
        let mut l = LastIp::new();
        assert_eq!(l.update(&pl(0, 0)), None);
        assert_eq!(l.current(), Err(NoIp::None));
    }
}
