//! Loom models of [`tollgate::lease::LeaseStock`], the local stock a leased bucket spends from:
//! two admitters and a landing lease never spend more than was leased and never lose a token
//! (every token is spent once, handed back once, or still in the stock), and never find the stock
//! empty while it holds tokens; at most one lease is in flight; a drain (what a bucket's drop
//! does) hands back exactly the tokens not spent, and a drain racing a landing misses nothing that
//! a second drain does not find.
//!
//! Readings are explicit milliseconds, so expiry is exact. Run with
//! `RUSTFLAGS="--cfg tollgate_loom" LOOM_MAX_PREEMPTIONS=2 CARGO_TARGET_DIR=target/loom cargo test -p loom-tests --release`.

#![cfg(tollgate_loom)]

mod common;

use common::check_reaches;
use loom::sync::Arc;
use loom::thread;
use tollgate::lease::{LeaseStock, Take};

/// Every reading of the models, well before every expiry.
const NOW: u64 = 10;
const EXPIRY: u64 = 1_000;

fn taken(t: Take) -> u64 {
    u64::from(matches!(t, Take::Taken { .. }))
}

#[test]
fn admitters_and_a_landing_lease_conserve_every_token() {
    // An older lease of 1 token and a newer one of 2; two admitters take one each while a third
    // lease of 2 lands, replacing the older lease. Summary: the tokens the landing replaced
    // (handed back): 1 when it landed before any admitter spent the older lease's token, else 0.
    check_reaches(&[0u64, 1], || {
        let stock = Arc::new(LeaseStock::new());
        stock.land(1, EXPIRY, NOW);
        stock.land(2, EXPIRY, NOW);
        let admitters: Vec<_> = (0..2)
            .map(|_| {
                let stock = stock.clone();
                thread::spawn(move || taken(stock.try_take(NOW)))
            })
            .collect();
        let replaced = stock.land(2, EXPIRY, NOW);
        let spent: u64 = admitters.into_iter().map(|a| a.join().unwrap()).sum();
        let left = stock.drain(NOW);
        // Leased 5: each spent once, handed back once, or left, never two of these.
        assert_eq!(
            spent + replaced + left,
            5,
            "spent {spent}, replaced {replaced}, left {left}"
        );
        // The stock never looked empty while it held tokens (between the landing's two swaps the
        // older tokens are in neither word, but the newest lease's are there).
        assert_eq!(spent, 2, "an admitter found no token");
        replaced
    });
}

#[test]
fn a_drain_racing_a_landing_loses_no_token() {
    // What a close racing a lease in flight does: the drain may miss the tokens a landing is
    // moving between its two words, and the lease's own drain after it (when it sees the bucket
    // closed) finds them. Summary: what the first drain found.
    check_reaches(&[2u64, 3, 5], || {
        let stock = Arc::new(LeaseStock::new());
        stock.land(2, EXPIRY, NOW);
        let lander = {
            let stock = stock.clone();
            thread::spawn(move || stock.land(3, EXPIRY, NOW))
        };
        let first = stock.drain(NOW);
        let replaced = lander.join().unwrap();
        let second = stock.drain(NOW);
        assert_eq!(replaced, 0);
        assert_eq!(first + second, 5, "first {first}, second {second}");
        first
    });
}

#[test]
fn two_admitters_never_take_one_token_twice() {
    // One token, two admitters: exactly one wins. Summary: which.
    check_reaches(&[(0u64, 1u64), (1, 0)], || {
        let stock = Arc::new(LeaseStock::new());
        stock.land(1, EXPIRY, NOW);
        let other = {
            let stock = stock.clone();
            thread::spawn(move || taken(stock.try_take(NOW)))
        };
        let mine = taken(stock.try_take(NOW));
        let theirs = other.join().unwrap();
        assert_eq!(mine + theirs, 1);
        assert_eq!(stock.try_take(NOW), Take::Empty);
        (mine, theirs)
    });
}

#[test]
fn one_lease_in_flight_at_most() {
    check_reaches(&[(false, true), (true, false)], || {
        let stock = Arc::new(LeaseStock::new());
        let other = {
            let stock = stock.clone();
            thread::spawn(move || stock.begin_lease())
        };
        let mine = stock.begin_lease();
        let theirs = other.join().unwrap();
        assert!(mine ^ theirs, "exactly one lease may start");
        assert!(stock.is_leasing());
        (mine, theirs)
    });
}

#[test]
fn a_drain_hands_back_exactly_the_tokens_not_spent() {
    // 3 tokens; an admitter takes twice while the bucket is dropped (drained). Summary: the tokens
    // the drain handed back.
    check_reaches(&[1u64, 2, 3], || {
        let stock = Arc::new(LeaseStock::new());
        stock.land(3, EXPIRY, NOW);
        let admitter = {
            let stock = stock.clone();
            thread::spawn(move || taken(stock.try_take(NOW)) + taken(stock.try_take(NOW)))
        };
        let back = stock.drain(NOW);
        let spent = admitter.join().unwrap();
        assert_eq!(spent + back, 3, "spent {spent}, handed back {back}");
        back
    });
}

#[test]
fn a_lease_landing_after_expiry_drops_the_old_tokens() {
    // The old lease expired: its tokens are neither spent nor handed back, whatever the order.
    loom::model(|| {
        let stock = Arc::new(LeaseStock::new());
        stock.land(2, NOW, 0);
        let admitter = {
            let stock = stock.clone();
            thread::spawn(move || stock.try_take(NOW))
        };
        let replaced = stock.land(1, EXPIRY, NOW);
        let t = admitter.join().unwrap();
        assert_eq!(replaced, 0);
        assert!(
            matches!(t, Take::Expired | Take::Taken { left: 0 }),
            "{t:?}"
        );
        let spent = u64::from(matches!(t, Take::Taken { .. }));
        assert_eq!(spent + stock.drain(NOW), 1);
    });
}
