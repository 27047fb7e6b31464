//! What a keyed limiter reports (features `metrics` and `tracing`): its optional name
//! ([`KeyedLimiter::with_name`]), the handles registered under it, and the hooks the decision,
//! the bound on keys, the overflow and the sweeps call. Without either feature none of this is
//! built, and the hooks are not called.

use std::hash::Hash;

#[cfg(feature = "metrics")]
use ::metrics::{Counter, Gauge};

#[cfg(feature = "metrics")]
use super::KeyedError;
use super::{Algorithm, KeyedLimiter};
use crate::clock::Clock;
#[cfg(feature = "metrics")]
use crate::metrics::{self as m, Decisions};
use crate::sync::Ordering;

/// A named keyed limiter's name and handles, boxed behind one pointer so that an unnamed limiter
/// carries one null word.
#[derive(Debug)]
pub(super) struct Observed {
    pub(super) name: String,
    #[cfg(feature = "metrics")]
    decisions: Decisions,
    #[cfg(feature = "metrics")]
    keys: Gauge,
    #[cfg(feature = "metrics")]
    evictions: Counter,
    #[cfg(feature = "metrics")]
    overflow: Counter,
    #[cfg(feature = "metrics")]
    too_many_keys: Counter,
}

impl<K: Hash + Eq + Clone, A: Algorithm, C: Clock> KeyedLimiter<K, A, C> {
    /// Names the limiter: with the `metrics` feature it reports under `limiter="<name>"` (its
    /// decisions, keys, evictions and overflow: see [`crate::metrics`]), registering its handles
    /// with the recorder installed now; with `tracing`, its events carry the name. Naming again
    /// registers again (under the new name), the key gauge starting at the keys held.
    ///
    /// An unnamed keyed limiter reports no metrics; its events (with `tracing`) carry an empty
    /// name.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::KeyedLimiter;
    /// use tollgate::Quota;
    /// let per_ip: KeyedLimiter<std::net::IpAddr> =
    ///     KeyedLimiter::new(Quota::per_second(10)?).with_max_keys(100_000).with_name("per-ip");
    /// assert_eq!(per_ip.name(), Some("per-ip"));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    #[must_use]
    #[cfg_attr(docsrs, doc(cfg(any(feature = "metrics", feature = "tracing"))))]
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        let name = name.into();
        #[cfg(feature = "metrics")]
        let observed = {
            let keys = m::gauge(m::KEYED_KEYS, "limiter", &name);
            // Relaxed: a snapshot for the gauge's start; the limiter is not shared yet (`self` is
            // owned), so nothing moves the count meanwhile.
            keys.set(self.keys.load(Ordering::Relaxed) as f64);
            Observed {
                decisions: Decisions::register(&name),
                keys,
                evictions: m::counter(m::KEYED_EVICTIONS, "limiter", &name),
                overflow: m::counter(m::KEYED_OVERFLOW, "limiter", &name),
                too_many_keys: m::counter(m::KEYED_TOO_MANY_KEYS, "limiter", &name),
                name,
            }
        };
        #[cfg(not(feature = "metrics"))]
        let observed = Observed { name };
        self.observed = Some(Box::new(observed));
        self
    }

    /// The name given by [`with_name`](Self::with_name), if any.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::KeyedLimiter;
    /// let limiter: KeyedLimiter<u32> = KeyedLimiter::new(tollgate::Quota::per_second(1)?);
    /// assert_eq!(limiter.name(), None);
    /// assert_eq!(limiter.with_name("users").name(), Some("users"));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    #[cfg_attr(docsrs, doc(cfg(any(feature = "metrics", feature = "tracing"))))]
    pub fn name(&self) -> Option<&str> {
        self.observed.as_deref().map(|o| o.name.as_str())
    }
}

impl<K, A: Algorithm, C> KeyedLimiter<K, A, C> {
    /// The name for events: empty when unnamed.
    #[cfg(feature = "tracing")]
    pub(super) fn event_name(&self) -> &str {
        self.observed.as_deref().map_or("", |o| o.name.as_str())
    }

    /// Counts a decision's answer (`TooManyKeys` is counted where it is made, in `overflow_take`).
    #[cfg(feature = "metrics")]
    #[inline(always)]
    pub(super) fn observe_decision<T>(&self, answer: &Result<T, KeyedError>) {
        if let Some(o) = &self.observed {
            match answer {
                Ok(_) => o.decisions.admitted(),
                Err(KeyedError::Denied(_)) => o.decisions.denied(),
                Err(KeyedError::InsufficientCapacity(_)) => o.decisions.insufficient(),
                Err(_) => {}
            }
        }
    }

    /// `added` keys more are held (a place reserved).
    #[cfg(feature = "metrics")]
    #[inline]
    pub(super) fn observe_added(&self) {
        if let Some(o) = &self.observed {
            o.keys.increment(1.0);
        }
    }

    /// `removed` keys fewer are held (places given back).
    #[cfg(feature = "metrics")]
    #[inline]
    pub(super) fn observe_released(&self, removed: usize) {
        if let Some(o) = &self.observed {
            o.keys.decrement(removed as f64);
        }
    }

    /// A sweep (or `retain_recent`) removed `removed` keys in `took`.
    #[cfg(any(feature = "metrics", feature = "tracing"))]
    pub(super) fn observe_sweep(&self, removed: usize, _took: Option<std::time::Duration>) {
        #[cfg(feature = "metrics")]
        if let Some(o) = &self.observed {
            o.evictions
                .increment(u64::try_from(removed).unwrap_or(u64::MAX));
        }
        #[cfg(feature = "tracing")]
        tracing::debug!(
            limiter = self.event_name(),
            removed,
            // Relaxed: a snapshot for the event, as `len` is.
            keys = self.keys.load(Ordering::Relaxed),
            micros = _took.map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX)),
            "tollgate: keyed limiter swept its idle keys"
        );
    }

    /// A newcomer found no room: the `nth` since the limiter was built (1 for the first).
    #[cfg(any(feature = "metrics", feature = "tracing"))]
    pub(super) fn observe_overflow(&self, _nth: u64, refused: bool) {
        #[cfg(feature = "metrics")]
        if let Some(o) = &self.observed {
            o.overflow.increment(1);
            if refused {
                o.too_many_keys.increment(1);
            }
        }
        // The 1st, 2nd, 4th, 8th, ...: a flood of newcomers logs a line per doubling, not one per
        // request.
        #[cfg(feature = "tracing")]
        if _nth.is_power_of_two() {
            tracing::warn!(
                limiter = self.event_name(),
                max_keys = self.max_keys,
                overflowed = _nth,
                policy = if refused { "refuse" } else { "shared" },
                "tollgate: keyed limiter full of active keys; new keys get the overflow policy"
            );
        }
    }
}
