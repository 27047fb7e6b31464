//! The trusted proxies' networks: a CIDR string parsed into a [`Net`], and whether an address is
//! in it. Also the prefix masks, which [`peer`](super::peer) uses to group IPv6 keys.

use std::fmt;
use std::net::{IpAddr, Ipv6Addr};

use super::CidrError;

/// The top `bits` of 128 set (`bits` above 128 counts as 128).
pub(super) fn mask128(bits: u8) -> u128 {
    u128::MAX
        .checked_shl(128u32.saturating_sub(u32::from(bits)))
        .unwrap_or(0)
}

/// The top `bits` of 32 set (`bits` above 32 counts as 32).
fn mask32(bits: u8) -> u32 {
    u32::MAX
        .checked_shl(32u32.saturating_sub(u32::from(bits)))
        .unwrap_or(0)
}

/// One trusted network, its address bits already masked.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Net {
    V4 { net: u32, prefix: u8 },
    V6 { net: u128, prefix: u8 },
}

impl fmt::Debug for Net {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Net::V4 { net, prefix } => write!(f, "{}/{prefix}", std::net::Ipv4Addr::from(net)),
            Net::V6 { net, prefix } => write!(f, "{}/{prefix}", Ipv6Addr::from(net)),
        }
    }
}

impl Net {
    pub(super) fn parse(cidr: &str) -> Result<Net, CidrError> {
        let cidr = cidr.trim();
        let (addr, prefix) = match cidr.split_once('/') {
            Some((addr, prefix)) => (addr, Some(prefix)),
            None => (cidr, None),
        };
        let addr: IpAddr = addr.parse().map_err(|_| CidrError::Address)?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(digits) => {
                if digits.is_empty()
                    || digits.len() > 3
                    || !digits.bytes().all(|b| b.is_ascii_digit())
                {
                    return Err(CidrError::Prefix);
                }
                // At most three digits, so at most 999: fits a u16, and above 255 is too long.
                let value: u16 = digits.parse().map_err(|_| CidrError::Prefix)?;
                let Ok(value) = u8::try_from(value) else {
                    return Err(CidrError::PrefixTooLong {
                        prefix: u8::MAX,
                        max,
                    });
                };
                value
            }
        };
        if prefix == 0 {
            return Err(CidrError::ZeroPrefix);
        }
        if prefix > max {
            return Err(CidrError::PrefixTooLong { prefix, max });
        }
        let (net, network) = match addr {
            IpAddr::V4(v4) => {
                let net = u32::from(v4) & mask32(prefix);
                (
                    Net::V4 { net, prefix },
                    IpAddr::V4(std::net::Ipv4Addr::from(net)),
                )
            }
            IpAddr::V6(v6) => {
                let net = u128::from(v6) & mask128(prefix);
                (Net::V6 { net, prefix }, IpAddr::V6(Ipv6Addr::from(net)))
            }
        };
        if network != addr {
            return Err(CidrError::HostBits { network, prefix });
        }
        Ok(net)
    }

    /// Whether `ip` (canonical: IPv4-mapped addresses as IPv4) is in this network. An IPv4
    /// address is in an IPv6 network when its mapped form is.
    pub(super) fn contains(self, ip: IpAddr) -> bool {
        match (self, ip) {
            (Net::V4 { net, prefix }, IpAddr::V4(v4)) => u32::from(v4) & mask32(prefix) == net,
            (Net::V6 { net, prefix }, IpAddr::V6(v6)) => u128::from(v6) & mask128(prefix) == net,
            (Net::V6 { net, prefix }, IpAddr::V4(v4)) => {
                u128::from(v4.to_ipv6_mapped()) & mask128(prefix) == net
            }
            (Net::V4 { .. }, IpAddr::V6(_)) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::ip;
    use super::*;

    fn cidr_error(cidr: &str) -> Option<CidrError> {
        Net::parse(cidr).err()
    }

    #[test]
    fn cidrs_parse_or_say_why() {
        for ok in [
            "10.0.0.0/8",
            "192.168.1.0/24",
            "192.0.2.1",
            "192.0.2.1/32",
            " 10.0.0.0/8\t",
            "2001:db8::/32",
            "::1",
            "::1/128",
            "fe80::/10",
            "10.0.0.0/08",
            "0.0.0.0/1",
        ] {
            assert_eq!(cidr_error(ok), None, "{ok}");
        }
        assert_eq!(cidr_error(""), Some(CidrError::Address));
        assert_eq!(cidr_error("localhost"), Some(CidrError::Address));
        assert_eq!(cidr_error("10.0.0/8"), Some(CidrError::Address));
        assert_eq!(cidr_error("[::1]/128"), Some(CidrError::Address));
        assert_eq!(cidr_error("fe80::1%eth0/64"), Some(CidrError::Address));
        assert_eq!(cidr_error("10.0.0.0/"), Some(CidrError::Prefix));
        assert_eq!(cidr_error("10.0.0.0/+8"), Some(CidrError::Prefix));
        assert_eq!(cidr_error("10.0.0.0/8/8"), Some(CidrError::Prefix));
        assert_eq!(cidr_error("10.0.0.0/1000"), Some(CidrError::Prefix));
        assert_eq!(cidr_error("10.0.0.0/ 8"), Some(CidrError::Prefix));
        assert_eq!(
            cidr_error("10.0.0.0/33"),
            Some(CidrError::PrefixTooLong {
                prefix: 33,
                max: 32
            })
        );
        assert_eq!(
            cidr_error("::/129"),
            Some(CidrError::PrefixTooLong {
                prefix: 129,
                max: 128
            })
        );
        assert_eq!(
            cidr_error("::/999"),
            Some(CidrError::PrefixTooLong {
                prefix: 255,
                max: 128
            })
        );
        assert_eq!(cidr_error("0.0.0.0/0"), Some(CidrError::ZeroPrefix));
        assert_eq!(cidr_error("::/0"), Some(CidrError::ZeroPrefix));
        assert_eq!(
            cidr_error("10.1.2.3/8"),
            Some(CidrError::HostBits {
                network: ip("10.0.0.0"),
                prefix: 8
            })
        );
        assert_eq!(
            cidr_error("2001:db8::1/64"),
            Some(CidrError::HostBits {
                network: ip("2001:db8::"),
                prefix: 64
            })
        );
    }
}
