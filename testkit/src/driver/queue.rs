//! Drives a [`LeakyReceiver`] on a manual clock and a plain reference model through the same
//! operations, and asserts identical answers: every ticket (position and release time, to the
//! nanosecond), every receive (the item, or `NotYet` with the exact release time, `Empty`, `Closed`),
//! every refusal with its item handed back, and in the end that the sequence delivered (received,
//! drained, left over) equals the sequence accepted, and that a `try_recv_at(u64::MAX)` loop
//! receives every accepted item still waiting, whatever the readings were (issue 11, defect c).
//!
//! Used by `tests/leaky_queue_model.rs` (proptest) and the fuzz crate's `leaky_ops` target
//! (arbitrary), which generate
//! [`QueueSpec`]s and [`QueueOp`]s their own way.
//!
//! The model is the documented pacing rule, written independently of the queue's internals: an
//! item accepted at reading `t` is released at `max(previous accepted item's release + I, t')`
//! (the first item ever at `t'`), where `t' = min(t, the clock's reading)` (a send is never
//! scheduled ahead of the queue's clock, which the driver sets only for the clock-reading forms),
//! readings clamped to 2^62 ns and release times clamped to the same bound, so that the latest
//! reading releases everything.

use std::collections::VecDeque;
use std::time::Duration;

use tollgate::leaky::{self, LeakyReceiver, LeakySender, TryRecvError, TrySendError};
use tollgate::{ManualClock, Nanos, Quota, QuotaError};

use crate::consts::MAX_USABLE_NS;
use crate::driver::step::Step;

/// The largest capacity a leaky queue accepts (`leaky::MAX_QUEUE_CAPACITY`).
pub const MAX_CAPACITY: u64 = 1 << 24;

/// Valid capacities above this are checked for acceptance but not run: the queue allocates a slot
/// per item up front, and the interesting behaviour needs only a few.
pub const RUN_CAPACITY: u64 = 4096;

/// The number of producers (sender clones) a run can use.
pub const PRODUCERS: usize = 3;

/// The queue's quota: `per_period(count, period)`, then `with_capacity(capacity)` if given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueSpec {
    /// Items released per period.
    pub count: u64,
    /// The period.
    pub period: Duration,
    /// The argument of `with_capacity`, if it is called.
    pub capacity: Option<u64>,
}

impl QueueSpec {
    fn build(&self) -> Result<Quota, QuotaError> {
        let quota = Quota::per_period(self.count, self.period)?;
        match self.capacity {
            Some(c) => quota.with_capacity(c),
            None => Ok(quota),
        }
    }
}

/// One step of a run. `producer` indices are taken modulo [`PRODUCERS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueOp {
    /// Moves the reading (in the queue's intervals), earlier ones included.
    Time(Step),
    /// A producer offers its next item: `try_send_at(now)`, or `try_send` on the clock set to now.
    Send {
        /// Which producer (modulo [`PRODUCERS`]).
        producer: u8,
        /// Read the clock instead of passing the reading.
        clock: bool,
    },
    /// The consumer: `try_recv_at(now)`, or `try_recv` on the clock set to now.
    Recv {
        /// Read the clock instead of passing the reading.
        clock: bool,
    },
    /// Close, from the consumer or from a producer's handle.
    Close {
        /// The producer whose handle closes, or `None` for the consumer.
        producer: Option<u8>,
    },
    /// `drain_now`: every item at once, and the queue is closed.
    DrainNow,
    /// A producer drops its handle (the last one to go closes the queue).
    DropSender(u8),
    /// `into_leftovers`: ends the run.
    Leftovers,
}

/// What the reference model holds.
struct Model {
    interval: u64,
    capacity: u64,
    closed: bool,
    /// `(producer, sequence number, release time)`, in order.
    items: VecDeque<(usize, u64, u64)>,
    /// The release time of the last item accepted, if any.
    last_release: Option<u64>,
}

impl Model {
    fn send(&mut self, producer: usize, seq: u64, now: u64) -> Result<(u64, u64), ()> {
        if self.closed || self.items.len() as u64 >= self.capacity {
            return Err(());
        }
        let now = now.min(MAX_USABLE_NS);
        let release = match self.last_release {
            None => now,
            Some(last) => last
                .saturating_add(self.interval)
                .max(now)
                .min(MAX_USABLE_NS),
        };
        self.last_release = Some(release);
        let position = self.items.len() as u64;
        self.items.push_back((producer, seq, release));
        Ok((position, release))
    }

    fn recv(&mut self, now: u64) -> Result<(usize, u64), TryRecvError> {
        let now = now.min(MAX_USABLE_NS);
        match self.items.front() {
            None if self.closed => Err(TryRecvError::Closed),
            None => Err(TryRecvError::Empty),
            Some(&(_, _, release)) if release > now => Err(TryRecvError::NotYet {
                release_at: Nanos::new(release),
            }),
            Some(&(producer, seq, _)) => {
                self.items.pop_front();
                Ok((producer, seq))
            }
        }
    }
}

/// Checks what the constructor says about `spec`, and returns the queue and model to run, or
/// `None` if the spec is refused (correctly) or too large to run.
#[allow(clippy::type_complexity)]
fn build(
    spec: &QueueSpec,
    start: u64,
) -> Option<(
    Vec<Option<LeakySender<(usize, u64), ManualClock>>>,
    LeakyReceiver<(usize, u64), ManualClock>,
    ManualClock,
    Model,
)> {
    let quota = match spec.build() {
        Ok(q) => q,
        Err(_) => return None, // Quota validation has its own tests.
    };
    let capacity = quota.capacity();
    if capacity > MAX_CAPACITY {
        let err = leaky::queue_with_clock::<u8, _>(quota, ManualClock::new()).unwrap_err();
        let QuotaError::Algorithm(limit) = err else {
            panic!("{spec:?}: {err:?} is not the queue's own limit");
        };
        assert_eq!(
            (limit.algorithm(), limit.got(), limit.bound()),
            ("leaky queue", capacity, MAX_CAPACITY),
            "{spec:?}"
        );
        assert_eq!(err.field(), "capacity");
        return None;
    }
    if capacity > RUN_CAPACITY {
        return None;
    }
    let period = spec.period.as_nanos();
    let interval = u64::try_from(period.div_ceil(u128::from(spec.count)))
        .expect("a valid quota's interval fits");
    let clock = ManualClock::starting_at(Nanos::new(start));
    let (tx, rx) = leaky::queue_with_clock(quota, clock.clone())
        .unwrap_or_else(|e| panic!("{spec:?} within the limits was refused: {e}"));
    assert_eq!(rx.capacity(), capacity);
    assert_eq!(rx.interval(), Duration::from_nanos(interval));
    let mut senders = vec![Some(tx)];
    while senders.len() < PRODUCERS {
        let clone = senders[0].clone();
        senders.push(clone);
    }
    let model = Model {
        interval,
        capacity,
        closed: false,
        items: VecDeque::new(),
        last_release: None,
    };
    Some((senders, rx, clock, model))
}

/// Runs `ops` from the reading `start` against the queue and the model; panics on any difference.
pub fn run(spec: &QueueSpec, start: u64, ops: &[QueueOp]) {
    let Some((mut senders, rx, clock, mut model)) = build(spec, start) else {
        return;
    };
    let mut rx = Some(rx);
    let mut now = start;
    // What the queue's clock reads: `start` until a clock-reading form sets it.
    let mut clock_now = start;
    let mut next_seq = [0u64; PRODUCERS];
    let mut accepted = Vec::new();
    let mut delivered = Vec::new();
    for (i, &op) in ops.iter().enumerate() {
        let at = now;
        let context = move || format!("op {i} {op:?} at {at} ns, {spec:?} from {start}");
        let Some(queue) = rx.as_mut() else { break };
        match op {
            QueueOp::Time(step) => now = step.next(now, model.interval),
            QueueOp::Send {
                producer,
                clock: read,
            } => {
                let p = usize::from(producer) % PRODUCERS;
                let Some(tx) = senders[p].as_ref() else {
                    continue;
                };
                let item = (p, next_seq[p]);
                let got = if read {
                    clock.set(Nanos::new(now));
                    clock_now = now;
                    tx.try_send(item)
                } else {
                    tx.try_send_at(item, Nanos::new(now))
                };
                let want = model.send(p, next_seq[p], now.min(clock_now));
                match (got, want) {
                    (Ok(ticket), Ok((position, release))) => {
                        assert_eq!(
                            (ticket.position(), ticket.release_at()),
                            (position, Nanos::new(release)),
                            "ticket: {}",
                            context()
                        );
                        accepted.push(item);
                        next_seq[p] += 1;
                    }
                    (Err(TrySendError::Closed(back)), Err(())) if model.closed => {
                        assert_eq!(back, item, "{}", context());
                    }
                    (Err(TrySendError::Full(back)), Err(())) if !model.closed => {
                        assert_eq!(back, item, "{}", context());
                    }
                    (got, want) => panic!("send: queue {got:?}, model {want:?}: {}", context()),
                }
            }
            QueueOp::Recv { clock: read } => {
                let got = if read {
                    clock.set(Nanos::new(now));
                    clock_now = now;
                    queue.try_recv()
                } else {
                    queue.try_recv_at(Nanos::new(now))
                };
                let want = model.recv(now);
                assert_eq!(got, want, "recv: {}", context());
                if let Ok(item) = got {
                    delivered.push(item);
                }
            }
            QueueOp::Close { producer } => {
                match producer.map(|p| usize::from(p) % PRODUCERS) {
                    Some(p) => match senders[p].as_ref() {
                        Some(tx) => tx.close(),
                        None => continue,
                    },
                    None => queue.close(),
                }
                model.closed = true;
            }
            QueueOp::DrainNow => {
                let got = queue.drain_now();
                let want: Vec<_> = model.items.drain(..).map(|(p, s, _)| (p, s)).collect();
                model.closed = true;
                assert_eq!(got, want, "drain_now: {}", context());
                delivered.extend(got);
            }
            QueueOp::DropSender(p) => {
                let p = usize::from(p) % PRODUCERS;
                if senders[p].take().is_some() && senders.iter().all(Option::is_none) {
                    model.closed = true;
                }
            }
            QueueOp::Leftovers => {
                let Some(queue) = rx.take() else { break };
                let got = queue.into_leftovers();
                let want: Vec<_> = model.items.drain(..).map(|(p, s, _)| (p, s)).collect();
                model.closed = true;
                assert_eq!(got, want, "into_leftovers: {}", context());
                delivered.extend(got);
            }
        }
        if let Some(queue) = rx.as_ref() {
            assert_eq!(queue.len(), model.items.len() as u64, "len: {}", context());
            assert_eq!(queue.is_closed(), model.closed, "closed: {}", context());
        }
    }
    // At the end of time every accepted item still waiting is due: a receive loop at the latest
    // reading gets each of them, never `NotYet`, then reports the queue empty or closed.
    if let Some(queue) = rx.as_mut() {
        loop {
            let got = queue.try_recv_at(Nanos::new(u64::MAX));
            assert_eq!(
                got,
                model.recv(u64::MAX),
                "final receive, {spec:?} from {start}"
            );
            match got {
                Ok(item) => delivered.push(item),
                Err(TryRecvError::Empty | TryRecvError::Closed) => break,
                Err(e) => panic!("{e:?} at the end of time, {spec:?} from {start}"),
            }
        }
    }
    // Whatever is left comes back too (nothing, by the loop above): nothing accepted is lost,
    // nothing is duplicated.
    if let Some(queue) = rx.take() {
        delivered.extend(queue.into_leftovers());
    }
    assert_eq!(
        delivered, accepted,
        "delivered vs accepted, {spec:?} from {start}"
    );
}
