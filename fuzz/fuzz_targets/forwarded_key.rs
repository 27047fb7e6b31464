//! The middleware's `forwarded()` key (`tollgate::middleware::key`): arbitrary trusted networks
//! (and an arbitrary extra CIDR string), an arbitrary peer, either header kind, and field lines
//! made of an arbitrary client-written part (raw bytes, on lines of their own or glued to the
//! proxies' first line) followed by entries as proxies write them (addresses in every accepted
//! form, `unknown`, obfuscated identifiers, garbage, empty entries, extra `Forwarded` parameters,
//! any case and whitespace), split over several field lines.
//!
//! Checks: never a panic; a valid CIDR string is accepted and a refused one is named in the
//! error; the key is always the peer, a trusted address, or (from a trusted peer) an address that
//! is written in the header; when the walk stops inside the proxies' part (an untrusted address
//! or an unusable entry there), the key is exactly the rules' (the first untrusted address from
//! the right, or the nearest trusted hop before an unusable entry), whatever the client wrote;
//! and `extract` is `client_ip` grouped by the IPv6 prefix.

#![no_main]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use tollgate::middleware::{forwarded, ForwardedHeader, KeyConfigError, KeyExtractor};

/// An address: anywhere, or inside one of the trusted networks (so that walks get past hops).
#[derive(Debug, Clone, Copy, Arbitrary)]
enum Addr {
    V4(u32),
    V6(u128),
    /// An IPv4-mapped IPv6 address.
    Mapped(u32),
    /// Inside trusted network `index` (modulo their number), host bits from the value.
    Trusted(u8, u128),
}

/// A trusted network: a base address and a prefix length, masked before formatting.
#[derive(Debug, Clone, Copy, Arbitrary)]
struct Cidr {
    v6: bool,
    base: u128,
    prefix: u8,
}

/// A network as bits: the address left-aligned in 128 bits, its width and prefix length.
#[derive(Debug, Clone, Copy)]
struct Net {
    bits: u128,
    width: u8,
    prefix: u8,
}

impl Cidr {
    fn net(self) -> Net {
        let width = if self.v6 { 128 } else { 32 };
        let prefix = self.prefix % width + 1;
        let mask = u128::MAX << (128 - u32::from(prefix));
        let base = if self.v6 { self.base } else { self.base << 96 };
        Net {
            bits: base & mask,
            width,
            prefix,
        }
    }
}

impl Net {
    fn addr(self) -> IpAddr {
        if self.width == 32 {
            IpAddr::V4(Ipv4Addr::from((self.bits >> 96) as u32))
        } else {
            IpAddr::V6(Ipv6Addr::from(self.bits))
        }
    }

    fn text(self) -> String {
        format!("{}/{}", self.addr(), self.prefix)
    }

    /// Membership by comparing the top `prefix` bits; an IPv4 address is also in an IPv6
    /// network when its mapped form is.
    fn contains(self, ip: IpAddr) -> bool {
        let (bits, width) = match ip.to_canonical() {
            IpAddr::V4(v4) if self.width == 32 => (u128::from(u32::from(v4)) << 96, 32),
            IpAddr::V4(v4) => (u128::from(v4.to_ipv6_mapped()), 128),
            IpAddr::V6(v6) => (u128::from(v6), 128),
        };
        let shift = 128 - u32::from(self.prefix);
        width == self.width && bits >> shift == self.bits >> shift
    }

    /// An address inside this network, its host bits from `host`.
    fn host(self, host: u128) -> IpAddr {
        let mask = u128::MAX << (128 - u32::from(self.prefix));
        let bits = self.bits | (host & !mask);
        if self.width == 32 {
            IpAddr::V4(Ipv4Addr::from((bits >> 96) as u32))
        } else {
            IpAddr::V6(Ipv6Addr::from(bits))
        }
    }
}

/// One entry as a proxy writes it.
#[derive(Debug, Clone, Arbitrary)]
enum Entry {
    /// An address in a written form picked by `form`, with `port`.
    Addr {
        addr: Addr,
        form: u8,
        port: u16,
    },
    Unknown,
    /// `_` and this identifier (letters, digits, `.`, `_`, `-` only are kept).
    Obfuscated(String),
    /// `!` and these bytes (letters, digits, `.`, `:` only are kept): never an address.
    Garbage(Vec<u8>),
    Empty,
}

#[derive(Debug, Arbitrary)]
struct Input {
    rfc7239: bool,
    peer: Addr,
    cidrs: Vec<Cidr>,
    /// A further CIDR string, anything at all.
    extra_cidr: Option<String>,
    /// What the client wrote: raw bytes, one field line each.
    client: Vec<Vec<u8>>,
    /// Whether the client's last line and the proxies' first line are one line.
    glue: bool,
    /// The proxies' entries, left to right, each with a rendering style.
    entries: Vec<(Entry, u8)>,
    /// Bit `i` starts a new field line before proxy entry `i`.
    breaks: u16,
    ipv6_prefix: u8,
}

/// Resolves an address of the input against the trusted networks.
fn resolve(addr: Addr, nets: &[Net]) -> IpAddr {
    match addr {
        Addr::V4(n) => IpAddr::V4(Ipv4Addr::from(n)),
        Addr::V6(n) => IpAddr::V6(Ipv6Addr::from(n)),
        Addr::Mapped(n) => IpAddr::V6(Ipv4Addr::from(n).to_ipv6_mapped()),
        Addr::Trusted(i, host) => match nets.get(usize::from(i) % nets.len().max(1)) {
            Some(net) => net.host(host),
            None => IpAddr::V4(Ipv4Addr::from(host as u32)),
        },
    }
}

/// The entry's address, if it is one.
fn entry_addr(entry: &Entry, nets: &[Net]) -> Option<IpAddr> {
    match *entry {
        Entry::Addr { addr, .. } => Some(resolve(addr, nets)),
        _ => None,
    }
}

/// The entry's node text: an address bare, with a port, or bracketed.
fn node(entry: &Entry, nets: &[Net]) -> String {
    match entry {
        Entry::Addr { addr, form, port } => match (resolve(*addr, nets), form % 3) {
            (IpAddr::V4(v4), 0) => v4.to_string(),
            (IpAddr::V4(v4), _) => format!("{v4}:{port}"),
            (IpAddr::V6(v6), 0) => v6.to_string(),
            (IpAddr::V6(v6), 1) => format!("[{v6}]"),
            (IpAddr::V6(v6), _) => format!("[{v6}]:{port}"),
        },
        Entry::Unknown => "unknown".to_owned(),
        Entry::Obfuscated(s) => {
            let kept: String = s
                .chars()
                .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
                .take(16)
                .collect();
            format!("_{kept}x")
        }
        Entry::Garbage(bytes) => {
            let kept: String = bytes
                .iter()
                .map(|&b| b as char)
                .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | ':'))
                .take(16)
                .collect();
            format!("!{kept}")
        }
        Entry::Empty => String::new(),
    }
}

/// The entry as written in the header, in one of several styles (whitespace, quoting, case,
/// other parameters).
fn render(entry: &Entry, style: u8, rfc7239: bool, nets: &[Net]) -> String {
    let pad = [" ", "", "\t", "  "][usize::from(style % 4)];
    let node = node(entry, nets);
    if !rfc7239 {
        return format!("{pad}{node}{pad}");
    }
    if let Entry::Empty = entry {
        return pad.to_owned();
    }
    let value = if style & 4 != 0 || (node.contains([':', '[']) && style & 8 != 0) {
        format!("\"{}\"", node.replace('\\', "\\\\").replace('"', "\\\""))
    } else {
        node
    };
    let name = ["for", "For", "FOR"][usize::from(style / 16 % 3)];
    match style / 64 {
        0 => format!("{pad}{name}={value}{pad}"),
        1 => format!("{pad}proto=https;{name}={value}"),
        2 => format!("{name}={value};by=\"[::1]:80\";host=\"a,b;c\"{pad}"),
        _ => format!("{pad};{name}={value};{pad}"),
    }
}

/// Only the bytes a header value may hold (no controls but tab, no DEL).
fn clean(bytes: &[u8]) -> Vec<u8> {
    bytes
        .iter()
        .copied()
        .filter(|&b| b == b'\t' || (b >= 0x20 && b != 0x7f))
        .collect()
}

/// Every address the text could spell: each run of hex digits, `.` and `:` (backslashes
/// removed), parsed whole and without a `:port` after an IPv4 address.
fn spelled(lines: &[Vec<u8>]) -> Vec<IpAddr> {
    let mut found = Vec::new();
    for line in lines {
        let text: Vec<u8> = line.iter().copied().filter(|&b| b != b'\\').collect();
        for run in text.split(|b| !(b.is_ascii_hexdigit() || *b == b'.' || *b == b':')) {
            let Ok(run) = std::str::from_utf8(run) else {
                continue;
            };
            let mut candidates = vec![run];
            if let Some((host, _)) = run.rsplit_once(':') {
                candidates.push(host);
            }
            for c in candidates {
                if let Ok(ip) = c.parse::<IpAddr>() {
                    found.push(ip.to_canonical());
                }
            }
        }
    }
    found
}

fuzz_target!(|input: Input| {
    let nets: Vec<Net> = input.cidrs.iter().take(4).map(|c| c.net()).collect();
    let mut cidrs: Vec<String> = nets.iter().map(|n| n.text()).collect();
    let header = if input.rfc7239 {
        ForwardedHeader::Forwarded
    } else {
        ForwardedHeader::XForwardedFor
    };
    // A valid CIDR is always accepted; with an arbitrary one added, a refusal names it.
    let valid = forwarded(&cidrs, header).expect("valid CIDRs are accepted");
    let mut extractor = valid.clone();
    if let Some(extra) = &input.extra_cidr {
        cidrs.push(extra.clone());
        match forwarded(&cidrs, header) {
            Err(KeyConfigError::Cidr { cidr, .. }) => assert_eq!(&cidr, extra),
            Err(other) => panic!("unexpected error {other:?}"),
            // Accepted: it is a network (which the model does not know), so keep the valid set.
            Ok(_) => {}
        }
    }
    let bits = input.ipv6_prefix;
    match extractor.clone().ipv6_prefix(bits) {
        Ok(with) => {
            assert!((1..=128).contains(&bits));
            extractor = with;
        }
        Err(err) => {
            assert!(!(1..=128).contains(&bits));
            assert_eq!(err, KeyConfigError::Ipv6Prefix { bits });
        }
    }
    let trusted = |ip: IpAddr| nets.iter().any(|n| n.contains(ip));
    let peer = resolve(input.peer, &nets);
    assert_eq!(extractor.is_trusted(peer), trusted(peer), "{peer}");

    // The field lines: the client's, then the proxies'.
    let entries: Vec<(Entry, u8)> = input.entries.into_iter().take(12).collect();
    let mut proxy_lines = vec![String::new()];
    for (i, (entry, style)) in entries.iter().enumerate() {
        if i > 0 {
            if input.breaks & (1 << i.min(15)) != 0 {
                proxy_lines.push(String::new());
            } else if let Some(line) = proxy_lines.last_mut() {
                line.push(',');
            }
        }
        if let Some(line) = proxy_lines.last_mut() {
            line.push_str(&render(entry, *style, input.rfc7239, &nets));
        }
    }
    let mut lines: Vec<Vec<u8>> = input.client.iter().take(4).map(|l| clean(l)).collect();
    let client_lines = lines.len();
    let mut proxy_lines = proxy_lines.into_iter().map(String::into_bytes);
    if entries.is_empty() {
        // No proxy entries: the header is only what the client wrote.
    } else if let (true, Some(last)) = (input.glue, lines.last_mut()) {
        last.push(b',');
        last.extend(proxy_lines.next().unwrap_or_default());
    }
    if !entries.is_empty() {
        lines.extend(proxy_lines);
    }
    let mut headers = http::HeaderMap::new();
    for line in &lines {
        let value = http::HeaderValue::from_bytes(line).expect("cleaned bytes are a valid value");
        headers.append(header.name(), value);
    }

    let got = extractor.client_ip(peer, &headers);
    let peer = peer.to_canonical();

    // The property: the peer, a trusted address, or (from a trusted peer) one written there.
    assert!(
        got == peer || trusted(got) || (trusted(peer) && spelled(&lines).contains(&got)),
        "key {got} from peer {peer}"
    );

    // The rules, on the proxies' part: exact wherever the walk stops inside it.
    if !trusted(peer) {
        assert_eq!(got, peer);
    } else {
        let mut nearest = peer;
        let mut decided = None;
        for (entry, _) in entries.iter().rev() {
            match entry_addr(entry, &nets) {
                Some(a) if trusted(a) => nearest = a.to_canonical(),
                Some(a) => {
                    decided = Some(a.to_canonical());
                    break;
                }
                None => {
                    decided = Some(nearest);
                    break;
                }
            }
        }
        match decided {
            Some(want) => assert_eq!(got, want, "the walk stops inside the proxies' part"),
            // Every proxy entry trusted: the walk went on into the client's part, whose first
            // entry from the right (if any) decides; at least it is never to the right of the
            // nearest trusted hop.
            None if client_lines == 0 => assert_eq!(got, nearest),
            None => {}
        }
    }

    // extract() is the same address, grouped.
    let mut head = http::Request::builder()
        .body(())
        .expect("an empty request")
        .into_parts()
        .0;
    head.headers = headers;
    head.extensions.insert(SocketAddr::new(peer, 1));
    let key = extractor.extract(&head).expect("a peer is there");
    let grouped = match got {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => {
            let keep = if (1..=128).contains(&bits) { bits } else { 64 };
            IpAddr::V6(Ipv6Addr::from(
                u128::from(v6) & (u128::MAX << (128 - u32::from(keep))),
            ))
        }
    };
    assert_eq!(key, grouped);
});
