//! The HTTP middleware (feature `tower`): a tower layer for axum, hyper and tonic servers, and
//! where each request's key comes from ([`key`]).

pub mod key;

pub use key::{
    extension, forwarded, from_fn, global, header, peer_addr, peer_ip, CidrError, ExtensionKey,
    FnKey, Forwarded, ForwardedHeader, Global, HeaderKey, KeyConfigError, KeyError, KeyExtractor,
    PeerIp, DEFAULT_IPV6_PREFIX, MAX_HEADER_KEY_LEN,
};
