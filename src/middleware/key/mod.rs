//! Where a request's rate-limit key comes from: the [`KeyExtractor`] trait and the extractors the
//! layer ships with.
//!
//! | extractor | key | missing when |
//! | --- | --- | --- |
//! | [`peer_ip()`] | the peer's [`IpAddr`], IPv6 grouped by prefix (`/64`) | never: no peer address at all is [`KeyError::NoConnectInfo`], a setup error |
//! | [`forwarded()`] | the client's [`IpAddr`] behind trusted proxies (`X-Forwarded-For` or `Forwarded`) | never: as `peer_ip()` |
//! | [`header()`] | the first value of a header, as [`HeaderValue`] | absent, empty, or over [`MAX_HEADER_KEY_LEN`] bytes |
//! | [`extension()`] | a `T` from the request's extensions (set by an earlier layer, e.g. authentication) | no `T` there |
//! | [`from_fn()`] | whatever the function returns | it returns `None` |
//! | [`global()`] | `()`: one limit for everyone | never |
//!
//! An extractor sees only the request's head ([`http::request::Parts`]), never its body. A missing
//! key ([`KeyError::Missing`]) gets the layer's `OnMissing` policy; a missing peer address
//! ([`KeyError::NoConnectInfo`]) means the server was not set up to record it, and the layer
//! answers 500.
//!
//! # The peer address
//!
//! [`peer_addr`] looks in the request's extensions, in this order, for
//!
//! 1. a [`SocketAddr`], which a plain hyper server inserts itself (`req.extensions_mut().insert(peer)`
//!    in its `service_fn`);
//! 2. axum's `ConnectInfo<SocketAddr>` (feature `axum`), there when the app is served with
//!    `into_make_service_with_connect_info::<SocketAddr>()`;
//! 3. tonic's `TcpConnectInfo` (feature `tonic`), which tonic's server inserts on TCP connections.
//!
//! [`SocketAddr`]: std::net::SocketAddr
//!
//! An IPv4-mapped IPv6 peer (`::ffff:192.0.2.1`, what a dual-stack socket reports for an IPv4
//! client) is keyed as the IPv4 address. Any other IPv6 address is grouped by its first 64 bits
//! ([`DEFAULT_IPV6_PREFIX`], one key per subnet): one host is usually handed a whole /64, so
//! keying single addresses would give it 2^64 keys. [`PeerIp::ipv6_prefix`] and
//! [`Forwarded::ipv6_prefix`] change it (`128` keys single addresses).
//!
//! # Behind proxies: which address is the client
//!
//! Behind a load balancer every request arrives from the balancer's address, so [`peer_ip()`]
//! would put every client under one key. The proxy says who its client was in a header that each
//! proxy on the way appends to: `X-Forwarded-For: client, proxy1, proxy2` (each proxy appends the
//! address it received the request from) or RFC 7239's `Forwarded: for=client, for=proxy1`.
//!
//! **The leftmost entry is not the client; it is whatever the client wrote.** A client may send
//! its own `X-Forwarded-For: 203.0.113.7` and the first proxy appends the real address after it:
//! `203.0.113.7, 198.51.100.20`. Keying on the leftmost entry (as tower-governor's
//! `SmartIpKeyExtractor` does) lets any client pick a fresh key for every request, so it is never
//! limited at all, or pick a victim's address to exhaust the victim's limit. Only what the
//! proxies themselves appended can be believed, and only proxies you know are yours.
//!
//! So [`forwarded()`] takes the networks of your proxies, and reads:
//!
//! 1. If the peer is not one of them, the header is ignored (anyone can send it) and the key is the
//!    peer.
//! 2. Otherwise all of the configured header's field lines are taken in order, as one list, and
//!    walked from the right: each trusted address is a proxy of yours, who says who sent the
//!    request to it; the first address that is not trusted is the client, and its key.
//! 3. An entry that is not an address (malformed, `unknown`, or an obfuscated RFC 7239 identifier
//!    such as `for=_hidden`), or the end of the list, stops the walk: the key is then the nearest
//!    trusted hop (the last trusted address seen, starting with the peer). Requests keyed this way
//!    share that proxy's key, which is a key no client chose.
//!
//! Only the configured header is read: a server behind proxies that append `X-Forwarded-For`
//! ignores any `Forwarded` a client sends, and the other way round. Entries to the left of the
//! first untrusted one are never looked at, so a client cannot change its key by changing what it
//! writes there. If every entry is trusted (a request from inside your own network), the walk
//! ends at the leftmost entry, which is trusted, and that is the key.
//!
//! What is accepted as an address, in both headers: `192.0.2.1`, `192.0.2.1:8080`, `2001:db8::1`,
//! `[2001:db8::1]` and `[2001:db8::1]:8080` (a port, or an RFC 7239 obfuscated port `_abc`, is
//! ignored); anything else is not an address, and neither is an empty entry (`a,,b`, a trailing
//! comma, an empty field line), which stops the walk too. In `Forwarded`, only the `for` parameter is read
//! (its name in any case), its value a token or a quoted string; a bracketed or ported value is
//! accepted unquoted too, since some proxies send it so. Whitespace is allowed around `,` and `;`
//! but not around `=`. An element without `for`, an empty element, or one with `for` twice stops
//! the walk. A quoted string must end within its field line.

// The files, bottom to top; each uses only what is below it:
//
// - this one: the `KeyExtractor` trait, the errors, and the extractors that need no address
//   (`header`, `extension`, `from_fn`, `global`);
// - `trusted`: the trusted proxies' networks, parsed from CIDR strings, and the prefix masks;
// - `peer`: the connection's address (`peer_addr`, `peer_ip`) and the IPv6 grouping of keys;
// - `forwarded`: the client behind trusted proxies, read from `X-Forwarded-For` or `Forwarded`.
mod forwarded;
mod peer;
mod trusted;

pub use forwarded::{forwarded, Forwarded, ForwardedHeader};
pub use peer::{peer_addr, peer_ip, PeerIp, DEFAULT_IPV6_PREFIX};

use std::fmt;
use std::hash::Hash;
use std::marker::PhantomData;
use std::net::IpAddr;
// Not the crate's `sync` shim: nothing here is atomic, and `Arc<X>` below is the std type users
// hold.
use std::sync::Arc;

use http::request::Parts;
use http::{HeaderName, HeaderValue};

/// Where a request's key comes from. Called with the request's head (the layer splits the request
/// into parts and puts it back together), so extractors never see the body.
///
/// The module's functions build the common ones; implement it for anything else.
///
/// # Examples
///
/// A key per client address and route:
///
/// ```
/// use std::net::{IpAddr, SocketAddr};
/// use tollgate::middleware::{peer_ip, KeyError, KeyExtractor, PeerIp};
///
/// struct IpAndPath(PeerIp);
///
/// impl KeyExtractor for IpAndPath {
///     type Key = (IpAddr, String);
///     fn extract(&self, head: &http::request::Parts) -> Result<Self::Key, KeyError> {
///         Ok((self.0.extract(head)?, head.uri.path().to_owned()))
///     }
/// }
///
/// let peer: SocketAddr = "192.0.2.1:40000".parse()?;
/// let head = http::Request::builder().uri("/login").extension(peer).body(())?.into_parts().0;
/// let key = IpAndPath(peer_ip()).extract(&head)?;
/// assert_eq!(key, ("192.0.2.1".parse::<IpAddr>()?, "/login".to_owned()));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait KeyExtractor: Send + Sync + 'static {
    /// The key a limit is kept for.
    type Key: Clone + Hash + Eq + fmt::Debug + Send + Sync + 'static;

    /// The key of the request whose head this is.
    ///
    /// # Errors
    ///
    /// [`KeyError::Missing`] when the request has none, [`KeyError::NoConnectInfo`] when an
    /// address-based extractor finds no peer address.
    fn extract(&self, head: &Parts) -> Result<Self::Key, KeyError>;
}

/// An extractor shared behind an `Arc` extracts as the extractor itself.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use tollgate::middleware::{global, KeyExtractor};
///
/// let shared = Arc::new(global());
/// let head = http::Request::builder().body(())?.into_parts().0;
/// assert_eq!(shared.extract(&head), Ok(()));
/// # Ok::<(), http::Error>(())
/// ```
impl<X: KeyExtractor + ?Sized> KeyExtractor for Arc<X> {
    type Key = X::Key;

    fn extract(&self, head: &Parts) -> Result<Self::Key, KeyError> {
        (**self).extract(head)
    }
}

/// A boxed extractor (`Box<dyn KeyExtractor<Key = K>>`) extracts as the extractor itself.
///
/// # Examples
///
/// ```
/// use tollgate::middleware::{global, KeyExtractor};
///
/// let boxed: Box<dyn KeyExtractor<Key = ()>> = Box::new(global());
/// let head = http::Request::builder().body(())?.into_parts().0;
/// assert_eq!(boxed.extract(&head), Ok(()));
/// # Ok::<(), http::Error>(())
/// ```
impl<X: KeyExtractor + ?Sized> KeyExtractor for Box<X> {
    type Key = X::Key;

    fn extract(&self, head: &Parts) -> Result<Self::Key, KeyError> {
        (**self).extract(head)
    }
}

/// A `'static` reference to an extractor (one in a `static`, or leaked) extracts as the
/// extractor itself.
///
/// # Examples
///
/// ```
/// use tollgate::middleware::key::{GlobalKey, KeyExtractor};
///
/// static EVERYONE: GlobalKey = GlobalKey;
/// let head = http::Request::builder().body(())?.into_parts().0;
/// assert_eq!((&EVERYONE).extract(&head), Ok(()));
/// # Ok::<(), http::Error>(())
/// ```
impl<X: KeyExtractor + ?Sized> KeyExtractor for &'static X {
    type Key = X::Key;

    fn extract(&self, head: &Parts) -> Result<Self::Key, KeyError> {
        (**self).extract(head)
    }
}

/// Why a request has no key.
///
/// # Examples
///
/// ```
/// use tollgate::middleware::{header, peer_ip, KeyError, KeyExtractor};
///
/// let head = http::Request::builder().body(())?.into_parts().0;
/// assert_eq!(header(http::HeaderName::from_static("x-api-key")).extract(&head), Err(KeyError::Missing));
/// // No connection info: the server was not set up to record the peer.
/// assert_eq!(peer_ip().extract(&head), Err(KeyError::NoConnectInfo));
/// # Ok::<(), http::Error>(())
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyError {
    /// The request has no key (no such header, an over-long value, ...): the layer applies its
    /// `OnMissing`.
    Missing,
    /// A peer-address extractor found no peer address in the extensions: a setup error (the layer
    /// answers 500 naming `into_make_service_with_connect_info::<SocketAddr>()`).
    NoConnectInfo,
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyError::Missing => f.write_str("the request has no rate-limit key"),
            KeyError::NoConnectInfo => f.write_str(
                "no peer address in the request's extensions: serve an axum app with \
                 `into_make_service_with_connect_info::<SocketAddr>()`, or insert the \
                 connection's `SocketAddr` into each request (hyper)",
            ),
        }
    }
}

impl std::error::Error for KeyError {}

/// A key extractor's configuration that cannot be used: the field, what was given, and what is
/// accepted.
///
/// # Examples
///
/// ```
/// use tollgate::middleware::{forwarded, peer_ip, CidrError, ForwardedHeader, KeyConfigError};
///
/// assert_eq!(peer_ip().ipv6_prefix(0).unwrap_err(), KeyConfigError::Ipv6Prefix { bits: 0 });
/// let err = forwarded(["10.0.0.0/8", "10.0.0.1/33"], ForwardedHeader::XForwardedFor).unwrap_err();
/// assert!(matches!(err, KeyConfigError::Cidr { ref cidr, reason: CidrError::PrefixTooLong { .. } } if cidr == "10.0.0.1/33"));
/// assert_eq!(
///     err.to_string(),
///     "trusted CIDR \"10.0.0.1/33\": the prefix length must be between 1 and 32 for IPv4, got 33"
/// );
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyConfigError {
    /// `ipv6_prefix` was outside `1..=128`.
    Ipv6Prefix {
        /// The prefix length asked for.
        bits: u8,
    },
    /// One of the trusted CIDRs given to [`forwarded()`] cannot be used.
    Cidr {
        /// The string as given.
        cidr: String,
        /// What is wrong with it.
        reason: CidrError,
    },
}

/// What is wrong with a trusted CIDR ([`KeyConfigError::Cidr`]).
///
/// A CIDR is an address, optionally `/` and a prefix length in decimal: `10.0.0.0/8`,
/// `2001:db8::/32`; an address alone is that one host (`/32` or `/128`). Surrounding whitespace
/// is ignored.
///
/// # Examples
///
/// ```
/// use tollgate::middleware::{forwarded, CidrError, ForwardedHeader, KeyConfigError};
///
/// let reason = |cidr: &str| match forwarded([cidr], ForwardedHeader::Forwarded) {
///     Err(KeyConfigError::Cidr { reason, .. }) => Some(reason),
///     _ => None,
/// };
/// assert_eq!(reason("10.0.0.0/8"), None);
/// assert_eq!(reason("10.0.0.0/x"), Some(CidrError::Prefix));
/// assert_eq!(reason("localhost"), Some(CidrError::Address));
/// assert_eq!(reason("0.0.0.0/0"), Some(CidrError::ZeroPrefix));
/// assert!(matches!(reason("10.1.2.3/8"), Some(CidrError::HostBits { .. })));
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CidrError {
    /// The part before `/` is not an IPv4 or IPv6 address.
    Address,
    /// The part after `/` is not a decimal number of at most three digits.
    Prefix,
    /// The prefix length exceeds the address's bits.
    PrefixTooLong {
        /// The prefix length given.
        prefix: u8,
        /// 32 for IPv4, 128 for IPv6.
        max: u8,
    },
    /// A `/0` would trust every address, so every client could write its own key.
    ZeroPrefix,
    /// Bits below the prefix are set (`10.1.2.3/8`). Refused rather than masked: such a string is
    /// usually a single host written with the wrong prefix, and masking it would silently trust a
    /// whole network.
    HostBits {
        /// The network the prefix describes (`10.0.0.0` for `10.1.2.3/8`).
        network: IpAddr,
        /// The prefix length given.
        prefix: u8,
    },
}

impl fmt::Display for KeyConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyConfigError::Ipv6Prefix { bits } => {
                write!(f, "ipv6_prefix must be between 1 and 128 bits, got {bits}")
            }
            KeyConfigError::Cidr { cidr, reason } => {
                write!(f, "trusted CIDR {cidr:?}: ")?;
                match reason {
                    CidrError::Address => f.write_str(
                        "the address (before any '/') must be an IPv4 or IPv6 address, \
                         such as 10.0.0.0 or 2001:db8::",
                    ),
                    CidrError::Prefix => f.write_str(
                        "the prefix length (after '/') must be a decimal number of bits, \
                         such as 8 in 10.0.0.0/8",
                    ),
                    CidrError::PrefixTooLong { prefix, max } => {
                        let family = if *max == 32 { "IPv4" } else { "IPv6" };
                        write!(
                            f,
                            "the prefix length must be between 1 and {max} for {family}, got {prefix}"
                        )
                    }
                    CidrError::ZeroPrefix => f.write_str(
                        "the prefix length must be at least 1: a /0 trusts every address, so \
                         any client could choose its own key",
                    ),
                    CidrError::HostBits { network, prefix } => write!(
                        f,
                        "bits below the /{prefix} prefix are set; write the network \
                         ({network}/{prefix}) or a single host (no prefix)"
                    ),
                }
            }
        }
    }
}

impl std::error::Error for KeyConfigError {}

/// The largest header value [`header()`] uses as a key, in bytes; a longer one counts as missing
/// (so that a client cannot make the limiter hold large keys).
///
/// # Examples
///
/// ```
/// use tollgate::middleware::{header, KeyError, KeyExtractor, MAX_HEADER_KEY_LEN};
///
/// let long = "k".repeat(MAX_HEADER_KEY_LEN + 1);
/// let head = http::Request::builder().header("x-api-key", long).body(())?.into_parts().0;
/// let key = header(http::HeaderName::from_static("x-api-key"));
/// assert_eq!(key.extract(&head), Err(KeyError::Missing));
/// # Ok::<(), http::Error>(())
/// ```
pub const MAX_HEADER_KEY_LEN: usize = 256;

/// Keys each request by one header's value ([`header()`]).
///
/// # Examples
///
/// ```
/// use tollgate::middleware::{header, HeaderKey};
///
/// let key: HeaderKey = header(http::HeaderName::from_static("x-api-key"));
/// assert_eq!(key.name(), "x-api-key");
/// ```
#[derive(Debug, Clone)]
pub struct HeaderKey {
    name: HeaderName,
}

/// Keys each request by the first value of the header `name` (an API key, a tenant id). An
/// absent or empty header, or a value over [`MAX_HEADER_KEY_LEN`] (256) bytes, is
/// [`KeyError::Missing`].
///
/// The key is a copy of the value (one small allocation), not a view into the request's buffer:
/// a limiter that keeps it would otherwise keep the whole received header block alive.
///
/// A client chooses its headers: use this for keys you check elsewhere (an authenticated API
/// key), or count on the keyed limiter's bound on the keys it holds.
///
/// # Examples
///
/// ```
/// use tollgate::middleware::{header, KeyError, KeyExtractor};
///
/// let key = header(http::HeaderName::from_static("x-api-key"));
/// let head = http::Request::builder()
///     .header("x-api-key", "alpha")
///     .header("x-api-key", "beta")
///     .body(())?
///     .into_parts()
///     .0;
/// assert_eq!(key.extract(&head), Ok(http::HeaderValue::from_static("alpha")));
/// let none = http::Request::builder().body(())?.into_parts().0;
/// assert_eq!(key.extract(&none), Err(KeyError::Missing));
/// # Ok::<(), http::Error>(())
/// ```
pub fn header(name: HeaderName) -> HeaderKey {
    HeaderKey { name }
}

impl HeaderKey {
    /// The header read.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::middleware::header;
    ///
    /// assert_eq!(header(http::header::AUTHORIZATION).name(), http::header::AUTHORIZATION);
    /// ```
    pub fn name(&self) -> &HeaderName {
        &self.name
    }
}

impl KeyExtractor for HeaderKey {
    type Key = HeaderValue;

    fn extract(&self, head: &Parts) -> Result<HeaderValue, KeyError> {
        let value = head.headers.get(&self.name).ok_or(KeyError::Missing)?;
        if value.is_empty() || value.len() > MAX_HEADER_KEY_LEN {
            return Err(KeyError::Missing);
        }
        // A copy: the received value shares the buffer of the whole header block.
        HeaderValue::from_bytes(value.as_bytes()).map_err(|_| KeyError::Missing)
    }
}

/// Keys each request by a `T` from its extensions ([`extension()`]).
///
/// # Examples
///
/// ```
/// use tollgate::middleware::{extension, ExtensionKey};
///
/// let key: ExtensionKey<u64> = extension::<u64>();
/// assert_eq!(format!("{key:?}"), "ExtensionKey<u64>");
/// ```
pub struct ExtensionKey<T> {
    // `fn() -> T`: the extractor holds no `T`, so it is Send, Sync and Clone whatever `T` is.
    _key: PhantomData<fn() -> T>,
}

/// Keys each request by a clone of the `T` in its extensions, put there by an earlier layer (a
/// user or tenant id from authentication). None there is [`KeyError::Missing`].
///
/// # Examples
///
/// ```
/// use tollgate::middleware::{extension, KeyError, KeyExtractor};
///
/// #[derive(Debug, Clone, PartialEq, Eq, Hash)]
/// struct UserId(u64);
///
/// let key = extension::<UserId>();
/// let head = http::Request::builder().extension(UserId(7)).body(())?.into_parts().0;
/// assert_eq!(key.extract(&head), Ok(UserId(7)));
/// let anonymous = http::Request::builder().body(())?.into_parts().0;
/// assert_eq!(key.extract(&anonymous), Err(KeyError::Missing));
/// # Ok::<(), http::Error>(())
/// ```
pub fn extension<T>() -> ExtensionKey<T>
where
    T: Clone + Hash + Eq + fmt::Debug + Send + Sync + 'static,
{
    ExtensionKey { _key: PhantomData }
}

impl<T> fmt::Debug for ExtensionKey<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ExtensionKey<{}>", std::any::type_name::<T>())
    }
}

impl<T> Clone for ExtensionKey<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for ExtensionKey<T> {}

impl<T> KeyExtractor for ExtensionKey<T>
where
    T: Clone + Hash + Eq + fmt::Debug + Send + Sync + 'static,
{
    type Key = T;

    fn extract(&self, head: &Parts) -> Result<T, KeyError> {
        head.extensions.get::<T>().cloned().ok_or(KeyError::Missing)
    }
}

/// Keys each request by what a function returns ([`from_fn()`]).
///
/// # Examples
///
/// ```
/// use tollgate::middleware::from_fn;
///
/// let key = from_fn(|head: &http::request::Parts| Some(head.method.clone()));
/// assert_eq!(format!("{key:?}"), "FnKey { .. }");
/// ```
#[derive(Clone)]
pub struct FnKey<F> {
    f: F,
}

/// Keys each request by what `f` returns for its head; `None` is [`KeyError::Missing`].
///
/// # Examples
///
/// A key per client address and route template (with axum, `MatchedPath` would be the
/// template):
///
/// ```
/// use std::net::SocketAddr;
/// use tollgate::middleware::{from_fn, peer_addr, KeyError, KeyExtractor};
///
/// let key = from_fn(|head| Some((peer_addr(head)?.ip(), head.uri.path().to_owned())));
/// let peer: SocketAddr = "192.0.2.1:40000".parse()?;
/// let head = http::Request::builder().uri("/a").extension(peer).body(())?.into_parts().0;
/// assert_eq!(key.extract(&head)?, (peer.ip(), "/a".to_owned()));
/// let no_peer = http::Request::builder().body(())?.into_parts().0;
/// assert_eq!(key.extract(&no_peer), Err(KeyError::Missing));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn from_fn<F, K>(f: F) -> FnKey<F>
where
    F: Fn(&Parts) -> Option<K> + Send + Sync + 'static,
    K: Clone + Hash + Eq + fmt::Debug + Send + Sync + 'static,
{
    FnKey { f }
}

impl<F> fmt::Debug for FnKey<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FnKey").finish_non_exhaustive()
    }
}

impl<F, K> KeyExtractor for FnKey<F>
where
    F: Fn(&Parts) -> Option<K> + Send + Sync + 'static,
    K: Clone + Hash + Eq + fmt::Debug + Send + Sync + 'static,
{
    type Key = K;

    fn extract(&self, head: &Parts) -> Result<K, KeyError> {
        (self.f)(head).ok_or(KeyError::Missing)
    }
}

/// One key, `()`, for every request: one limit for everyone ([`global()`]).
///
/// # Examples
///
/// ```
/// use tollgate::middleware::key::{GlobalKey, KeyExtractor};
///
/// let head = http::Request::builder().body(())?.into_parts().0;
/// assert_eq!(GlobalKey.extract(&head), Ok(()));
/// # Ok::<(), http::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GlobalKey;

// kept for the public path
#[doc(hidden)]
pub use self::GlobalKey as Global;

/// One key, `()`, for every request, never missing: one limit shared by everyone (a direct
/// limiter's single key).
///
/// # Examples
///
/// ```
/// use tollgate::middleware::{global, KeyExtractor};
///
/// let head = http::Request::builder().uri("/anything").body(())?.into_parts().0;
/// assert_eq!(global().extract(&head), Ok(()));
/// # Ok::<(), http::Error>(())
/// ```
pub fn global() -> GlobalKey {
    GlobalKey
}

impl KeyExtractor for GlobalKey {
    type Key = ();

    fn extract(&self, _head: &Parts) -> Result<(), KeyError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    /// An address, from its text.
    pub(super) fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// A request head from `peer` (none: no connection info) with these field lines of `name`.
    pub(super) fn head_from(peer: Option<&str>, name: &str, lines: &[&str]) -> Parts {
        let mut builder = http::Request::builder();
        for line in lines {
            builder = builder.header(name, HeaderValue::from_bytes(line.as_bytes()).unwrap());
        }
        if let Some(peer) = peer {
            builder = builder.extension(peer.parse::<SocketAddr>().unwrap());
        }
        builder.body(()).unwrap().into_parts().0
    }

    #[test]
    fn header_keys_are_the_first_value_up_to_256_bytes() {
        let k = header(HeaderName::from_static("x-api-key"));
        let with = |values: &[&[u8]]| {
            let mut head = head_from(None, "x", &[]);
            for v in values {
                head.headers
                    .append("x-api-key", HeaderValue::from_bytes(v).unwrap());
            }
            k.extract(&head)
        };
        assert_eq!(with(&[]), Err(KeyError::Missing));
        assert_eq!(with(&[b""]), Err(KeyError::Missing));
        assert_eq!(with(&[b"a", b"b"]), Ok(HeaderValue::from_static("a")));
        assert_eq!(
            with(&[b"\xff\x80"]),
            Ok(HeaderValue::from_bytes(b"\xff\x80").unwrap())
        );
        let max = vec![b'k'; MAX_HEADER_KEY_LEN];
        assert_eq!(with(&[&max]), Ok(HeaderValue::from_bytes(&max).unwrap()));
        let over = vec![b'k'; MAX_HEADER_KEY_LEN + 1];
        assert_eq!(with(&[&over]), Err(KeyError::Missing));
        // Only the first value counts, even when a later one would fit.
        assert_eq!(with(&[&over, b"short"]), Err(KeyError::Missing));
    }

    #[test]
    fn extension_fn_and_global_keys() {
        let mut head = head_from(None, "x", &[]);
        assert_eq!(extension::<u32>().extract(&head), Err(KeyError::Missing));
        head.extensions.insert(7u32);
        assert_eq!(extension::<u32>().extract(&head), Ok(7));
        let f = from_fn(|head: &Parts| head.extensions.get::<u32>().map(|n| n * 2));
        assert_eq!(f.extract(&head), Ok(14));
        head.extensions.clear();
        assert_eq!(f.extract(&head), Err(KeyError::Missing));
        assert_eq!(global().extract(&head), Ok(()));
        let shared: Arc<dyn KeyExtractor<Key = ()>> = Arc::new(global());
        assert_eq!(shared.extract(&head), Ok(()));
    }

    #[test]
    fn key_errors_say_what_to_do() {
        assert!(KeyError::NoConnectInfo
            .to_string()
            .contains("into_make_service_with_connect_info::<SocketAddr>()"));
        assert_eq!(
            KeyError::Missing.to_string(),
            "the request has no rate-limit key"
        );
    }
}
