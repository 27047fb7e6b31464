//! The client behind trusted proxies: the [`forwarded()`] extractor, and the reading of
//! `X-Forwarded-For` and `Forwarded` from the right, one entry at a time.

use std::net::{IpAddr, Ipv6Addr};
// Not the crate's `sync` shim: nothing here is atomic; the `Arc` only shares the immutable list
// of trusted networks between clones of an extractor.
use std::sync::Arc;

use http::header::ValueIter;
use http::request::Parts;
use http::{HeaderMap, HeaderName, HeaderValue};

use super::peer::{peer_addr, Ipv6Prefix};
use super::trusted::Net;
use super::{KeyConfigError, KeyError, KeyExtractor};

/// The header [`forwarded()`] reads.
///
/// # Examples
///
/// ```
/// use tollgate::middleware::ForwardedHeader;
///
/// assert_eq!(ForwardedHeader::XForwardedFor.name(), "x-forwarded-for");
/// assert_eq!(ForwardedHeader::Forwarded.name(), http::header::FORWARDED);
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ForwardedHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2`: comma-separated addresses, the de-facto
    /// standard (nginx's `$proxy_add_x_forwarded_for`, AWS and Google load balancers).
    XForwardedFor,
    /// RFC 7239's `Forwarded: for=client;proto=https, for="[2001:db8::1]:4711"`: only `for` is
    /// read.
    Forwarded,
}

impl ForwardedHeader {
    /// The header's name.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::middleware::ForwardedHeader;
    ///
    /// assert_eq!(ForwardedHeader::Forwarded.name(), "forwarded");
    /// ```
    pub fn name(self) -> HeaderName {
        match self {
            ForwardedHeader::XForwardedFor => HeaderName::from_static("x-forwarded-for"),
            ForwardedHeader::Forwarded => http::header::FORWARDED,
        }
    }
}

/// Keys each request by its client's address behind trusted proxies ([`forwarded()`]).
///
/// # Examples
///
/// ```
/// use std::net::{IpAddr, SocketAddr};
/// use tollgate::middleware::{forwarded, ForwardedHeader, KeyExtractor};
///
/// let key = forwarded(["10.0.0.0/8"], ForwardedHeader::XForwardedFor)?;
/// let proxy: SocketAddr = "10.0.0.2:50000".parse()?;
/// let head = http::Request::builder()
///     .header("x-forwarded-for", "198.51.100.7, 10.0.0.9")
///     .extension(proxy)
///     .body(())?
///     .into_parts()
///     .0;
/// assert_eq!(key.extract(&head)?, "198.51.100.7".parse::<IpAddr>()?);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct Forwarded {
    trusted: Arc<[Net]>,
    header: ForwardedHeader,
    /// `header.name()`, made once.
    name: HeaderName,
    prefix: Ipv6Prefix,
}

/// Keys each request by its client's address as your proxies report it in `header`, believing
/// only proxies whose addresses are in `trusted_cidrs` (such as `["10.0.0.0/8", "::1"]`). See
/// [the module docs](super#behind-proxies-which-address-is-the-client) for the rules and why the
/// leftmost entry is never used.
///
/// In short: a peer outside `trusted_cidrs` is the key, whatever it sends. From a trusted peer,
/// the header's entries are walked from the right past trusted addresses; the first untrusted one
/// is the key. An entry that is not an address (`unknown`, `_hidden`, garbage) stops the walk at
/// the nearest trusted hop, which then is the key. Keys are grouped as [`peer_ip()`]'s: IPv6 by
/// its first 64 bits, mapped IPv4 as IPv4.
///
/// A CIDR is an address, `/`, and a prefix length (`10.0.0.0/8`, `2001:db8::/32`), or an address
/// alone for one host. A prefix with bits set below it (`10.1.2.3/8`) is refused, not masked
/// (usually a host written with the wrong prefix; masking would trust a whole network), and so is
/// `/0`. An IPv6 CIDR that covers IPv4-mapped addresses (`::ffff:10.0.0.0/104`) trusts those IPv4
/// addresses too. An empty list trusts nobody: every key is the peer, as with [`peer_ip()`].
///
/// [`peer_ip()`]: super::peer_ip
/// [`CidrError`]: super::CidrError
///
/// # Errors
///
/// [`KeyConfigError::Cidr`] naming the first string that is not a usable CIDR, and why
/// ([`CidrError`]).
///
/// # Examples
///
/// ```
/// use std::net::{IpAddr, SocketAddr};
/// use tollgate::middleware::{forwarded, ForwardedHeader, KeyExtractor};
///
/// let key = forwarded(["127.0.0.1/32", "10.0.0.0/8", "::1/128"], ForwardedHeader::Forwarded)?;
/// let head = |peer: &str, fwd: &str| -> Result<_, Box<dyn std::error::Error>> {
///     let peer: SocketAddr = peer.parse()?;
///     Ok(http::Request::builder().header("forwarded", fwd).extension(peer).body(())?.into_parts().0)
/// };
/// let ip = |s: &str| s.parse::<IpAddr>().unwrap();
///
/// // Through the proxy at 127.0.0.1, which appended its client 203.0.113.9.
/// assert_eq!(key.extract(&head("127.0.0.1:5000", "for=192.0.2.66, for=203.0.113.9")?)?, ip("203.0.113.9"));
/// // The same header straight from a client is not believed.
/// assert_eq!(key.extract(&head("198.51.100.1:5000", "for=192.0.2.66")?)?, ip("198.51.100.1"));
/// // An obfuscated client: keyed on the nearest trusted hop, 10.0.0.5.
/// assert_eq!(key.extract(&head("127.0.0.1:5000", "for=_hidden, for=10.0.0.5")?)?, ip("10.0.0.5"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn forwarded(
    trusted_cidrs: impl IntoIterator<Item = impl AsRef<str>>,
    header: ForwardedHeader,
) -> Result<Forwarded, KeyConfigError> {
    let trusted = trusted_cidrs
        .into_iter()
        .map(|cidr| {
            let cidr = cidr.as_ref();
            Net::parse(cidr).map_err(|reason| KeyConfigError::Cidr {
                cidr: cidr.to_owned(),
                reason,
            })
        })
        .collect::<Result<Arc<[Net]>, KeyConfigError>>()?;
    Ok(Forwarded {
        trusted,
        header,
        name: header.name(),
        prefix: Ipv6Prefix::DEFAULT,
    })
}

impl Forwarded {
    /// Groups IPv6 keys by their first `bits` bits instead of 64 (128: one key per address).
    ///
    /// # Errors
    ///
    /// [`KeyConfigError::Ipv6Prefix`] unless `bits` is in `1..=128`.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::middleware::{forwarded, ForwardedHeader, KeyConfigError};
    ///
    /// let key = forwarded(["::1"], ForwardedHeader::XForwardedFor)?.ipv6_prefix(56)?;
    /// assert!(matches!(key.ipv6_prefix(200), Err(KeyConfigError::Ipv6Prefix { bits: 200 })));
    /// # Ok::<(), KeyConfigError>(())
    /// ```
    pub fn ipv6_prefix(self, bits: u8) -> Result<Forwarded, KeyConfigError> {
        Ok(Forwarded {
            prefix: Ipv6Prefix::new(bits)?,
            ..self
        })
    }

    /// The header this reads.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::middleware::{forwarded, ForwardedHeader};
    ///
    /// let key = forwarded(["10.0.0.0/8"], ForwardedHeader::Forwarded)?;
    /// assert_eq!(key.header(), ForwardedHeader::Forwarded);
    /// # Ok::<(), tollgate::middleware::KeyConfigError>(())
    /// ```
    pub fn header(&self) -> ForwardedHeader {
        self.header
    }

    /// Whether `ip` is in one of the trusted CIDRs (an IPv4-mapped IPv6 address is looked up as
    /// its IPv4 address).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::middleware::{forwarded, ForwardedHeader};
    ///
    /// let key = forwarded(["10.0.0.0/8"], ForwardedHeader::XForwardedFor)?;
    /// assert!(key.is_trusted("10.200.0.1".parse()?));
    /// assert!(key.is_trusted("::ffff:10.0.0.1".parse()?));
    /// assert!(!key.is_trusted("11.0.0.1".parse()?));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn is_trusted(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.trusted.iter().any(|net| net.contains(ip))
    }

    /// The client's address by the rules of [`forwarded()`], before grouping: the request came
    /// from `peer` and carries `headers`. IPv4-mapped addresses come back as IPv4. The key
    /// [`extract`](KeyExtractor::extract) returns is this address grouped (IPv6 by its prefix);
    /// this one is for logs.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::net::IpAddr;
    /// use tollgate::middleware::{forwarded, ForwardedHeader};
    ///
    /// let key = forwarded(["10.0.0.0/8"], ForwardedHeader::XForwardedFor)?;
    /// let mut headers = http::HeaderMap::new();
    /// headers.append("x-forwarded-for", "192.0.2.1".parse()?);
    /// headers.append("x-forwarded-for", "2001:db8::7, 10.1.1.1".parse()?);
    /// let proxy: IpAddr = "10.0.0.1".parse()?;
    /// assert_eq!(key.client_ip(proxy, &headers), "2001:db8::7".parse::<IpAddr>()?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn client_ip(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        let peer = peer.to_canonical();
        if !self.is_trusted(peer) {
            return peer;
        }
        let lines = headers.get_all(&self.name).iter();
        let prev = match self.header {
            ForwardedHeader::XForwardedFor => prev_xff_entry,
            ForwardedHeader::Forwarded => prev_forwarded_element,
        };
        let mut nearest = peer;
        for hop in Hops::new(lines, prev) {
            match hop {
                Hop::Addr(ip) => {
                    let ip = ip.to_canonical();
                    if self.is_trusted(ip) {
                        nearest = ip;
                    } else {
                        return ip;
                    }
                }
                Hop::Stop => break,
            }
        }
        nearest
    }
}

impl KeyExtractor for Forwarded {
    type Key = IpAddr;

    fn extract(&self, head: &Parts) -> Result<IpAddr, KeyError> {
        let peer = peer_addr(head).ok_or(KeyError::NoConnectInfo)?;
        Ok(self.prefix.group(self.client_ip(peer.ip(), &head.headers)))
    }
}

/// One entry of a forwarding header, read from the right.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hop {
    /// An address.
    Addr(IpAddr),
    /// Anything else: malformed, `unknown`, obfuscated, empty. The walk stops here.
    Stop,
}

/// Reads the entry of a field line that ends at `end` (exclusive), leftwards. Returns it and the
/// index of the `,` before it, or `None` when it is the line's first entry (or when it is a
/// `Stop`, after which nothing more is read).
type PrevEntry = fn(&[u8], usize) -> (Hop, Option<usize>);

/// A forwarding header's entries from the right: its field lines from the last, each line's
/// entries from the last, read lazily so that the part a client wrote is never parsed unless the
/// walk gets there.
struct Hops<'a> {
    lines: ValueIter<'a, HeaderValue>,
    line: &'a [u8],
    /// Where the next entry of `line` ends; `None` to take the previous line.
    end: Option<usize>,
    prev: PrevEntry,
}

impl<'a> Hops<'a> {
    fn new(lines: ValueIter<'a, HeaderValue>, prev: PrevEntry) -> Hops<'a> {
        Hops {
            lines,
            line: &[],
            end: None,
            prev,
        }
    }
}

impl Iterator for Hops<'_> {
    type Item = Hop;

    fn next(&mut self) -> Option<Hop> {
        let end = match self.end {
            Some(end) => end,
            None => {
                self.line = self.lines.next_back()?.as_bytes();
                self.line.len()
            }
        };
        let (hop, next_end) = (self.prev)(self.line, end);
        self.end = next_end;
        Some(hop)
    }
}

/// The longest address text read (with brackets and a port), longer than any address: an
/// IPv6 address with an embedded IPv4 one is at most 45 characters.
const MAX_NODE_LEN: usize = 64;

/// Reads one address, in any accepted form: `192.0.2.1`, `192.0.2.1:80`, `2001:db8::1`,
/// `[2001:db8::1]`, `[2001:db8::1]:80` (a port may also be an RFC 7239 obfuscated `_port`).
/// Anything else (`unknown`, `_hidden`, a zone index, garbage) is a `Stop`.
fn parse_node(bytes: &[u8]) -> Hop {
    if bytes.is_empty() || bytes.len() > MAX_NODE_LEN {
        return Hop::Stop;
    }
    let Ok(text) = std::str::from_utf8(bytes) else {
        return Hop::Stop;
    };
    let addr = if let Some(rest) = text.strip_prefix('[') {
        let Some((inner, after)) = rest.split_once(']') else {
            return Hop::Stop;
        };
        let port_ok = after.is_empty() || after.strip_prefix(':').is_some_and(is_port);
        match inner.parse::<Ipv6Addr>() {
            Ok(v6) if port_ok => IpAddr::V6(v6),
            _ => return Hop::Stop,
        }
    } else if text.bytes().filter(|&b| b == b':').count() == 1 {
        // One colon: an IPv4 address and a port (an IPv6 address has at least two).
        let Some((host, port)) = text.split_once(':') else {
            return Hop::Stop;
        };
        match host.parse::<std::net::Ipv4Addr>() {
            Ok(v4) if is_port(port) => IpAddr::V4(v4),
            _ => return Hop::Stop,
        }
    } else {
        match text.parse::<IpAddr>() {
            Ok(ip) => ip,
            Err(_) => return Hop::Stop,
        }
    };
    Hop::Addr(addr)
}

/// A port: 1 to 5 digits up to 65535, or RFC 7239's obfuscated port (`_` and letters, digits,
/// `.`, `_`, `-`).
fn is_port(port: &str) -> bool {
    if let Some(obfuscated) = port.strip_prefix('_') {
        return !obfuscated.is_empty()
            && obfuscated
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-');
    }
    (1..=5).contains(&port.len())
        && port.bytes().all(|b| b.is_ascii_digit())
        && port.parse::<u32>().is_ok_and(|p| p <= 65_535)
}

/// Optional whitespace (RFC 9110's OWS): spaces and tabs.
fn is_ows(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

/// The byte before index `i`, if any.
fn before(s: &[u8], i: usize) -> Option<u8> {
    i.checked_sub(1).and_then(|j| s.get(j)).copied()
}

/// Moves `i` left past optional whitespace.
fn skip_ows_left(s: &[u8], mut i: usize) -> usize {
    while before(s, i).is_some_and(is_ows) {
        i -= 1;
    }
    i
}

/// The `X-Forwarded-For` entry ending at `end`: the text after the previous `,`, without the
/// surrounding whitespace.
fn prev_xff_entry(line: &[u8], end: usize) -> (Hop, Option<usize>) {
    let line = line.get(..end).unwrap_or_default();
    let comma = line.iter().rposition(|&b| b == b',');
    let entry = line.get(comma.map_or(0, |c| c + 1)..).unwrap_or_default();
    let start = entry
        .iter()
        .position(|&b| !is_ows(b))
        .unwrap_or(entry.len());
    let stop = entry
        .iter()
        .rposition(|&b| !is_ows(b))
        .map_or(start, |i| i + 1);
    (
        parse_node(entry.get(start..stop).unwrap_or_default()),
        comma,
    )
}

/// RFC 9110's tchar: what a token (a parameter name, an unquoted value) is made of.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// An unquoted `Forwarded` value: a token, or (leniently, as some proxies send it) an address
/// with brackets or a port, which RFC 7239 wants quoted.
fn is_value_char(b: u8) -> bool {
    is_tchar(b) || b == b':' || b == b'[' || b == b']'
}

/// A `Forwarded` parameter's value as written.
enum Value<'a> {
    Token(&'a [u8]),
    /// Between the quotes, quoted pairs (`\x`) still escaped; already checked well formed.
    Quoted(&'a [u8]),
}

impl Value<'_> {
    /// The value read as an address.
    fn node(&self) -> Hop {
        match *self {
            Value::Token(token) => parse_node(token),
            Value::Quoted(content) => {
                let mut buf = [0u8; MAX_NODE_LEN];
                let mut len = 0;
                let mut escaped = false;
                for &b in content {
                    if b == b'\\' && !escaped {
                        escaped = true;
                        continue;
                    }
                    escaped = false;
                    let Some(slot) = buf.get_mut(len) else {
                        return Hop::Stop;
                    };
                    *slot = b;
                    len += 1;
                }
                parse_node(buf.get(..len).unwrap_or_default())
            }
        }
    }
}

/// Whether `content` is the inside of a well-formed quoted-string (RFC 9110): qdtext and quoted
/// pairs, no bare `"`, no `\` left without its character.
fn is_quoted_content(content: &[u8]) -> bool {
    let qdtext = |b: u8| {
        b == b'\t'
            || b == b' '
            || b == 0x21
            || (0x23..=0x5B).contains(&b)
            || (0x5D..=0x7E).contains(&b)
            || b >= 0x80
    };
    let escapable = |b: u8| b == b'\t' || (0x20..=0x7E).contains(&b) || b >= 0x80;
    let mut i = 0;
    while let Some(&b) = content.get(i) {
        if b == b'\\' {
            match content.get(i + 1) {
                Some(&next) if escapable(next) => i += 2,
                _ => return false,
            }
        } else if qdtext(b) {
            i += 1;
        } else {
            return false;
        }
    }
    true
}

/// The `"` that opens the quoted string closed by the `"` at `close`: the nearest `"` to its left
/// preceded by an even number of backslashes. (A run of backslashes before a `"` always starts
/// fresh, after qdtext, a quoted pair or the opening quote, so an odd run escapes the `"` and an
/// even one does not; the first unescaped `"` leftwards is the only possible opening. The content
/// is then checked from the left by [`is_quoted_content`].)
fn opening_quote(s: &[u8], close: usize) -> Option<usize> {
    let mut p = close;
    while p > 0 {
        p -= 1;
        if s.get(p) == Some(&b'"') {
            let mut run = 0;
            while before(s, p - run) == Some(b'\\') {
                run += 1;
            }
            if run % 2 == 0 {
                return Some(p);
            }
        }
    }
    None
}

/// The `Forwarded` pair (`name=value`) ending at `end`, leftwards: its name, its value and the
/// index where it starts. `None` when it is malformed.
fn prev_pair(s: &[u8], end: usize) -> Option<(&[u8], Value<'_>, usize)> {
    let (value, value_start) = if before(s, end) == Some(b'"') {
        let close = end - 1;
        let open = opening_quote(s, close)?;
        let content = s.get(open + 1..close)?;
        if !is_quoted_content(content) {
            return None;
        }
        (Value::Quoted(content), open)
    } else {
        let mut start = end;
        while before(s, start).is_some_and(is_value_char) {
            start -= 1;
        }
        if start == end {
            return None;
        }
        (Value::Token(s.get(start..end)?), start)
    };
    if before(s, value_start) != Some(b'=') {
        return None;
    }
    let name_end = value_start - 1;
    let mut name_start = name_end;
    while before(s, name_start).is_some_and(is_tchar) {
        name_start -= 1;
    }
    if name_start == name_end {
        return None;
    }
    Some((s.get(name_start..name_end)?, value, name_start))
}

/// The `Forwarded` element ending at `end`, leftwards: its `for` address, or `Stop` when it has
/// none, has it twice, or is malformed anywhere.
fn prev_forwarded_element(line: &[u8], end: usize) -> (Hop, Option<usize>) {
    let mut i = end;
    let mut node = None;
    loop {
        i = skip_ows_left(line, i);
        if !matches!(before(line, i), None | Some(b';' | b',')) {
            let Some((name, value, start)) = prev_pair(line, i) else {
                return (Hop::Stop, None);
            };
            if name.eq_ignore_ascii_case(b"for") {
                if node.is_some() {
                    return (Hop::Stop, None);
                }
                node = Some(value.node());
            }
            i = skip_ows_left(line, start);
        }
        match before(line, i) {
            None => return (node.unwrap_or(Hop::Stop), None),
            Some(b';') => i -= 1,
            Some(b',') => return (node.unwrap_or(Hop::Stop), Some(i - 1)),
            Some(_) => return (Hop::Stop, None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{head_from, ip};
    use super::super::CidrError;
    use super::*;
    use proptest::prelude::*;
    use std::net::{Ipv4Addr, SocketAddr};

    fn xff() -> Forwarded {
        forwarded(
            ["127.0.0.1/32", "10.0.0.0/8", "::1/128"],
            ForwardedHeader::XForwardedFor,
        )
        .unwrap()
    }

    fn rfc() -> Forwarded {
        forwarded(
            ["127.0.0.1/32", "10.0.0.0/8", "::1/128"],
            ForwardedHeader::Forwarded,
        )
        .unwrap()
    }

    /// The key `forwarded` gives a request from `peer` with these field lines of its header.
    fn key(extractor: &Forwarded, peer: &str, lines: &[&str]) -> IpAddr {
        let name = extractor.header().name();
        extractor
            .extract(&head_from(Some(peer), name.as_str(), lines))
            .unwrap()
    }

    #[test]
    fn forwarded_refuses_an_ipv6_prefix_outside_1_to_128() {
        for bits in [0, 129, 255] {
            assert_eq!(
                xff().ipv6_prefix(bits).unwrap_err(),
                KeyConfigError::Ipv6Prefix { bits }
            );
        }
    }

    #[test]
    fn forwarded_keys_are_grouped_like_peer_ip() {
        let k = key(&xff(), "127.0.0.1:1", &["2001:db8:1:2:3:4:5:6"]);
        assert_eq!(k, ip("2001:db8:1:2::"));
        let k = key(
            &xff().ipv6_prefix(128).unwrap(),
            "127.0.0.1:1",
            &["2001:db8:1:2:3:4:5:6"],
        );
        assert_eq!(k, ip("2001:db8:1:2:3:4:5:6"));
        // The ungrouped address stays available for logs.
        let headers = head_from(None, "x-forwarded-for", &["2001:db8:1:2:3:4:5:6"]).headers;
        assert_eq!(
            xff().client_ip(ip("127.0.0.1"), &headers),
            ip("2001:db8:1:2:3:4:5:6")
        );
    }

    #[test]
    fn mapped_ipv4_addresses_are_keyed_and_trusted_as_ipv4() {
        // A mapped peer in a trusted IPv4 network is trusted; a mapped entry is an IPv4 key.
        assert_eq!(
            key(&xff(), "[::ffff:10.0.0.1]:1", &["::ffff:198.51.100.3"]),
            ip("198.51.100.3")
        );
        // A mapped trusted hop is passed like the IPv4 one.
        assert_eq!(
            key(&xff(), "10.0.0.1:1", &["198.51.100.3, ::ffff:10.9.9.9"]),
            ip("198.51.100.3")
        );
        // An IPv6 CIDR over the mapped range trusts those IPv4 addresses.
        let mapped = forwarded(["::ffff:10.0.0.0/104"], ForwardedHeader::XForwardedFor).unwrap();
        assert!(mapped.is_trusted(ip("10.1.2.3")));
        assert!(mapped.is_trusted(ip("::ffff:10.1.2.3")));
        assert!(!mapped.is_trusted(ip("11.1.2.3")));
        assert_eq!(
            key(&mapped, "10.0.0.1:1", &["198.51.100.3"]),
            ip("198.51.100.3")
        );
    }

    #[test]
    fn forwarded_without_a_peer_address_is_no_connect_info() {
        let head = http::Request::builder().body(()).unwrap().into_parts().0;
        assert_eq!(xff().extract(&head), Err(KeyError::NoConnectInfo));
    }

    fn cidr_error(cidr: &str) -> Option<CidrError> {
        match forwarded(["10.0.0.0/8", cidr], ForwardedHeader::XForwardedFor) {
            Ok(_) => None,
            Err(KeyConfigError::Cidr {
                cidr: named,
                reason,
            }) => {
                assert_eq!(named, cidr, "the error names the offending string");
                Some(reason)
            }
            Err(other) => panic!("{other:?}"),
        }
    }

    #[test]
    fn cidr_errors_name_the_string_and_why() {
        for cidr in [
            "",
            "localhost",
            "10.0.0.0/",
            "10.0.0.0/33",
            "::/0",
            "10.1.2.3/8",
        ] {
            assert_eq!(cidr_error(cidr), Net::parse(cidr).err(), "{cidr}");
        }
        let message = |cidr| {
            forwarded([cidr], ForwardedHeader::Forwarded)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            message("10.1.2.3/8"),
            "trusted CIDR \"10.1.2.3/8\": bits below the /8 prefix are set; write the network \
             (10.0.0.0/8) or a single host (no prefix)"
        );
        assert!(message("nope").starts_with("trusted CIDR \"nope\": the address"));
        assert!(message("::/0").contains("at least 1"));
        assert!(message("::/200").ends_with("between 1 and 128 for IPv6, got 200"));
    }

    #[test]
    fn trusted_networks_hold_exactly_their_addresses() {
        let k = forwarded(
            ["192.168.1.0/24", "2001:db8:aa::/48", "198.51.100.9"],
            ForwardedHeader::XForwardedFor,
        )
        .unwrap();
        for (addr, trusted) in [
            ("192.168.1.0", true),
            ("192.168.1.255", true),
            ("192.168.0.255", false),
            ("192.168.2.0", false),
            ("198.51.100.9", true),
            ("198.51.100.8", false),
            ("2001:db8:aa::", true),
            ("2001:db8:aa:ffff:ffff:ffff:ffff:ffff", true),
            ("2001:db8:ab::", false),
            ("::ffff:192.168.1.7", true),
            ("::192.168.1.7", false),
        ] {
            assert_eq!(k.is_trusted(ip(addr)), trusted, "{addr}");
        }
        // No trusted network: always the peer.
        let none = forwarded(Vec::<String>::new(), ForwardedHeader::XForwardedFor).unwrap();
        assert_eq!(key(&none, "10.0.0.1:1", &["198.51.100.1"]), ip("10.0.0.1"));
    }

    #[test]
    fn a_spoofed_header_from_an_untrusted_peer_is_ignored() {
        for (k, spoof) in [(xff(), "203.0.113.1"), (rfc(), "for=203.0.113.1")] {
            assert_eq!(key(&k, "198.51.100.7:1", &[spoof]), ip("198.51.100.7"));
            assert_eq!(
                key(&k, "[2001:db8::5]:1", &[spoof]),
                ip("2001:db8::"),
                "grouped"
            );
        }
    }

    #[test]
    fn a_rotated_left_part_behind_the_trusted_proxy_does_not_change_the_key() {
        let lefts = [
            "",
            "1.1.1.1",
            "2.2.2.2, 3.3.3.3",
            "unknown",
            "garbage!!",
            "\"",
            "for=\"",
            "for=\"unterminated, \\",
            "10.0.0.1",
            ";;;,,,",
        ];
        for left in lefts {
            // The proxy appended to the client's line ...
            let line = format!("{left}, 198.51.100.7, 10.0.0.2");
            assert_eq!(key(&xff(), "127.0.0.1:1", &[&line]), ip("198.51.100.7"));
            // ... or added its own line after the client's.
            assert_eq!(
                key(&xff(), "127.0.0.1:1", &[left, "198.51.100.7, 10.0.0.2"]),
                ip("198.51.100.7")
            );
            let line = format!("{left}, for=198.51.100.7, for=\"[::1]:443\"");
            assert_eq!(key(&rfc(), "127.0.0.1:1", &[&line]), ip("198.51.100.7"));
            assert_eq!(
                key(
                    &rfc(),
                    "127.0.0.1:1",
                    &[left, "for=198.51.100.7;proto=https, for=10.0.0.2"]
                ),
                ip("198.51.100.7")
            );
        }
    }

    #[test]
    fn field_lines_are_joined_in_order() {
        let k = xff();
        assert_eq!(
            key(&k, "10.0.0.1:1", &["198.51.100.1", "198.51.100.2"]),
            ip("198.51.100.2")
        );
        assert_eq!(
            key(
                &k,
                "10.0.0.1:1",
                &["198.51.100.1", "10.0.0.3, 10.0.0.4", "10.0.0.5"]
            ),
            ip("198.51.100.1")
        );
        assert_eq!(
            key(&rfc(), "10.0.0.1:1", &["for=198.51.100.1", "for=10.0.0.3"]),
            ip("198.51.100.1")
        );
        // An empty line is an empty entry: the walk stops at the nearest trusted hop.
        assert_eq!(
            key(&k, "10.0.0.1:1", &["198.51.100.1", "10.0.0.3", ""]),
            ip("10.0.0.1")
        );
        assert_eq!(
            key(&k, "10.0.0.1:1", &["198.51.100.1", "", "10.0.0.3"]),
            ip("10.0.0.3")
        );
    }

    #[test]
    fn whitespace_around_entries_is_allowed() {
        assert_eq!(
            key(&xff(), "10.0.0.1:1", &[" \t198.51.100.1 \t,\t 10.0.0.2 "]),
            ip("198.51.100.1")
        );
        assert_eq!(
            key(&xff(), "10.0.0.1:1", &["198.51.100.1,10.0.0.2"]),
            ip("198.51.100.1")
        );
        assert_eq!(
            key(
                &rfc(),
                "10.0.0.1:1",
                &[" for=198.51.100.1 ;\tproto=https\t, for=10.0.0.2 "]
            ),
            ip("198.51.100.1")
        );
        // Not around '=' (RFC 7239 has none): malformed, the walk stops at 10.0.0.2.
        assert_eq!(
            key(&rfc(), "10.0.0.1:1", &["for = 198.51.100.1, for=10.0.0.2"]),
            ip("10.0.0.2")
        );
        // Not inside an address.
        assert_eq!(
            key(&xff(), "10.0.0.1:1", &["198.51.100.1, 10.0. 0.2"]),
            ip("10.0.0.1")
        );
    }

    #[test]
    fn unusable_entries_stop_at_the_nearest_trusted_hop() {
        let k = xff();
        for stop in [
            "unknown",
            "UNKNOWN",
            "_hidden",
            "",
            "  ",
            "not-an-ip",
            "198.51.100.1:",
            "198.51.100.1:65536",
            "198.51.100.1:123456",
            "198.51.100.1:+80",
            ":80",
            "01.2.3.4",
            "1.2.3",
            "[198.51.100.1]",
            "[2001:db8::1",
            "[2001:db8::1]x",
            "[2001:db8::1]:",
            "fe80::1%eth0",
            "2001:db8::1:80:",
            "198.51.100.1 198.51.100.2",
            "é",
        ] {
            // A stop right after the peer: the peer is the key.
            assert_eq!(
                key(&k, "10.0.0.1:1", &[&format!("198.51.100.9, {stop}")]),
                ip("10.0.0.1"),
                "{stop:?}"
            );
            // After trusted hops: the last of them.
            assert_eq!(
                key(
                    &k,
                    "10.0.0.1:1",
                    &[&format!("198.51.100.9, {stop}, 10.0.0.7, 127.0.0.1")]
                ),
                ip("10.0.0.7"),
                "{stop:?}"
            );
        }
        let r = rfc();
        for stop in [
            "for=unknown",
            "for=\"unknown\"",
            "for=\"unknown:80\"",
            "for=_hidden",
            "for=\"_SEVKISEK\"",
            "for=\"[_x]\"",
            "proto=https",
            "",
            "for=198.51.100.1;for=198.51.100.2",
            "for=198.51.100.1;;FOR=198.51.100.2",
            "for=",
            "for=\"\"",
            "=198.51.100.1",
            "for=198.51.100.1 proto=http",
            "for=\"198.51.100.1",
            "for=198.51.100.1\"",
            "for=\"198.51.100.1\\\"",
            "for=\"[2001:db8::1]\":80",
            "for=<198.51.100.1>",
            "for=\"198.51.100.1\u{e9}\"",
        ] {
            assert_eq!(
                key(&r, "10.0.0.1:1", &[&format!("for=198.51.100.9, {stop}")]),
                ip("10.0.0.1"),
                "{stop:?}"
            );
            assert_eq!(
                key(
                    &r,
                    "10.0.0.1:1",
                    &[&format!("for=198.51.100.9, {stop}, for=10.0.0.7")]
                ),
                ip("10.0.0.7"),
                "{stop:?}"
            );
        }
    }

    #[test]
    fn accepted_address_forms() {
        for (entry, expect) in [
            ("198.51.100.1", "198.51.100.1"),
            ("198.51.100.1:8080", "198.51.100.1"),
            ("198.51.100.1:0", "198.51.100.1"),
            ("198.51.100.1:65535", "198.51.100.1"),
            ("198.51.100.1:_port", "198.51.100.1"),
            ("2001:db8:1:2::1", "2001:db8:1:2::"),
            ("[2001:db8:1:2::1]", "2001:db8:1:2::"),
            ("[2001:db8:1:2::1]:443", "2001:db8:1:2::"),
            ("::ffff:198.51.100.1", "198.51.100.1"),
            ("[::ffff:198.51.100.1]:1", "198.51.100.1"),
        ] {
            assert_eq!(
                key(&xff(), "10.0.0.1:1", &[entry]),
                ip(expect),
                "xff {entry}"
            );
            // In Forwarded quoted, and (leniently) as a bare token.
            let quoted = format!("for=\"{entry}\"");
            assert_eq!(
                key(&rfc(), "10.0.0.1:1", &[&quoted]),
                ip(expect),
                "{quoted}"
            );
            let bare = format!("for={entry}");
            assert_eq!(key(&rfc(), "10.0.0.1:1", &[&bare]), ip(expect), "{bare}");
        }
        for (element, expect) in [
            ("For=198.51.100.1", "198.51.100.1"),
            ("FOR=\"198.51.100.1\"", "198.51.100.1"),
            ("for=\"\\[2001:db8::1\\]\"", "2001:db8::"),
            (
                "by=10.0.0.1;for=198.51.100.1;host=example.com;proto=https",
                "198.51.100.1",
            ),
            ("for=198.51.100.1;by=\"[::1]:80\"", "198.51.100.1"),
            ("proto=\"a,b;c\";for=198.51.100.1", "198.51.100.1"),
            ("host=\"x\\\"y\";for=198.51.100.1", "198.51.100.1"),
            ("host=\"x\\\\\";for=198.51.100.1", "198.51.100.1"),
            (";for=198.51.100.1;", "198.51.100.1"),
        ] {
            assert_eq!(
                key(&rfc(), "10.0.0.1:1", &[element]),
                ip(expect),
                "{element}"
            );
        }
    }

    #[test]
    fn an_all_trusted_chain_is_keyed_on_its_leftmost_hop() {
        assert_eq!(
            key(&xff(), "127.0.0.1:1", &["10.0.0.3, 10.0.0.2, 127.0.0.1"]),
            ip("10.0.0.3")
        );
        assert_eq!(
            key(&rfc(), "127.0.0.1:1", &["for=10.0.0.3, for=\"[::1]\""]),
            ip("10.0.0.3")
        );
        // No header at all: the trusted peer itself.
        assert_eq!(key(&xff(), "127.0.0.1:1", &[]), ip("127.0.0.1"));
        assert_eq!(key(&rfc(), "[::1]:1", &[]), ip("::"));
    }

    #[test]
    fn only_the_configured_header_is_read() {
        let mut head = head_from(Some("10.0.0.1:1"), "forwarded", &["for=198.51.100.1"]);
        assert_eq!(xff().extract(&head), Ok(ip("10.0.0.1")));
        head.headers
            .append("x-forwarded-for", HeaderValue::from_static("198.51.100.2"));
        assert_eq!(xff().extract(&head), Ok(ip("198.51.100.2")));
        assert_eq!(rfc().extract(&head), Ok(ip("198.51.100.1")));
        head.headers.remove("forwarded");
        assert_eq!(rfc().extract(&head), Ok(ip("10.0.0.1")));
    }

    // ---- property tests -------------------------------------------------------------------------

    /// The trusted networks of the property tests, and an independent membership test.
    const TRUSTED: [(&str, u8); 4] = [
        ("10.0.0.0", 8),
        ("192.168.1.0", 24),
        ("2001:db8:aaaa::", 48),
        ("::1", 128),
    ];

    fn model_trusted(addr: IpAddr) -> bool {
        let bits = |a: IpAddr| -> (u128, u32) {
            match a.to_canonical() {
                IpAddr::V4(v4) => (u128::from(u32::from(v4)), 32),
                IpAddr::V6(v6) => (u128::from(v6), 128),
            }
        };
        let (a, width) = bits(addr);
        TRUSTED.iter().any(|&(net, prefix)| {
            let (n, nwidth) = bits(net.parse().unwrap());
            let shift = nwidth - u32::from(prefix);
            nwidth == width && (a >> shift) == (n >> shift)
        })
    }

    fn extractor(header: ForwardedHeader) -> Forwarded {
        let cidrs: Vec<String> = TRUSTED.iter().map(|(n, p)| format!("{n}/{p}")).collect();
        forwarded(&cidrs, header).unwrap()
    }

    /// Addresses of every kind: in and out of the trusted networks, both families, mapped.
    fn any_addr() -> impl Strategy<Value = IpAddr> {
        prop_oneof![
            any::<u32>().prop_map(|n| IpAddr::V4(Ipv4Addr::from(n))),
            (0u32..1 << 24).prop_map(|n| IpAddr::V4(Ipv4Addr::from(0x0a00_0000 | n))),
            (0u32..256).prop_map(|n| IpAddr::V4(Ipv4Addr::from(0xc0a8_0100 | n))),
            any::<u128>().prop_map(|n| IpAddr::V6(Ipv6Addr::from(n))),
            any::<u128>().prop_map(|n| IpAddr::V6(Ipv6Addr::from(
                (0x2001_0db8_aaaa_u128 << 80) | (n >> 48)
            ))),
            Just(ip("::1")),
            (0u32..1 << 24)
                .prop_map(|n| IpAddr::V6(Ipv4Addr::from(0x0a00_0000 | n).to_ipv6_mapped())),
            any::<u32>().prop_map(|n| IpAddr::V6(Ipv4Addr::from(n).to_ipv6_mapped())),
        ]
    }

    /// One entry of a forwarding list, as a proxy would write it.
    #[derive(Debug, Clone)]
    enum Entry {
        /// An address, in one of the written forms (`form` picks it), with `port`.
        Addr {
            addr: IpAddr,
            form: u8,
            port: u16,
        },
        Unknown,
        Obfuscated(String),
        Garbage(String),
        Empty,
    }

    fn any_entry() -> impl Strategy<Value = Entry> {
        prop_oneof![
            6 => (any_addr(), any::<u8>(), any::<u16>())
                .prop_map(|(addr, form, port)| Entry::Addr { addr, form, port }),
            1 => Just(Entry::Unknown),
            1 => "[a-zA-Z0-9._-]{1,8}".prop_map(Entry::Obfuscated),
            1 => "[a-z0-9.:!]{0,8}".prop_map(|s| Entry::Garbage(format!("!{s}"))),
            1 => Just(Entry::Empty),
        ]
    }

    impl Entry {
        /// Whether the walk must stop here.
        fn addr(&self) -> Option<IpAddr> {
            match self {
                Entry::Addr { addr, .. } => Some(*addr),
                _ => None,
            }
        }

        /// The address as text: bare, with a port, or bracketed (IPv6).
        fn node(&self) -> String {
            match self {
                Entry::Addr { addr, form, port } => match (addr, form % 3) {
                    (IpAddr::V4(v4), 0) => v4.to_string(),
                    (IpAddr::V4(v4), _) => format!("{v4}:{port}"),
                    (IpAddr::V6(v6), 0) => v6.to_string(),
                    (IpAddr::V6(v6), 1) => format!("[{v6}]"),
                    (IpAddr::V6(v6), _) => format!("[{v6}]:{port}"),
                },
                Entry::Unknown => "unknown".to_owned(),
                Entry::Obfuscated(s) => format!("_{s}"),
                Entry::Garbage(s) => s.clone(),
                Entry::Empty => String::new(),
            }
        }

        fn render(&self, header: ForwardedHeader, style: u8) -> String {
            let pad = [" ", "", "\t", "  "][usize::from(style % 4)];
            match header {
                ForwardedHeader::XForwardedFor => format!("{pad}{}{pad}", self.node()),
                _ => {
                    if let Entry::Empty = self {
                        return pad.to_owned();
                    }
                    let node = self.node();
                    let value = if style & 4 != 0 || node.contains([':', '[']) && style & 8 != 0 {
                        format!("\"{}\"", node.replace('\\', "\\\\").replace('"', "\\\""))
                    } else {
                        node
                    };
                    let name = ["for", "For", "FOR"][usize::from(style / 16 % 3)];
                    match style / 64 {
                        0 => format!("{pad}{name}={value}{pad}"),
                        1 => format!("{pad}proto=https;{name}={value}"),
                        2 => format!("{name}={value};by=\"[::1]:80\";host=\"a,b\"{pad}"),
                        _ => format!("{pad};{name}={value};{pad}"),
                    }
                }
            }
        }
    }

    /// The field lines of a list: `breaks[i]` starts a new line before entry `i`.
    fn render_lines(
        entries: &[(Entry, u8)],
        breaks: &[bool],
        header: ForwardedHeader,
    ) -> Vec<String> {
        let mut lines = vec![String::new()];
        for (i, (entry, style)) in entries.iter().enumerate() {
            let line = lines.last_mut().unwrap();
            if i > 0 {
                if breaks.get(i).copied().unwrap_or(false) {
                    lines.push(String::new());
                } else {
                    line.push(',');
                }
            }
            lines
                .last_mut()
                .unwrap()
                .push_str(&entry.render(header, *style));
        }
        lines
    }

    /// The rules, on the list as written: the key the walk must find.
    fn model_key(peer: IpAddr, entries: &[(Entry, u8)]) -> IpAddr {
        let peer = peer.to_canonical();
        if !model_trusted(peer) {
            return peer;
        }
        let mut nearest = peer;
        for (entry, _) in entries.iter().rev() {
            match entry.addr() {
                Some(a) if model_trusted(a) => nearest = a.to_canonical(),
                Some(a) => return a.to_canonical(),
                None => return nearest,
            }
        }
        nearest
    }

    fn headers_of(header: ForwardedHeader, lines: &[impl AsRef<[u8]>]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for line in lines {
            // Only bytes a header value may hold: no controls but tab, no DEL.
            let clean: Vec<u8> = line
                .as_ref()
                .iter()
                .copied()
                .filter(|&b| b == b'\t' || (b >= 0x20 && b != 0x7f))
                .collect();
            map.append(header.name(), HeaderValue::from_bytes(&clean).unwrap());
        }
        map
    }

    fn any_header() -> impl Strategy<Value = ForwardedHeader> {
        prop_oneof![
            Just(ForwardedHeader::XForwardedFor),
            Just(ForwardedHeader::Forwarded)
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        /// Lists as proxies write them: the key is exactly the rules' key, and it is the peer,
        /// a trusted hop, or an address whose right-hand entries and peer are all trusted.
        #[test]
        fn the_key_follows_the_rules(
            header in any_header(),
            peer in any_addr(),
            entries in proptest::collection::vec((any_entry(), any::<u8>()), 0..8),
            breaks in proptest::collection::vec(any::<bool>(), 8),
            bits in 1u8..=128,
        ) {
            let k = extractor(header).ipv6_prefix(bits).unwrap();
            let headers = headers_of(header, &render_lines(&entries, &breaks, header));
            let got = k.client_ip(peer, &headers);
            prop_assert_eq!(got, model_key(peer, &entries));
            // The property itself, spelled out.
            let peer_c = peer.to_canonical();
            let trusted_hop = entries.iter().any(|(e, _)| {
                e.addr().is_some_and(|a| a.to_canonical() == got && model_trusted(a))
            });
            let behind_trusted = model_trusted(peer_c) && entries.iter().enumerate().any(|(i, (e, _))| {
                e.addr().is_some_and(|a| a.to_canonical() == got)
                    && entries[i + 1..].iter().all(|(r, _)| r.addr().is_some_and(model_trusted))
            });
            prop_assert!(got == peer_c || trusted_hop || behind_trusted);
            // extract() is the same address, grouped.
            let mut head = http::Request::builder().body(()).unwrap().into_parts().0;
            head.headers = headers;
            head.extensions.insert(SocketAddr::new(peer, 1));
            prop_assert_eq!(k.extract(&head), Ok(Ipv6Prefix::new(bits).unwrap().group(got)));
        }

        /// Whatever a client writes to the left of the first untrusted entry changes nothing.
        #[test]
        fn the_client_written_part_never_matters(
            header in any_header(),
            left in proptest::collection::vec(any::<u8>(), 0..40),
            client in any_addr().prop_map(|a| if model_trusted(a) { ip("198.51.100.1") } else { a }),
            hops in proptest::collection::vec((0u32..1 << 24, any::<u8>()), 0..4),
            style in any::<u8>(),
        ) {
            let k = extractor(header);
            let mut entries = vec![(Entry::Addr { addr: client, form: style, port: 80 }, style)];
            entries.extend(hops.iter().map(|&(n, s)| {
                (Entry::Addr { addr: IpAddr::V4(Ipv4Addr::from(0x0a00_0000 | n)), form: s, port: 1 }, s)
            }));
            let right = render_lines(&entries, &[], header).remove(0);
            let mut joined = left.clone();
            joined.extend_from_slice(b",");
            joined.extend_from_slice(right.as_bytes());
            let peer = ip("10.0.0.1");
            let want = client.to_canonical();
            prop_assert_eq!(k.client_ip(peer, &headers_of(header, &[joined])), want);
            prop_assert_eq!(k.client_ip(peer, &headers_of(header, &[left.clone(), right.into_bytes()])), want);
        }

        /// Arbitrary bytes in several field lines never panic, and the key is the peer, a
        /// trusted address, or (from a trusted peer) an address written in the header.
        #[test]
        fn arbitrary_bytes_never_panic(
            header in any_header(),
            lines in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..60), 0..4),
            peer in any_addr(),
        ) {
            let k = extractor(header);
            let headers = headers_of(header, &lines);
            let got = k.client_ip(peer, &headers);
            let peer = peer.to_canonical();
            prop_assert!(got == peer || model_trusted(got) || model_trusted(peer));
        }

        /// Every valid CIDR string is accepted, and trusts exactly its network.
        #[test]
        fn cidrs_round_trip(addr in any_addr(), prefix in 1u8..=128, probe in any_addr()) {
            let (width, bits) = match addr {
                IpAddr::V4(v4) => (32u8, u128::from(u32::from(v4)) << 96),
                IpAddr::V6(v6) => (128u8, u128::from(v6)),
            };
            let prefix = prefix.min(width);
            let network_bits = bits & (u128::MAX << (128 - u32::from(prefix)));
            let network = match addr {
                IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::from((network_bits >> 96) as u32)),
                IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::from(network_bits)),
            };
            let cidr = format!("{network}/{prefix}");
            let k = forwarded([&cidr], ForwardedHeader::XForwardedFor).unwrap();
            prop_assert!(k.is_trusted(network));
            let host = format!("{addr}/{prefix}");
            let parsed = forwarded([&host], ForwardedHeader::XForwardedFor);
            if addr == network {
                prop_assert!(parsed.is_ok());
            } else {
                prop_assert_eq!(
                    parsed.unwrap_err(),
                    KeyConfigError::Cidr { cidr: host, reason: CidrError::HostBits { network, prefix } }
                );
            }
            // Membership, by prefix comparison on the canonical probe.
            let expected = match (network, probe.to_canonical()) {
                (IpAddr::V4(n), IpAddr::V4(p)) => {
                    let shift = 32 - u32::from(prefix);
                    u32::from(n).checked_shr(shift).unwrap_or(0) == u32::from(p).checked_shr(shift).unwrap_or(0)
                }
                (IpAddr::V6(n), p) => {
                    let p = match p { IpAddr::V4(v4) => v4.to_ipv6_mapped(), IpAddr::V6(v6) => v6 };
                    let shift = 128 - u32::from(prefix);
                    u128::from(n).checked_shr(shift).unwrap_or(0) == u128::from(p).checked_shr(shift).unwrap_or(0)
                }
                (IpAddr::V4(_), IpAddr::V6(_)) => false,
            };
            prop_assert_eq!(k.is_trusted(probe), expected);
        }
    }
}
