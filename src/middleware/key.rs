//! Interim copy of the key extractor interface; replaced by the keys branch at merge.
use std::fmt;
use std::hash::Hash;
use std::sync::Arc;

/// Where a request's key comes from.
pub trait KeyExtractor: Send + Sync + 'static {
    /// The key.
    type Key: Clone + Hash + Eq + fmt::Debug + Send + Sync + 'static;
    /// The key of a request, from its head.
    ///
    /// # Errors
    ///
    /// [`KeyError`].
    fn extract(&self, head: &http::request::Parts) -> Result<Self::Key, KeyError>;
}

impl<X: KeyExtractor + ?Sized> KeyExtractor for Arc<X> {
    type Key = X::Key;
    fn extract(&self, head: &http::request::Parts) -> Result<Self::Key, KeyError> {
        (**self).extract(head)
    }
}

/// Why there is no key.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyError {
    /// No key.
    Missing,
    /// No peer address.
    NoConnectInfo,
}

/// One key for all.
#[derive(Debug, Clone, Copy, Default)]
pub struct Global;

/// One key for all.
pub fn global() -> Global {
    Global
}

impl KeyExtractor for Global {
    type Key = ();
    fn extract(&self, _: &http::request::Parts) -> Result<(), KeyError> {
        Ok(())
    }
}

/// Interim.
#[derive(Debug, Clone, Copy, Default)]
pub struct PeerIp;
/// Interim.
pub fn peer_ip() -> PeerIp {
    PeerIp
}
impl KeyExtractor for PeerIp {
    type Key = std::net::IpAddr;
    fn extract(&self, head: &http::request::Parts) -> Result<Self::Key, KeyError> {
        #[cfg(feature = "axum")]
        if let Some(c) = head
            .extensions
            .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        {
            return Ok(c.0.ip());
        }
        head.extensions
            .get::<std::net::SocketAddr>()
            .map(|a| a.ip())
            .ok_or(KeyError::NoConnectInfo)
    }
}

/// Interim.
#[derive(Debug, Clone)]
pub struct HeaderKey(http::HeaderName);
/// Interim.
pub fn header(name: http::HeaderName) -> HeaderKey {
    HeaderKey(name)
}
impl KeyExtractor for HeaderKey {
    type Key = http::HeaderValue;
    fn extract(&self, head: &http::request::Parts) -> Result<Self::Key, KeyError> {
        head.headers.get(&self.0).cloned().ok_or(KeyError::Missing)
    }
}

/// Interim.
#[derive(Debug, Clone)]
pub struct FnKey<F>(F);
/// Interim.
pub fn from_fn<F>(f: F) -> FnKey<F> {
    FnKey(f)
}
impl<F, K> KeyExtractor for FnKey<F>
where
    F: Fn(&http::request::Parts) -> Option<K> + Send + Sync + 'static,
    K: Clone + Hash + Eq + fmt::Debug + Send + Sync + 'static,
{
    type Key = K;
    fn extract(&self, head: &http::request::Parts) -> Result<K, KeyError> {
        (self.0)(head).ok_or(KeyError::Missing)
    }
}
