#!/usr/bin/env python3
"""Turn criterion's output for `cargo bench --bench tollgate` into the markdown table of benches/README.md.

Reads every `<criterion dir>/<group>/<bench>[/<threads>]/new/{benchmark,estimates}.json`, takes the
median point estimate (or another estimate, with --estimate), and prints one table per group with
the time per check, the total throughput, the ratios to governor and to the Mutex baseline in the
same group, and the team's speed targets marked met or missed. Standard library only.

Usage:
    python3 benches/summarize.py                      # finds the criterion directory itself
    python3 benches/summarize.py target/bench/criterion
    python3 benches/summarize.py --estimate mean
"""

import argparse
import json
import os
import sys
from pathlib import Path

# Rows in this order within a group; unknown benches follow, alphabetically.
ORDER = ["tollgate", "tollgate_coarse", "tollgate_at", "governor", "governor_upkeep", "mutex"]
GROUP_ORDER = ["single_allow", "single_deny", "contended_allow", "contended_deny", "spread_allow"]

GROUP_TITLES = {
    "single_allow": "Single thread, accept-heavy (every check admitted)",
    "single_deny": "Single thread, reject-heavy (every check refused)",
    "contended_allow": "One key, 1/2/4 threads, accept-heavy",
    "contended_deny": "One key, 1/2/4 threads, reject-heavy",
    "spread_allow": "Spread keys (a limiter per thread), accept-heavy",
}


def find_criterion_dir(given):
    """The criterion output directory: as given, else where criterion itself would write it."""
    if given:
        return Path(given)
    candidates = []
    if os.environ.get("CRITERION_HOME"):
        candidates.append(Path(os.environ["CRITERION_HOME"]))
    if os.environ.get("CARGO_TARGET_DIR"):
        candidates.append(Path(os.environ["CARGO_TARGET_DIR"]) / "criterion")
    root = Path(__file__).resolve().parent.parent
    candidates += [root / "target" / "criterion", root / "target" / "bench" / "criterion"]
    for c in candidates:
        if c.is_dir():
            return c
    sys.exit("no criterion directory found; run `cargo bench --bench tollgate` first, "
             "or pass the directory (e.g. target/bench/criterion)")


def load(criterion_dir, estimate):
    """{group: {(function, threads): {ns, elements}}} from every `new/` result under the directory."""
    groups = {}
    for bench_file in sorted(criterion_dir.glob("**/new/benchmark.json")):
        est_file = bench_file.with_name("estimates.json")
        if not est_file.exists():
            continue
        bench = json.loads(bench_file.read_text())
        est = json.loads(est_file.read_text())
        elements = (bench.get("throughput") or {}).get("Elements", 1)
        value = bench.get("value_str")
        threads = int(value) if value and value.isdigit() else 1
        groups.setdefault(bench["group_id"], {})[(bench["function_id"], threads)] = {
            "ns": est[estimate]["point_estimate"],  # per iteration: `elements` checks
            "elements": elements,
        }
    return groups


def per_check(r):
    """Wall-clock nanoseconds per check (the reciprocal of total throughput)."""
    return r["ns"] / r["elements"]


def mops(r):
    """Total checks per second across all threads, in millions."""
    return 1e3 / per_check(r)


def ratio(a, b):
    return "" if a is None or b is None else f"{per_check(a) / per_check(b):.2f}"


def sort_key(key):
    function, threads = key
    rank = ORDER.index(function) if function in ORDER else len(ORDER)
    return (threads, rank, function)


def table(group, rows):
    multi = any(t != 1 for (_, t) in rows) or group.startswith(("contended", "spread"))
    out = [f"#### `{group}`: {GROUP_TITLES.get(group, group)}", ""]
    if multi:
        out += ["| bench | threads | ns per check (wall) | total Mops/s | ÷ governor | ÷ mutex | × own 1-thread throughput |",
                "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    else:
        out += ["| bench | ns per check | Mops/s | ÷ governor | ÷ mutex |",
                "| --- | ---: | ---: | ---: | ---: |"]
    for key in sorted(rows, key=sort_key):
        function, threads = key
        r = rows[key]
        gov = rows.get(("governor", threads))
        mtx = rows.get(("mutex", threads))
        if multi:
            one = rows.get((function, 1))
            scale = f"{mops(r) / mops(one):.2f}" if one and threads != 1 else ""
            out.append(f"| {function} | {threads} | {per_check(r):.1f} | {mops(r):.1f} | "
                       f"{ratio(r, gov)} | {ratio(r, mtx)} | {scale} |")
        else:
            out.append(f"| {function} | {per_check(r):.1f} | {mops(r):.1f} | {ratio(r, gov)} | {ratio(r, mtx)} |")
    return out


def targets(groups):
    """The team's speed targets, as ratios within one run."""
    def get(group, function, threads=1):
        return groups.get(group, {}).get((function, threads))

    checks = []

    def time_at_most(label, a, b, limit):
        if a and b:
            v = per_check(a) / per_check(b)
            checks.append((label, f"{v:.3f}×", f"≤ {limit}×", v <= limit))

    def thrpt_at_least(label, a, b, limit):
        if a and b:
            v = mops(a) / mops(b)
            checks.append((label, f"{v:.3f}×", f"≥ {limit}×", v >= limit))

    gov = get("single_allow", "governor")
    time_at_most("single thread allow, default clock: time ÷ governor",
                 get("single_allow", "tollgate"), gov, 1.05)
    time_at_most("single thread allow, CoarseClock: time ÷ governor",
                 get("single_allow", "tollgate_coarse"), gov, 0.5)
    time_at_most("single thread allow, `try_acquire_at`: time ÷ governor",
                 get("single_allow", "tollgate_at"), gov, 0.5)
    thrpt_at_least("2 threads denying, one key: total throughput ÷ 1 thread",
                   get("contended_deny", "tollgate", 2), get("contended_deny", "tollgate", 1), 1.8)
    thrpt_at_least("2 threads admitting, one key: total throughput ÷ governor's",
                   get("contended_allow", "tollgate", 2), get("contended_allow", "governor", 2), 1.0)

    out = ["#### Targets", "", "| target | measured | wanted | |", "| --- | ---: | ---: | --- |"]
    for label, value, wanted, ok in checks:
        out.append(f"| {label} | {value} | {wanted} | {'met' if ok else '**missed**'} |")

    # The control for every multi-thread figure: threads that share nothing should scale with cores.
    one, two = get("spread_allow", "tollgate", 1), get("spread_allow", "tollgate", 2)
    if one and two:
        s = mops(two) / mops(one)
        out += ["", f"Control: 2 threads on spread keys ran at {s:.2f}× one thread's throughput."]
        if s < 1.6:
            out.append("**Below 1.6×: this run did not get two free cores, so its multi-thread rows "
                       "(and the two thread-scaling targets) say more about the machine's load than "
                       "about the limiters. Rerun on a quiet machine.**")
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("criterion_dir", nargs="?", help="criterion's output directory")
    p.add_argument("--estimate", default="median", choices=["median", "mean", "slope"],
                   help="which point estimate to report (default: median)")
    args = p.parse_args()

    criterion_dir = find_criterion_dir(args.criterion_dir)
    groups = load(criterion_dir, args.estimate)
    if not groups:
        sys.exit(f"no results under {criterion_dir}")

    shown = criterion_dir.resolve()
    root = Path(__file__).resolve().parent.parent
    if shown.is_relative_to(root):
        shown = shown.relative_to(root)
    lines = [f"Point estimate: {args.estimate} time per iteration, from `{shown}`. "
             "÷ columns divide this row's time per check by governor's (or the mutex's) at the same "
             "thread count in the same group: below 1 is faster.", ""]
    names = [g for g in GROUP_ORDER if g in groups] + sorted(g for g in groups if g not in GROUP_ORDER)
    for g in names:
        lines += table(g, groups[g]) + [""]
    lines += targets(groups)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
