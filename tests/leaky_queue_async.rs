//! The leaky queue's async forms (feature `tokio`): `send_async` waits for room and hands the item
//! back on close, `recv_async` paces and is woken by sends and by the close, and cancelling it loses
//! nothing; a multi-threaded run where a close races async sends.

#![cfg(all(feature = "tokio", not(tollgate_loom)))]

use std::time::{Duration, Instant};

use tollgate::leaky::{self, SendError};
use tollgate::Quota;

fn runtime(threads: usize) -> tokio::runtime::Runtime {
    let built = if threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_time()
            .build()
    };
    built.expect("a runtime")
}

#[test]
fn recv_async_paces_and_ends_at_the_close() {
    runtime(1).block_on(async {
        // 100 per second: 10 ms apart.
        let (tx, mut rx) = leaky::queue(Quota::per_second(100).expect("valid")).expect("valid");
        for k in 0..3 {
            tx.try_send(k).expect("room");
        }
        drop(tx);
        let start = Instant::now();
        let mut got = Vec::new();
        while let Some(k) = rx.recv_async().await {
            got.push(k);
        }
        assert_eq!(got, [0, 1, 2]);
        assert!(
            start.elapsed() >= Duration::from_millis(20),
            "{:?}",
            start.elapsed()
        );
    });
}

#[test]
fn recv_async_is_woken_by_a_send_and_by_a_close() {
    runtime(2).block_on(async {
        let (tx, mut rx) = leaky::queue(Quota::per_second(1000).expect("valid")).expect("valid");
        let producer = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(5)).await;
            tx.try_send("late").expect("room");
            tokio::time::sleep(Duration::from_millis(5)).await;
            tx.close();
        });
        assert_eq!(rx.recv_async().await, Some("late"));
        assert_eq!(rx.recv_async().await, None);
        producer.await.expect("producer panicked");
    });
}

#[test]
fn a_cancelled_recv_async_loses_nothing() {
    runtime(1).block_on(async {
        let quota = Quota::per_second(10)
            .and_then(|q| q.with_capacity(2))
            .expect("valid");
        let (tx, mut rx) = leaky::queue(quota).expect("valid");
        tx.try_send(1).expect("room");
        tx.try_send(2).expect("room");
        assert_eq!(rx.recv_async().await, Some(1));
        // 2 is due in 100 ms; give up after 1 ms.
        let timed_out = tokio::time::timeout(Duration::from_millis(1), rx.recv_async()).await;
        assert!(timed_out.is_err());
        assert_eq!(rx.len(), 1);
        assert_eq!(rx.recv_async().await, Some(2));
        // And an empty wait, cancelled, leaves a consumer that is still woken by a send.
        let timed_out = tokio::time::timeout(Duration::from_millis(1), rx.recv_async()).await;
        assert!(timed_out.is_err());
        tx.try_send(3).expect("room");
        assert_eq!(rx.recv_async().await, Some(3));
    });
}

#[test]
fn send_async_waits_for_room_and_hands_the_item_back_on_close() {
    runtime(2).block_on(async {
        let quota = Quota::per_second(1)
            .and_then(|q| q.with_capacity(1))
            .expect("valid");
        let (tx, rx) = leaky::queue(quota).expect("valid");
        tx.try_send(0).expect("room");
        let waiter = {
            let tx = tx.clone();
            tokio::spawn(async move { tx.send_async(1).await })
        };
        tokio::time::sleep(Duration::from_millis(5)).await;
        rx.close();
        let refused = waiter.await.expect("waiter panicked").unwrap_err();
        assert_eq!(refused, SendError(1));
        assert_eq!(rx.into_leftovers(), [0]);
    });
}

#[test]
fn async_senders_racing_a_close_lose_nothing() {
    const PER: u64 = 20_000;
    runtime(2).block_on(async {
        let quota = Quota::per_second(1_000_000_000)
            .and_then(|q| q.with_capacity(16))
            .expect("valid");
        let (tx, mut rx) = leaky::queue(quota).expect("valid");
        let producers: Vec<_> = (0..4u64)
            .map(|p| {
                let tx = tx.clone();
                tokio::spawn(async move {
                    for k in 0..PER {
                        if let Err(SendError(back)) = tx.send_async((p, k)).await {
                            assert_eq!(back, (p, k));
                            return k;
                        }
                    }
                    PER
                })
            })
            .collect();
        drop(tx);
        let mut next = [0u64; 4];
        let mut received = 0;
        while let Some((p, k)) = rx.recv_async().await {
            let p = usize::try_from(p).expect("small");
            assert_eq!(k, next[p], "per-producer order");
            next[p] += 1;
            received += 1;
            if received == 2 * PER {
                rx.close();
            }
        }
        for (p, handle) in producers.into_iter().enumerate() {
            let accepted = handle.await.expect("producer panicked");
            assert_eq!(
                next[p], accepted,
                "producer {p}: every accepted item was received"
            );
        }
    });
}
