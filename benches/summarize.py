#!/usr/bin/env python3
"""Turn criterion's output for `cargo bench --bench tollgate` into the markdown table of benches/README.md.

Reads every `<criterion dir>/<group>/<bench>[/<threads>]/new/{benchmark,estimates}.json`, takes the
median point estimate (or another estimate, with --estimate), and prints one table per group with
the time per check, the total throughput, the ratios to governor and to the Mutex baseline (in the
`sharded_*` groups: to governor and to `TokenBucket`) in the same group, and the team's speed
targets marked met or missed. With --latency, it also reads the table printed by
`cargo bench --bench latency` and judges the p99 target; with --keyed-memory, the table printed by
`cargo bench --bench keyed_memory`, for the bytes-per-key target. The keyed groups get one row per
(key count, threads), with each bench's total Mops/s and throughput multiples. Standard library only.

Usage:
    python3 benches/summarize.py                      # finds the criterion directory itself
    python3 benches/summarize.py target/bench/criterion
    python3 benches/summarize.py --estimate mean
    cargo bench --bench latency | tee target/latency.md
    python3 benches/summarize.py --latency target/latency.md
    cargo bench --bench keyed_memory | tee target/keyed_memory.md
    python3 benches/summarize.py --keyed-memory target/keyed_memory.md
"""

import argparse
import json
import os
import sys
from pathlib import Path

# Rows in this order within a group; unknown benches follow, alphabetically.
ORDER = ["sharded", "tollgate", "tollgate_coarse", "tollgate_at", "governor", "governor_upkeep", "mutex"]
GROUP_ORDER = ["single_allow", "single_deny", "contended_allow", "contended_deny", "spread_allow",
               "sharded_allow", "sharded_deny", "windows_allow", "windows_deny", "leaky_allow",
               "leaky_deny", "leaky_queue_send", "keyed_allow", "keyed_deny", "keyed_insert"]

# The window groups' rows, in order, and each tollgate limiter's peer (the crate that offers the
# same algorithm), whose time the `÷ peer` column divides by.
WINDOW_ORDER = ["fixed", "rg_fixed", "sliding_counter", "rg_approx_sliding", "sub_window_10",
                "rg_sliding_10", "sliding_log", "sliding_log_clock", "rl_log", "token_bucket"]
WINDOW_PEERS = {"fixed": "rg_fixed", "sliding_counter": "rg_approx_sliding",
                "sub_window_10": "rg_sliding_10", "sliding_log_clock": "rl_log"}

GROUP_TITLES = {
    "single_allow": "Single thread, accept-heavy (every check admitted)",
    "single_deny": "Single thread, reject-heavy (every check refused)",
    "contended_allow": "One key, 1/2/4 threads, accept-heavy",
    "contended_deny": "One key, 1/2/4 threads, reject-heavy",
    "spread_allow": "Spread keys (a limiter per thread), accept-heavy",
    "sharded_allow": "One key, 1/2/4/8 threads, accept-heavy: ShardedBucket, TokenBucket, governor",
    "sharded_deny": "One key, 1/2/4/8 threads, reject-heavy: ShardedBucket, TokenBucket, governor",
    "windows_allow": "Window limiters, one key, 1/2 threads, accept-heavy, explicit readings",
    "windows_deny": "Window limiters, one key, 1/2 threads, reject-heavy, explicit readings",
    "leaky_allow": "Leaky meter, one key, 1/2 threads, accept-heavy",
    "leaky_deny": "Leaky meter, one key, 1/2 threads, reject-heavy",
    "leaky_queue_send": "Leaky queue, 1/2/4 producers sending while the consumer receives (items through the queue)",
    "keyed_allow": "Keyed limiters, 1 to 1M known keys, 1/2 threads, accept-heavy",
    "keyed_deny": "Keyed limiters, 1 to 1M known keys, 1/2 threads, reject-heavy",
    "keyed_insert": "Keyed limiters, first check of a new key, 1 thread",
}

# The keyed groups' benches, in column order.
KEYED_BENCHES = ["tollgate", "tollgate_at", "tollgate_coarse", "governor", "floor", "floor_clock"]

# The groups whose tables compare throughput with governor and TokenBucket (`tollgate`).
SHARDED_GROUPS = ("sharded_allow", "sharded_deny")


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
        if value and value.isdigit():
            threads = int(value)
        elif value and "/" in value:
            # The keyed groups: `<keys>/<threads>`.
            threads = tuple(int(v) for v in value.split("/"))
        else:
            threads = 1
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


def thrpt_ratio(a, b):
    return "" if a is None or b is None else f"{mops(a) / mops(b):.2f}"


def sharded_table(group, rows):
    """A `sharded_*` group: throughput multiples of governor's and TokenBucket's (above 1 is faster)."""
    out = [f"#### `{group}`: {GROUP_TITLES.get(group, group)}", "",
           "| bench | threads | ns per check (wall) | total Mops/s | × governor's Mops/s | "
           "× TokenBucket's Mops/s | × own 1-thread throughput |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for key in sorted(rows, key=sort_key):
        function, threads = key
        r = rows[key]
        one = rows.get((function, 1))
        scale = thrpt_ratio(r, one) if threads != 1 else ""
        out.append(f"| {function} | {threads} | {per_check(r):.1f} | {mops(r):.1f} | "
                   f"{thrpt_ratio(r, rows.get(('governor', threads)))} | "
                   f"{thrpt_ratio(r, rows.get(('tollgate', threads)))} | {scale} |")
    return out


def windows_table(group, rows):
    """A `windows_*` group: time per check divided by TokenBucket's and by the algorithm's peer."""
    out = [f"#### `{group}`: {GROUP_TITLES.get(group, group)}", "",
           "| bench | threads | ns per check (wall) | total Mops/s | ÷ TokenBucket | ÷ peer | "
           "× own 1-thread throughput |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]

    def key(k):
        function, threads = k
        rank = WINDOW_ORDER.index(function) if function in WINDOW_ORDER else len(WINDOW_ORDER)
        return (threads, rank, function)

    for k in sorted(rows, key=key):
        function, threads = k
        r = rows[k]
        one = rows.get((function, 1))
        scale = f"{mops(r) / mops(one):.2f}" if one and threads != 1 else ""
        peer = rows.get((WINDOW_PEERS[function], threads)) if function in WINDOW_PEERS else None
        out.append(f"| {function} | {threads} | {per_check(r):.1f} | {mops(r):.1f} | "
                   f"{ratio(r, rows.get(('token_bucket', threads)))} | {ratio(r, peer)} | {scale} |")
    return out


def versus_table(group, rows, first, second, first_title, second_title):
    """Time per check divided by two named benches' at the same thread count."""
    out = [f"#### `{group}`: {GROUP_TITLES.get(group, group)}", "",
           f"| bench | threads | ns per check (wall) | total Mops/s | {first_title} | {second_title} | "
           "× own 1-thread throughput |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for k in sorted(rows, key=lambda k: (k[1], k[0])):
        function, threads = k
        r = rows[k]
        one = rows.get((function, 1))
        scale = f"{mops(r) / mops(one):.2f}" if one and threads != 1 else ""
        out.append(f"| {function} | {threads} | {per_check(r):.1f} | {mops(r):.1f} | "
                   f"{ratio(r, rows.get((first, threads)))} | {ratio(r, rows.get((second, threads)))} | "
                   f"{scale} |")
    return out


def keyed_table(group, rows):
    """A `keyed_allow` or `keyed_deny` group: one row per (keys, threads), total Mops/s of each bench,
    and throughput multiples (above 1 is faster)."""
    out = [f"#### `{group}`: {GROUP_TITLES.get(group, group)}", "",
           "Total Mops/s (all threads). × columns divide throughputs: above 1 is faster.", "",
           "| keys | threads | " + " | ".join(KEYED_BENCHES) + " | tollgate × governor | "
           "tollgate_at × governor | tollgate × floor_clock | tollgate_at × floor | "
           "tollgate × own 1 thread | governor × own 1 thread | floor × own 1 thread |",
           "| ---: | ---: | " + " | ".join("---:" for _ in KEYED_BENCHES) + " | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    points = sorted({t for (_, t) in rows if isinstance(t, tuple)})
    for size, threads in points:
        r = {b: rows.get((b, (size, threads))) for b in KEYED_BENCHES}
        cells = [f"{mops(r[b]):.1f}" if r[b] else "" for b in KEYED_BENCHES]

        def own(bench):
            one = rows.get((bench, (size, 1)))
            return thrpt_ratio(r[bench], one) if threads != 1 else ""

        out.append(f"| {size} | {threads} | " + " | ".join(cells) + " | "
                   f"{thrpt_ratio(r['tollgate'], r['governor'])} | "
                   f"{thrpt_ratio(r['tollgate_at'], r['governor'])} | "
                   f"{thrpt_ratio(r['tollgate'], r['floor_clock'])} | "
                   f"{thrpt_ratio(r['tollgate_at'], r['floor'])} | "
                   f"{own('tollgate')} | {own('governor')} | {own('floor')} |")
    return out


def keyed_insert_table(group, rows):
    """`keyed_insert`: time per first check of a new key, by batch (new keys per fresh limiter)."""
    out = [f"#### `{group}`: {GROUP_TITLES.get(group, group)}", "",
           "| new keys per fresh limiter | tollgate ns per new key | governor ns per new key | "
           "tollgate × governor's throughput |",
           "| ---: | ---: | ---: | ---: |"]
    for batch in sorted({t for (_, t) in rows}):
        t, g = rows.get(("tollgate", batch)), rows.get(("governor", batch))
        out.append(f"| {batch} | {per_check(t):.1f} | {per_check(g):.1f} | {thrpt_ratio(t, g)} |"
                   if t and g else f"| {batch} | | | |")
    return out


def table(group, rows):
    if group in ("keyed_allow", "keyed_deny"):
        return keyed_table(group, rows)
    if group == "keyed_insert":
        return keyed_insert_table(group, rows)
    if group in SHARDED_GROUPS:
        return sharded_table(group, rows)
    if group.startswith("windows"):
        return windows_table(group, rows)
    if group == "leaky_queue_send":
        out = [f"#### `{group}`: {GROUP_TITLES.get(group, group)}", "",
               "| bench | producers | ns per item (wall) | items per second (millions) | × 1 producer |",
               "| --- | ---: | ---: | ---: | ---: |"]
        for (function, threads), r in sorted(rows.items(), key=lambda kv: kv[0][1]):
            one = rows.get((function, 1))
            scale = f"{mops(r) / mops(one):.2f}" if one and threads != 1 else ""
            out.append(f"| {function} | {threads} | {per_check(r):.1f} | {mops(r):.2f} | {scale} |")
        return out
    if group in ("leaky_allow", "leaky_deny"):
        return versus_table(group, rows, "token_bucket", "leaky_bucket", "÷ TokenBucket", "÷ leaky-bucket")
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


def read_latency(path):
    """({(limiter, threads): {column: value}}, warning or None) from what `cargo bench --bench latency`
    printed: its table, and its warning when the 2-thread rounds did not get two cores."""
    rows, header, warning = {}, None, None
    for line in Path(path).read_text().splitlines():
        if "did not run side by side" in line:
            warning = line.strip()
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[:2] == ["limiter", "threads"]:
            header = cells
        elif header and len(cells) == len(header) and not cells[0].startswith("---"):
            rows[(cells[0], int(cells[1]))] = dict(zip(header, cells))
    if not rows:
        sys.exit(f"no latency table in {path}: pass the output of `cargo bench --bench latency`")
    return rows, warning


def read_keyed_memory(path):
    """{keys: (tollgate, governor)} bytes per key (medians) from what `cargo bench --bench keyed_memory`
    printed."""
    rows = {}
    for line in Path(path).read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0].isdigit():
            rows[int(cells[0])] = (float(cells[1].split()[0]), float(cells[2].split()[0]))
        elif rows and not line.startswith("|"):
            # The first table is the target's (anonymous memory); the resident set's follows.
            break
    if not rows:
        sys.exit(f"no table in {path}: pass the output of `cargo bench --bench keyed_memory`")
    return rows


def targets(groups, latency=None, keyed_memory=None):
    """The team's speed targets, as ratios within one run (the latency target from its own run)."""
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
    # Issue 3: the sharded bucket on one hot key.
    sharded_2 = get("sharded_allow", "sharded", 2)
    thrpt_at_least("2 threads admitting, one key: ShardedBucket total throughput ÷ governor's",
                   sharded_2, get("sharded_allow", "governor", 2), 4.0)
    thrpt_at_least("2 threads admitting, one key: ShardedBucket total throughput ÷ TokenBucket's",
                   sharded_2, get("sharded_allow", "tollgate", 2), 4.0)
    # Issue 6: the keyed limiter at 100 000 known keys, both loads.
    for group in ("keyed_allow", "keyed_deny"):
        for threads, limit in ((1, 1.5), (2, 2.0)):
            thrpt_at_least(f"{group}, 100 000 keys, {threads} thread{'s' if threads > 1 else ''}: "
                           "tollgate total throughput ÷ governor's",
                           get(group, "tollgate", (100_000, threads)),
                           get(group, "governor", (100_000, threads)), limit)
    # What the keyed targets would take: the same limiter without a clock read per check.
    keyed_reference = []
    for group in ("keyed_allow", "keyed_deny"):
        for threads in (1, 2):
            gov = get(group, "governor", (100_000, threads))
            for bench in ("tollgate_at", "tollgate_coarse", "floor_clock", "floor"):
                row = get(group, bench, (100_000, threads))
                if row and gov:
                    keyed_reference.append(f"| {group} | {threads} | {bench} | {mops(row) / mops(gov):.2f}× |")
    if keyed_memory:
        for keys, (t, g) in sorted(keyed_memory.items()):
            checks.append((f"bytes per key at {keys} keys: tollgate ({t:.1f}) ÷ governor ({g:.1f}), "
                           "keyed_memory bench", f"{t / g:.3f}×", "≤ 1.0×", t <= g))
    latency, latency_warning = latency or (None, None)
    if latency:
        s, g = latency.get(("ShardedBucket", 2)), latency.get(("governor", 2))
        if s and g:
            v = float(s["p99"]) / float(g["p99"])
            checks.append(("2 threads admitting, one key: ShardedBucket p99 ÷ governor's "
                           f"({s['p99']} ns ÷ {g['p99']} ns, latency bench)", f"{v:.3f}×", "≤ 0.5×", v <= 0.5))

    out = ["#### Targets", "", "| target | measured | wanted | |", "| --- | ---: | ---: | --- |"]
    for label, value, wanted, ok in checks:
        out.append(f"| {label} | {value} | {wanted} | {'met' if ok else '**missed**'} |")
    if latency_warning:
        out += ["", "The latency bench warned: " + latency_warning]
    if not latency and sharded_2:
        out += ["", "The p99 target (ShardedBucket's p99 at 2 threads ≤ half of governor's) is judged by "
                "`cargo bench --bench latency`; pass its output with `--latency FILE` to list it here."]

    # What 4× TokenBucket would take: shards share nothing, so 2 threads can at best double the
    # sharded bucket's own 1-thread throughput; TokenBucket keeps ~0.9× of its 1-thread throughput
    # on one key, so the best reachable ratio to it at 2 threads is about 2 ÷ 0.9, far below 4.
    sharded_1 = get("sharded_allow", "sharded", 1)
    if sharded_1 and sharded_2:
        own = mops(sharded_2) / mops(sharded_1)
        out += ["", f"Ceiling: ShardedBucket ran 2 threads at {own:.2f}× its own 1-thread throughput "
                "(2 cores: at most 2×)."]
        if own > 2.05:
            out.append("**Above 2×: its 1-thread sample ran slow (the machine's noise), so the ceilings "
                       "below are understated.**")
        for function, name in (("tollgate", "TokenBucket"), ("governor", "governor")):
            other = get("sharded_allow", function, 2)
            if other:
                ceiling = 2 * mops(sharded_1) / mops(other)
                out.append(f"Against {name} at 2 threads that caps the ratio at 2 × ShardedBucket's 1-thread "
                           f"÷ {name}'s 2-thread throughput = {ceiling:.2f}×; measured "
                           f"{mops(sharded_2) / mops(other):.2f}×.")

    # The control for every multi-thread figure: threads that share nothing should scale with cores.
    if keyed_reference:
        out += ["", "For the keyed targets, the other rows at 100 000 keys, as throughput ÷ governor's:", "",
                "| group | threads | bench | × governor |", "| --- | ---: | --- | ---: |"] + keyed_reference

    # The keyed groups' own control: the floor's read-only denials on 1 000 keys (a table that fits
    # in the cache, no write, no lock) should scale with cores.
    one, two = get("keyed_deny", "floor", (1000, 1)), get("keyed_deny", "floor", (1000, 2))
    if one and two:
        s = mops(two) / mops(one)
        out += ["", f"Keyed control: the floor's denials on 1 000 keys ran 2 threads at {s:.2f}× one "
                "thread's throughput."]
        if s < 1.6:
            out.append("**Below 1.6×: the keyed run did not get two free cores, so its 2-thread rows "
                       "say more about the machine's load than about the limiters. Rerun on a quiet "
                       "machine.**")

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
    p.add_argument("--latency", metavar="FILE",
                   help="the output of `cargo bench --bench latency`, to judge the p99 target")
    p.add_argument("--keyed-memory", metavar="FILE",
                   help="the output of `cargo bench --bench keyed_memory`, to judge the bytes-per-key target")
    args = p.parse_args()
    latency = read_latency(args.latency) if args.latency else None
    keyed_memory = read_keyed_memory(args.keyed_memory) if args.keyed_memory else None

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
             "thread count in the same group: below 1 is faster. In the `sharded_*` tables, × columns "
             "divide this row's total throughput by governor's (or TokenBucket's): above 1 is faster.", ""]
    names = [g for g in GROUP_ORDER if g in groups] + sorted(g for g in groups if g not in GROUP_ORDER)
    for g in names:
        lines += table(g, groups[g]) + [""]
    lines += targets(groups, latency, keyed_memory)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
