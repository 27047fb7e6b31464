//! The connection's address: [`peer_addr`], the [`peer_ip()`] extractor, and the IPv6 grouping
//! ([`Ipv6Prefix`]) every address key uses.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use http::request::Parts;

use super::trusted::mask128;
use super::{KeyConfigError, KeyError, KeyExtractor};

/// The IPv6 prefix length [`peer_ip()`] and [`forwarded()`] group addresses by, unless told
/// otherwise: one key per /64, the block one host is usually given.
///
/// [`forwarded()`]: super::forwarded()
///
/// # Examples
///
/// ```
/// use std::net::{IpAddr, SocketAddr};
/// use tollgate::middleware::{peer_ip, KeyExtractor, DEFAULT_IPV6_PREFIX};
///
/// assert_eq!(DEFAULT_IPV6_PREFIX, 64);
/// let peer: SocketAddr = "[2001:db8:1:2:aaaa:bbbb:cccc:dddd]:443".parse()?;
/// let head = http::Request::builder().extension(peer).body(())?.into_parts().0;
/// assert_eq!(peer_ip().extract(&head)?, "2001:db8:1:2::".parse::<IpAddr>()?);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub const DEFAULT_IPV6_PREFIX: u8 = 64;

/// A validated IPv6 prefix length, `1..=128`, shared by every address extractor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Ipv6Prefix(u8);

impl Ipv6Prefix {
    pub(super) const DEFAULT: Ipv6Prefix = Ipv6Prefix(DEFAULT_IPV6_PREFIX);

    pub(super) fn new(bits: u8) -> Result<Ipv6Prefix, KeyConfigError> {
        if (1..=128).contains(&bits) {
            Ok(Ipv6Prefix(bits))
        } else {
            Err(KeyConfigError::Ipv6Prefix { bits })
        }
    }

    /// The key of an address: IPv4 (a mapped IPv6 address included) as it is, IPv6 with the bits
    /// below the prefix cleared.
    pub(super) fn group(self, ip: IpAddr) -> IpAddr {
        match ip.to_canonical() {
            IpAddr::V4(v4) => IpAddr::V4(v4),
            IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask128(self.0))),
        }
    }
}

/// The peer's socket address, from the request's extensions: a [`SocketAddr`] (a plain hyper
/// server inserts one), axum's `ConnectInfo<SocketAddr>` (feature `axum`), or tonic's
/// `TcpConnectInfo` (feature `tonic`), in that order. `None` when there is none.
///
/// Useful in a [`from_fn()`] key that combines the address with something else.
///
/// [`from_fn()`]: super::from_fn
///
/// # Examples
///
/// ```
/// use std::net::SocketAddr;
/// use tollgate::middleware::peer_addr;
///
/// let peer: SocketAddr = "192.0.2.1:40000".parse()?;
/// let head = http::Request::builder().extension(peer).body(())?.into_parts().0;
/// assert_eq!(peer_addr(&head), Some(peer));
/// assert_eq!(peer_addr(&http::Request::builder().body(())?.into_parts().0), None);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn peer_addr(head: &Parts) -> Option<SocketAddr> {
    let extensions = &head.extensions;
    if let Some(addr) = extensions.get::<SocketAddr>() {
        return Some(*addr);
    }
    #[cfg(feature = "axum")]
    if let Some(axum::extract::ConnectInfo(addr)) =
        extensions.get::<axum::extract::ConnectInfo<SocketAddr>>()
    {
        return Some(*addr);
    }
    #[cfg(feature = "tonic")]
    if let Some(addr) = extensions
        .get::<tonic::transport::server::TcpConnectInfo>()
        .and_then(|info| info.remote_addr())
    {
        return Some(addr);
    }
    None
}

/// Keys each request by its peer's IP address ([`peer_ip()`]).
///
/// # Examples
///
/// ```
/// use std::net::{IpAddr, SocketAddr};
/// use tollgate::middleware::{peer_ip, KeyExtractor};
///
/// let peer: SocketAddr = "[::ffff:192.0.2.1]:40000".parse()?;
/// let head = http::Request::builder().extension(peer).body(())?.into_parts().0;
/// // A dual-stack socket's IPv4-mapped address is keyed as the IPv4 address.
/// assert_eq!(peer_ip().extract(&head)?, "192.0.2.1".parse::<IpAddr>()?);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerIp {
    prefix: Ipv6Prefix,
}

/// Keys each request by its peer's IP address: IPv4 as it is (IPv4-mapped IPv6 included), IPv6
/// grouped by its first [`DEFAULT_IPV6_PREFIX`] (64) bits. The peer comes from the request's
/// extensions (see [`peer_addr`]); none is [`KeyError::NoConnectInfo`].
///
/// Behind a proxy or load balancer every request has the proxy's address: use [`forwarded()`].
///
/// [`forwarded()`]: super::forwarded()
///
/// # Examples
///
/// ```
/// use std::net::{IpAddr, SocketAddr};
/// use tollgate::middleware::{peer_ip, KeyExtractor};
///
/// let peer: SocketAddr = "192.0.2.1:40000".parse()?;
/// let head = http::Request::builder().extension(peer).body(())?.into_parts().0;
/// assert_eq!(peer_ip().extract(&head)?, "192.0.2.1".parse::<IpAddr>()?);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn peer_ip() -> PeerIp {
    PeerIp {
        prefix: Ipv6Prefix::DEFAULT,
    }
}

impl PeerIp {
    /// Groups IPv6 peers by their first `bits` bits instead of 64 (128: one key per address).
    ///
    /// # Errors
    ///
    /// [`KeyConfigError::Ipv6Prefix`] unless `bits` is in `1..=128`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::net::{IpAddr, SocketAddr};
    /// use tollgate::middleware::{peer_ip, KeyExtractor};
    ///
    /// let peer: SocketAddr = "[2001:db8:1:2:3:4:5:6]:443".parse()?;
    /// let head = http::Request::builder().extension(peer).body(())?.into_parts().0;
    /// assert_eq!(peer_ip().ipv6_prefix(48)?.extract(&head)?, "2001:db8:1::".parse::<IpAddr>()?);
    /// assert_eq!(peer_ip().ipv6_prefix(128)?.extract(&head)?, peer.ip());
    /// assert!(peer_ip().ipv6_prefix(129).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn ipv6_prefix(self, bits: u8) -> Result<PeerIp, KeyConfigError> {
        Ok(PeerIp {
            prefix: Ipv6Prefix::new(bits)?,
        })
    }
}

impl KeyExtractor for PeerIp {
    type Key = IpAddr;

    fn extract(&self, head: &Parts) -> Result<IpAddr, KeyError> {
        let peer = peer_addr(head).ok_or(KeyError::NoConnectInfo)?;
        Ok(self.prefix.group(peer.ip()))
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{head_from, ip};
    use super::*;

    #[test]
    fn ipv6_peers_are_grouped_by_prefix() {
        let head = head_from(Some("[2001:db8:1:2:aaaa:bbbb:cccc:dddd]:1"), "x", &[]);
        assert_eq!(peer_ip().extract(&head), Ok(ip("2001:db8:1:2::")));
        let by = |bits| peer_ip().ipv6_prefix(bits).unwrap().extract(&head).unwrap();
        assert_eq!(by(48), ip("2001:db8:1::"));
        assert_eq!(by(1), ip("::"));
        assert_eq!(by(127), ip("2001:db8:1:2:aaaa:bbbb:cccc:dddc"));
        assert_eq!(by(128), ip("2001:db8:1:2:aaaa:bbbb:cccc:dddd"));
        // IPv4 is never grouped.
        let v4 = head_from(Some("192.0.2.77:1"), "x", &[]);
        assert_eq!(
            peer_ip().ipv6_prefix(1).unwrap().extract(&v4),
            Ok(ip("192.0.2.77"))
        );
    }

    #[test]
    fn ipv6_prefix_outside_1_to_128_is_refused_naming_the_range() {
        for bits in [0, 129, 255] {
            let err = peer_ip().ipv6_prefix(bits).unwrap_err();
            assert_eq!(err, KeyConfigError::Ipv6Prefix { bits });
            assert_eq!(
                err.to_string(),
                format!("ipv6_prefix must be between 1 and 128 bits, got {bits}")
            );
        }
    }

    #[test]
    fn a_mapped_ipv4_peer_is_keyed_as_ipv4() {
        let head = head_from(Some("[::ffff:192.0.2.1]:1"), "x", &[]);
        assert_eq!(peer_ip().extract(&head), Ok(ip("192.0.2.1")));
    }

    #[test]
    fn the_peer_comes_from_socket_addr_then_axum_then_tonic() {
        let socket: SocketAddr = "192.0.2.1:1".parse().unwrap();
        let other: SocketAddr = "192.0.2.2:1".parse().unwrap();
        let third: SocketAddr = "192.0.2.3:1".parse().unwrap();
        let mut head = http::Request::builder().body(()).unwrap().into_parts().0;
        assert_eq!(peer_addr(&head), None);
        assert_eq!(peer_ip().extract(&head), Err(KeyError::NoConnectInfo));
        #[cfg(feature = "tonic")]
        {
            head.extensions
                .insert(tonic::transport::server::TcpConnectInfo {
                    local_addr: Some(other),
                    remote_addr: None,
                });
            // tonic's connect info without a remote address is no peer address.
            assert_eq!(peer_addr(&head), None);
            head.extensions
                .insert(tonic::transport::server::TcpConnectInfo {
                    local_addr: Some(other),
                    remote_addr: Some(third),
                });
            assert_eq!(peer_addr(&head), Some(third));
        }
        #[cfg(feature = "axum")]
        {
            head.extensions.insert(axum::extract::ConnectInfo(other));
            assert_eq!(peer_addr(&head), Some(other));
        }
        head.extensions.insert(socket);
        assert_eq!(peer_addr(&head), Some(socket));
        assert_eq!(peer_ip().extract(&head), Ok(socket.ip()));
        let _ = (other, third);
    }
}
