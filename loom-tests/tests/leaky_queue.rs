//! Loom models of the leaky queue's protocol ([`tollgate::leaky::queue`]): the state word that
//! orders a close against a send's reservation, the consumer's parking handshake with senders, and
//! the room waiters' handshake with the consumer.
//!
//! Under `cfg(tollgate_loom)` the queue's storage is a loom mutex around a `VecDeque` (loom cannot model
//! crossbeam's `ArrayQueue`), so these models check the queue's own protocol and take the storage's
//! FIFO linearizability as given. Every blocking wait is a loom condition variable: a lost wake-up
//! shows up as a loom deadlock.
//!
//! Senders use explicit readings at [`T0`]; the consumer's clock reads [`Nanos::MAX_USABLE`], so
//! every release time has passed and the blocking `recv` only ever waits for items, never for time.
//! Each model returns a summary of how the race went, and `check_reaches` asserts that loom ran
//! every outcome the race allows (see `common/mod.rs`).
//!
//! Run with
//! `RUSTFLAGS="--cfg tollgate_loom" LOOM_MAX_PREEMPTIONS=2 CARGO_TARGET_DIR=target/loom cargo test -p loom-tests --release --test leaky_queue`.

// Without `--cfg tollgate_loom` this file compiles to an empty test binary (the doc above stays, for
// `missing_docs`).
#![cfg(tollgate_loom)]

mod common;

use std::time::Duration;

use common::check_reaches;
use loom::thread;
use tollgate::leaky::{self, LeakyReceiver, LeakySender, SendTimeoutError, TrySendError};
use tollgate::{Clock, ManualClock, Nanos, Quota};

/// The senders' reading.
const T0: Nanos = Nanos::ZERO;

/// A queue of `capacity` at one item per second whose consumer's clock reads the end of time.
fn queue(
    capacity: u64,
) -> (
    LeakySender<char, ManualClock>,
    LeakyReceiver<char, ManualClock>,
) {
    let quota = Quota::per_second(1)
        .and_then(|q| q.with_capacity(capacity))
        .expect("a valid quota");
    leaky::queue_with_clock(quota, ManualClock::starting_at(Nanos::MAX_USABLE))
        .expect("a valid queue")
}

/// What became of an item offered with `try_send`: delivered or handed back, never both or neither.
fn fate(
    sent: Result<tollgate::leaky::Ticket, TrySendError<char>>,
    item: char,
    received: &[char],
) -> &'static str {
    let delivered = received.iter().filter(|&&c| c == item).count();
    match sent {
        Ok(_) => {
            assert_eq!(
                delivered, 1,
                "{item} was accepted, so it is received exactly once"
            );
            "delivered"
        }
        Err(TrySendError::Closed(back)) => {
            assert_eq!(back, item, "the refused item itself is handed back");
            assert_eq!(
                delivered, 0,
                "{item} was handed back, so it is never received"
            );
            "handed back"
        }
        Err(TrySendError::Full(_)) => panic!("a queue of capacity 2 cannot fill with 2 items"),
        Err(other) => panic!("a refusal the model does not know: {other}"),
    }
}

#[test]
fn a_close_racing_two_senders_delivers_or_hands_back_every_item_exactly_once() {
    check_reaches(
        &[("delivered", "delivered"), ("handed back", "delivered")],
        || {
            let (tx, mut rx) = queue(2);
            let first = {
                let tx = tx.clone();
                thread::spawn(move || tx.try_send_at('a', T0))
            };
            // The second producer sends, then closes: its own item is always accepted first, and
            // the close races the first producer's send.
            let second = thread::spawn(move || {
                let sent = tx.try_send_at('b', T0);
                tx.close();
                sent
            });
            let mut received = Vec::new();
            while let Some(item) = rx.recv() {
                received.push(item);
            }
            let a = fate(
                first.join().expect("first producer panicked"),
                'a',
                &received,
            );
            let b = fate(
                second.join().expect("second producer panicked"),
                'b',
                &received,
            );
            assert_eq!(received.len(), usize::from(a == "delivered") + 1);
            (a, b)
        },
    );
}

#[test]
fn drain_now_racing_a_send_returns_the_item_or_the_sender_gets_it_back() {
    check_reaches(&["delivered", "handed back"], || {
        let (tx, mut rx) = queue(2);
        let producer = thread::spawn(move || tx.try_send_at('a', T0));
        let drained = rx.drain_now();
        let sent = producer.join().expect("producer panicked");
        let outcome = fate(sent, 'a', &drained);
        assert!(rx.recv().is_none(), "after drain_now the queue is finished");
        outcome
    });
}

/// A clock whose every reading is 2^40 ns (about 18 minutes, a thousand intervals) after the
/// previous one: `send_timeout` reads the queue's clock for its arrival, so with a fixed clock the
/// second of two items would be due an interval after "now" and the consumer would wait for time,
/// which loom cannot model (its timed waits never time out). With this clock every reading the
/// consumer takes after an item arrived is past that item's release time.
///
/// Its counter is a `std` atomic on purpose: time is not part of the protocol under test, and
/// loom need not explore its interleavings.
#[derive(Debug, Default)]
struct Jumping(std::sync::atomic::AtomicU64);

impl Clock for Jumping {
    fn now(&self) -> Nanos {
        Nanos::new(
            self.0
                .fetch_add(1 << 40, std::sync::atomic::Ordering::Relaxed),
        )
    }
}

#[test]
fn a_sender_waiting_for_room_is_woken_by_the_release_that_makes_it() {
    check_reaches(&[['a', 'b'], ['b', 'a']], || {
        let quota = Quota::per_second(1)
            .and_then(|q| q.with_capacity(1))
            .expect("a valid quota");
        let (tx, mut rx) =
            leaky::queue_with_clock(quota, Jumping::default()).expect("a valid queue");
        let send = |tx: LeakySender<char, Jumping>, item| {
            thread::spawn(
                move || match tx.send_timeout(item, Duration::from_secs(3600)) {
                    Ok(_) => {}
                    Err(SendTimeoutError::Closed(_)) => panic!("nobody closes this queue"),
                    Err(SendTimeoutError::Timeout(_)) => panic!("loom waits never time out"),
                    Err(other) => panic!("a refusal the model does not know: {other}"),
                },
            )
        };
        let a = send(tx.clone(), 'a');
        let b = send(tx, 'b');
        let first = rx.recv().expect("two items are on their way");
        let second = rx.recv().expect("the other one arrives once there is room");
        a.join().expect("sender a panicked");
        b.join().expect("sender b panicked");
        assert_eq!(
            rx.recv(),
            None,
            "both senders are gone, so the queue is closed"
        );
        [first, second]
    });
}

#[test]
fn a_send_racing_the_release_of_the_last_slot_is_accepted_or_handed_back_full() {
    check_reaches(&["accepted", "full"], || {
        let (tx, mut rx) = queue(1);
        tx.try_send_at('a', T0).expect("an empty queue has room");
        let producer = thread::spawn(move || tx.try_send_at('b', T0));
        assert_eq!(rx.try_recv_at(Nanos::MAX_USABLE), Ok('a'));
        let sent = producer.join().expect("producer panicked");
        // The producer is gone, so the queue is closed; whatever was accepted is still there.
        let rest = rx.drain_now();
        match sent {
            Ok(ticket) => {
                assert_eq!(ticket.position(), 0, "the slot was free when b reserved it");
                assert_eq!(rest, ['b']);
                "accepted"
            }
            Err(TrySendError::Full(back)) => {
                assert_eq!(back, 'b');
                assert!(rest.is_empty());
                "full"
            }
            Err(TrySendError::Closed(_)) => panic!("nobody closed the queue before the send"),
            Err(other) => panic!("a refusal the model does not know: {other}"),
        }
    });
}
