//! HTTP middleware for tower servers (axum, hyper, tonic): [`LimitLayer`] (feature `tower`).
//!
//! Interim module docs; the full text lands with the rest of the middleware.

mod backend;
mod fields;
pub mod key;
mod layer;
mod service;

pub use backend::{Backend, Decision, Global, Keyed, Refusal};
#[cfg(feature = "redis")]
pub use backend::{KeyBytes, Redis};
pub use fields::{PolicyNameError, MAX_POLICY_NAME};
pub use key::{global, header, peer_ip, KeyError, KeyExtractor};
pub use layer::{
    EmptyBody, Headers, InfoDecision, LayerError, LimitLayer, LimitLayerBuilder, OnDenied,
    OnMissing, RateLimitInfo, Rejection, RejectionKind,
};
pub use service::{Limit, ResponseFuture};

/// Interim: `next_after` until the outcomes carry their own.
pub(crate) trait NextAfterShim {
    fn next_after(&self) -> Option<std::time::Duration>;
}
impl NextAfterShim for crate::Admitted {
    fn next_after(&self) -> Option<std::time::Duration> {
        Some(self.reset_after()).filter(|d| !d.is_zero())
    }
}
impl NextAfterShim for crate::Denied {
    fn next_after(&self) -> Option<std::time::Duration> {
        Some(self.reset_after()).filter(|d| !d.is_zero())
    }
}
