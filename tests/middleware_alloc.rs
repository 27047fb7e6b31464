//! Allocations the middleware makes per admitted request, counted by a global allocator: at most
//! 1 with the fields on (the boxed `RateLimitInfo` extension; the `RateLimit` value is cut from a
//! per-thread buffer), none with the extension off, fields on or not.
//!
//! The request carries a peer address (as every request from axum's connect info does) and the
//! handler's response a content type, so the maps the layer appends to already exist: what is
//! counted is the layer's own work.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use http::{HeaderValue, Request, Response};
use tollgate::keyed::KeyedLimiter;
use tollgate::middleware::{peer_ip, Headers, LimitLayer};
use tollgate::{ManualClock, Quota};
use tower::{service_fn, Layer, Service};

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every call is forwarded to the system allocator unchanged; the count is a
// thread-local `Cell` with a const initializer, which never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|c| c.set(c.get() + 1));
        // SAFETY: the caller's contract is passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract is passed on.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.with(|c| c.set(c.get() + 1));
        // SAFETY: the caller's contract is passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

/// Polls a future that is ready at once (every future here is) to completion.
fn now<F: Future>(fut: F) -> F::Output {
    let mut fut = pin!(fut);
    let mut cx = Context::from_waker(Waker::noop());
    match fut.as_mut().poll(&mut cx) {
        Poll::Ready(out) => out,
        Poll::Pending => panic!("the layer made an in-process decision wait"),
    }
}

fn request() -> Request<()> {
    let mut req = Request::new(());
    req.extensions_mut()
        .insert(SocketAddr::from(([127, 0, 0, 2], 40000)));
    req
}

/// The allocations of `requests` admitted requests through the layer, beyond those of building
/// the requests and of the handler. Every request leaves its key a different number of units, so
/// every `RateLimit` value differs from the last (no cache of values could serve them).
fn per_requests(headers: Headers, info: bool, requests: u64) -> u64 {
    let limiter =
        KeyedLimiter::with_clock(Quota::per_second(1_000_000).unwrap(), ManualClock::new());
    let layer = LimitLayer::keyed(limiter, peer_ip())
        .headers(headers)
        .request_info(info)
        .build()
        .unwrap();
    let handler = || {
        service_fn(|_req: Request<()>| async {
            let mut res = Response::new(());
            res.headers_mut().insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain"),
            );
            Ok::<_, Infallible>(res)
        })
    };
    let mut bare = handler();
    let mut limited = layer.layer(handler());
    // Warm up: the key's first check inserts it, and the thread's two buffers of values are
    // taken (each holds about 80 values).
    for _ in 0..300 {
        now(limited.call(request())).unwrap();
    }
    let cost = |svc: &mut dyn FnMut(Request<()>) -> Response<()>| {
        let mut total = 0;
        let mut last = None;
        for _ in 0..requests {
            let req = request();
            let before = allocations();
            let res = svc(req);
            let after = allocations();
            assert_eq!(res.status(), http::StatusCode::OK);
            let value = res.headers().get("ratelimit").cloned();
            assert!(value.is_none() || value != last, "every value differs");
            last = value;
            drop(res);
            total += after - before;
        }
        total
    };
    let base = cost(&mut |req| now(bare.call(req)).unwrap());
    let with = cost(&mut |req| now(limited.call(req)).unwrap());
    with - base
}

fn per_request(headers: Headers, info: bool) -> u64 {
    per_requests(headers, info, 1)
}

#[test]
fn at_most_one_allocation_with_the_fields_on() {
    let n = per_request(Headers::Always, true);
    eprintln!("fields and extension: {n} allocations");
    assert!(n <= 1, "{n} allocations");
}

/// A thousand admitted responses with the fields on, every `RateLimit` value a new one (the
/// thread's buffers of values are used up and reused many times over, the last response's value
/// still held each time): no allocation at all.
#[test]
fn no_allocation_for_the_fields() {
    let n = per_requests(Headers::Always, false, 1_000);
    assert_eq!(n, 0, "{n} allocations over 1 000 responses");
}

#[test]
fn none_with_the_fields_and_the_extension_off() {
    assert_eq!(per_request(Headers::Never, false), 0);
    assert_eq!(per_request(Headers::OnDenial, false), 0);
}
