//! The queue's state word, a `Copy` newtype with its state table, and the pure decisions taken on
//! it and on the release grid. No atomics here: `shared.rs` applies them.

use crate::cas::Step;
use crate::clock::Nanos;

/// The queue's state word: closed flag, consumer-parked flag, room-waiter count, accepted count.
///
/// # State table
///
/// | bits | field | who sets it | who clears it |
/// | --- | --- | --- | --- |
/// | 0 | `CLOSED` | `close` (once; never cleared) | nobody |
/// | 1 | `PARKED` | the consumer, under its mutex, just before it waits | the consumer, after it wakes or decides not to wait |
/// | 2..32 | room waiters | a sender in `send_timeout`, under the room mutex, before it waits | the same sender, after |
/// | 32..64 | `len`: accepted, not yet released | a sender's reservation (`+1`, only while not closed and `len < C`) | the consumer's release of an item (`-1`) |
///
/// Legal states: `len <= C <= 2^24` always. After `CLOSED` is set, `len` only decreases. The queue
/// is finished (nothing more will ever be received) exactly when `CLOSED` is set and `len == 0`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) struct State(pub(super) u64);

impl State {
    pub(super) const CLOSED: u64 = 1;
    pub(super) const PARKED: u64 = 1 << 1;
    pub(super) const WAITER_ONE: u64 = 1 << 2;
    const WAITER_MASK: u64 = ((1 << 30) - 1) << 2;
    const LEN_SHIFT: u32 = 32;
    pub(super) const LEN_ONE: u64 = 1 << State::LEN_SHIFT;

    pub(super) fn closed(self) -> bool {
        self.0 & State::CLOSED != 0
    }

    pub(super) fn parked(self) -> bool {
        self.0 & State::PARKED != 0
    }

    pub(super) fn waiters(self) -> u64 {
        (self.0 & State::WAITER_MASK) >> 2
    }

    pub(super) fn len(self) -> u64 {
        self.0 >> State::LEN_SHIFT
    }

    /// Nothing more will ever be received.
    pub(super) fn finished(self) -> bool {
        self.closed() && self.len() == 0
    }
}

/// The grid's slot after one at `release`: one interval later, clamped to [`Nanos::MAX_USABLE`].
///
/// Release times live in the same clamped domain as readings. Every reading is clamped to 2^62 ns,
/// so a release time beyond it would never come: an item queued behind one sent at the end of time
/// would be held for ever. Clamped, the grid stops at 2^62 and every item there falls due at the
/// latest reading. Both the senders' estimate and the consumer's schedule step through here.
pub(super) fn next_slot(release: u64, interval: u64) -> u64 {
    release
        .saturating_add(interval)
        .min(Nanos::MAX_USABLE.as_u64())
}

/// Why a reservation failed.
pub(super) enum ReserveRefusal {
    Full,
    Closed,
}

/// The reservation decision: one more accepted item, if the queue is open and has room. Pure.
pub(super) fn reserve(word: u64, capacity: u64) -> Step<u64, ReserveRefusal> {
    let s = State(word);
    if s.closed() {
        Step::Refuse(ReserveRefusal::Closed)
    } else if s.len() >= capacity {
        Step::Refuse(ReserveRefusal::Full)
    } else {
        // Cannot carry out of the word: len < capacity <= 2^24.
        Step::Write(word + State::LEN_ONE, s.len())
    }
}

#[cfg(test)]
mod tests {
    use super::{next_slot, reserve, ReserveRefusal, State};
    use crate::cas::Step;
    use crate::clock::Nanos;

    const MAX: u64 = Nanos::MAX_USABLE.as_u64();

    #[test]
    fn the_next_slot_is_one_interval_later_and_never_past_the_latest_reading() {
        assert_eq!(next_slot(5, 10), 15);
        assert_eq!(next_slot(MAX - 10, 10), MAX);
        assert_eq!(next_slot(MAX - 9, 10), MAX);
        assert_eq!(next_slot(MAX, 1), MAX);
        assert_eq!(next_slot(MAX, u64::MAX), MAX);
    }

    #[test]
    fn a_reservation_counts_one_more_item_and_answers_the_position() {
        let word = (State::LEN_ONE * 2) | State::PARKED | State::WAITER_ONE;
        match reserve(word, 3) {
            Step::Write(after, position) => {
                assert_eq!(position, 2);
                let after = State(after);
                assert_eq!(after.len(), 3);
                assert!(after.parked() && !after.closed());
                assert_eq!(after.waiters(), 1);
            }
            _ => panic!("room for a third item was refused"),
        }
    }

    #[test]
    fn a_reservation_is_refused_when_closed_before_when_full() {
        let full = State::LEN_ONE * 3;
        assert!(matches!(
            reserve(full, 3),
            Step::Refuse(ReserveRefusal::Full)
        ));
        assert!(matches!(
            reserve(full | State::CLOSED, 3),
            Step::Refuse(ReserveRefusal::Closed)
        ));
        assert!(matches!(
            reserve(State::CLOSED, 3),
            Step::Refuse(ReserveRefusal::Closed)
        ));
        assert!(State(State::CLOSED).finished());
        assert!(!State(State::CLOSED | State::LEN_ONE).finished());
    }
}
