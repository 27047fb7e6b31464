//! The tour: what tollgate does to a bursty trace, then a live contention table (being written).
fn main() {}
