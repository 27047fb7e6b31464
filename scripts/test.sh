#!/usr/bin/env bash
# Runs every check tollgate has, in order, and stops at the first failure.
#
#   bash scripts/test.sh              all steps (about 23 minutes from a cold build on 2 cores)
#   bash scripts/test.sh loom fuzz    only the named steps, in the order given
#
# Steps: fmt layers clippy doc docsrs test asan redis loom fuzz package minver features (see the step_*
# functions below), and bench on request.
#
# Environment:
#   FUZZ_SECONDS   seconds each fuzz target runs (default 3: 14 targets, about 55 s with
#                  libFuzzer's start-up and cargo's; the build before them takes about 4 cold
#                  minutes); e.g. FUZZ_SECONDS=60 for a longer search
#   TOLLGATE_MIN_FREE_GIB
#                  free disk (GiB, default 20) below which a step's own target directory is
#                  removed once the step has passed (the warm rebuild of that step is then cold)
#
# Works from any directory. Needs rustup with a stable toolchain (rustfmt and clippy are added when
# missing) and a nightly toolchain for the docsrs, asan, fuzz and minver steps; installs cargo-fuzz
# and cargo-hack (the features step) when they are missing. The redis and minver steps start their
# own Redis servers with scripts/redis.sh, which installs Debian's redis-server and redis-tools
# with apt-get when they are missing.
# Before the first step it prints the resolved versions of the direct dependencies (Cargo.lock is
# not committed, so each fresh clone resolves the newest compatible releases; the log then shows what
# moved when a new release breaks a step).
# Exits non-zero on any failure; the output of each tool (including cargo test's "test result:"
# lines) is passed through unchanged.
#
# Adding a step: write a step_<name> function, add <name> to STEPS where it must run, add its line
# to `describe`, and undo anything it starts in `cleanup`, which runs on every exit, success or
# failure (as the redis step's servers are stopped there).

set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$(pwd)

FUZZ_SECONDS=${FUZZ_SECONDS:-3}

# Builds here are not incremental: the incremental caches only speed up a rebuild after an edit,
# and in a cold run they were 3.1 GB of the test step's 7.6 GB target directory (with full
# debuginfo, since cut to line tables in Cargo.toml's [profile.dev]). A CI machine whose disk filled
# during that step failed a link with a bus error.
export CARGO_INCREMENTAL=0

# The target directory every step's own directory sits in, and the disk space below which a step's
# own target directory (docsrs, asan, loom, fuzz, minver, features: used by that step only) is
# removed once the step has passed, so that a run on a machine short of disk does not fill it.
TARGET_ROOT=${CARGO_TARGET_DIR:-$ROOT/target}
MIN_FREE_GIB=${TOLLGATE_MIN_FREE_GIB:-20}
# `bench` (cargo bench --no-run: the benches' release build) is not in the default run: the clippy
# step already type-checks every bench (--all-targets), and its four cold minutes kept the whole
# run above its 30-minute budget. Run `bash scripts/test.sh bench` before measuring.
STEPS=(fmt layers clippy doc docsrs test asan redis loom fuzz package minver features)

# The redis or minver step's Redis directory (servers' data, logs, PIDs and env file); cleanup
# stops and removes it.
REDIS_DIR=""

# --- steps -----------------------------------------------------------------------------------------

step_fmt() {
    cargo fmt --all --check
    # fuzz/ is its own workspace, outside `--all`.
    if [[ -f fuzz/Cargo.toml ]]; then
        cargo fmt --all --check --manifest-path fuzz/Cargo.toml
    fi
}

step_layers() {
    # The one rule for imports (DESIGN.md, "Layers"): between the table's units they point down
    # or sideways, never up and never in a circle; and one name, one meaning: no type name is
    # defined in two modules but those DESIGN.md allows. Reads src/ as text; a second or two.
    python3 scripts/layers.py
}

step_clippy() {
    cargo clippy --workspace --all-targets --all-features -- -D warnings
}

step_doc() {
    # With the default features; the docsrs step builds them with every feature (the `tokio`
    # feature's async forms, the Redis backend, the middleware), warnings denied as here.
    RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps
}

step_docsrs() {
    need_nightly docsrs
    # The docs exactly as docs.rs builds them ([package.metadata.docs.rs] in Cargo.toml: every
    # feature, `--cfg docsrs`, nightly), so the "Available on crate feature ..." badges
    # (`doc(cfg(...))`, src/lib.rs) are checked too; warnings denied. A target directory of its
    # own, as the asan step's: nightly and `--cfg docsrs` would otherwise replace the stable build.
    # The pages: target/docsrs/doc/tollgate/index.html.
    local docsrs_target="$TARGET_ROOT/docsrs"
    RUSTDOCFLAGS="--cfg docsrs -D warnings" CARGO_TARGET_DIR="$docsrs_target" \
        cargo +nightly doc --all-features --no-deps -p tollgate
}

step_test() {
    # Unit, integration and doc tests of every member. loom-tests compiles to no tests here: its
    # models need --cfg tollgate_loom (the next step). --no-fail-fast runs every test binary, so each prints
    # its "test result:" line, and still exits non-zero if any test failed.
    # (Not the release-tests package: its two tests are tollgate's own files, run here already.)
    cargo test --workspace --exclude tollgate-release-tests --all-features --no-fail-fast
    # The HTTP middleware's example drives itself over loopback and checks what it got, then that a
    # busy address is reported naming it (the same features as above, so nothing is rebuilt but
    # the examples); --help must print the usage and exit 0 without serving.
    cargo run --all-features --example axum_server -- --self-test
    cargo run --all-features --example axum_server -- --help | grep -i '^usage'
    # Pacing outbound calls, on tokio's paused time: exactly 100 ms apart, in no wall time.
    cargo run --all-features --example pacing -- --self-test
    # A tonic gRPC service behind the layer, called over loopback: 3 calls admitted, the 4th
    # refused with RESOURCE_EXHAUSTED (grpc-status 8) and its pushback, the retry after the
    # pushback admitted (about 1 s of waiting).
    cargo run --all-features --example grpc -- --self-test
    cargo run --all-features --example grpc -- --help | grep -i '^usage'
    # In release, built against tollgate alone (release-tests/Cargo.toml: not the dev-dependencies'
    # release build, 2 cold minutes): the key spray at full size (10 million keys against a bound
    # of 100 000; the debug run above sprays a tenth of that), and the sharded bucket's saturation
    # measurement (>= 95 % of C + R*t under uneven load), which a debug build skips: it is about
    # speed under contention.
    cargo test --release -p tollgate-release-tests
}

# The nightly toolchain's host target (the asan step's --target; cargo fuzz's build directory).
host_triple() {
    rustc +nightly -vV | sed -n 's/^host: //p'
}

# The nightly toolchain the docsrs, asan and fuzz steps build with (doc_cfg, -Z flags).
need_nightly() {
    if ! command -v rustup >/dev/null 2>&1 || ! rustup toolchain list | grep -q '^nightly'; then
        echo "error: the $1 step needs a nightly toolchain; install it with" >&2
        echo "       rustup toolchain install nightly" >&2
        return 1
    fi
}

step_asan() {
    need_nightly asan
    # The keyed limiter's table frees entries and tables behind lock-free readers
    # (src/keyed/table.rs, epoch.rs), as the quota pointer frees replaced blocks (src/change.rs):
    # their unit tests, their integration tests and the stress test
    # under AddressSanitizer, which reports a read or write of freed memory, a double free or a
    # leak (LeakSanitizer, at exit) that the ordinary run cannot see. --target keeps build scripts
    # and proc macros uninstrumented (RUSTFLAGS then applies to the target's crates only); a target
    # directory of its own, as the loom step's, keeps the instrumented build from replacing the
    # ordinary one. Cargo builds every dev-dependency for a test (criterion, axum, tonic, the maps
    # the benches compare...), instrumented too: most of the cold build (about 190 crates).
    # Unoptimized, and without debuginfo for crates outside the workspace (Cargo.toml's
    # [profile.dev]: a report's frames in tollgate and its tests keep their lines), which saves
    # about a fifth of its CPU time.
    local asan_target="$TARGET_ROOT/asan"
    local triple
    triple=$(host_triple)
    (
        export RUSTFLAGS="-Zsanitizer=address" RUSTDOCFLAGS="-Zsanitizer=address"
        export CARGO_TARGET_DIR="$asan_target"
        local flags=(--target "$triple")
        # The table's and the epoch's unit tests (and the rest of the keyed module's).
        cargo +nightly test "${flags[@]}" --lib -- keyed::
        # And the quota pointer (src/change.rs), which frees a limiter's replaced block behind
        # lock-free checks: tests/set_quota.rs changes quotas while threads admit.
        cargo +nightly test "${flags[@]}" --test keyed_stress --test keyed --test keyed_reclaim --test keyed_signal --test set_quota
    )
}

step_redis() {
    # A standalone server and a 3-primary, 3-replica cluster on free loopback ports, started fresh
    # for this run; scripts/redis.sh describes them and the TOLLGATE_REDIS_* variables it exports.
    REDIS_DIR=$(mktemp -d "${TMPDIR:-/tmp}/tollgate-redis.XXXXXX")
    bash scripts/redis.sh start "$REDIS_DIR"
    # shellcheck source=/dev/null
    source "$REDIS_DIR/env"
    # TOLLGATE_REQUIRE_REDIS makes the tests fail, rather than skip, when a server is unreachable.
    TOLLGATE_REQUIRE_REDIS=1 cargo test --features redis,tower --test redis
    # LeasedBucket in three processes on one key, saturated and at 75 % of the limit (about 10 s):
    # round trips per admission, the bound C + R(t + L); the figures are printed.
    TOLLGATE_REQUIRE_REDIS=1 cargo test --features redis,tower --test redis_leases -- --nocapture
    # The Redis module's doc examples, which return early without a server (in the test step),
    # here run against one.
    cargo test --features redis --doc redis
    # An axum service in three processes sharing one limit per client through the standalone
    # server: 5 of 15 requests admitted in all; then a fourth process on a redis-server of the
    # example's own (TOLLGATE_REDIS_SERVER), which it kills, answers 503 (FailurePolicy::Closed).
    # Every feature, as the test step builds the examples, so only this example is built.
    TOLLGATE_REQUIRE_REDIS=1 cargo run --all-features --example redis_shared -- --self-test
    cargo run --all-features --example redis_shared -- --help | grep -i '^usage'
}

step_loom() {
    # A target directory of its own: --cfg tollgate_loom changes every crate's build, and sharing one would
    # throw away the ordinary build each time.
    local loom_target="$TARGET_ROOT/loom"
    # The models compile only under --cfg tollgate_loom, so the clippy step above never sees them: lint them
    # here, in the same configuration they run in, with tollgate's library under that
    # configuration (clippy lints every workspace member it compiles, a dependency included). Not
    # tollgate's own tests, benches and examples: they never run under loom, and checking them
    # there took 70 of this step's cold seconds (every dev-dependency checked again). Not the redis
    # feature: no model runs the Redis client (the leased bucket's stock, tollgate::lease, is
    # modelled without it), and building the client under loom would only cost time.
    RUSTFLAGS="--cfg tollgate_loom" CARGO_TARGET_DIR="$loom_target" \
        cargo clippy -p loom-tests --all-targets --features tollgate/loom,tollgate/tokio --release -- -D warnings
    RUSTFLAGS="--cfg tollgate_loom" LOOM_MAX_PREEMPTIONS=2 CARGO_TARGET_DIR="$loom_target" \
        cargo test -p loom-tests --release
    # A downstream crate that builds its own loom models with plain `--cfg loom` must still get the
    # ordinary tollgate (whose switch is `cfg(tollgate_loom)`), not a compile error.
    RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 CARGO_TARGET_DIR="$loom_target/downstream" \
        cargo test --manifest-path tests/downstream-loom/Cargo.toml --release
}

step_fuzz() {
    need_nightly fuzz
    if ! cargo fuzz --version >/dev/null 2>&1; then
        echo "cargo-fuzz is missing; installing it"
        cargo install cargo-fuzz --locked
    fi
    (
        cd fuzz
        local targets
        targets=$(cargo +nightly fuzz list)
        if [[ -z "$targets" ]]; then
            echo "error: cargo fuzz list found no fuzz targets in fuzz/" >&2
            exit 1
        fi
        # Every target built in one cargo run (its jobs in parallel), so each run below starts
        # at once.
        cargo +nightly fuzz build
        local t
        for t in $targets; do
            echo "--- fuzzing $t for ${FUZZ_SECONDS}s"
            # libFuzzer exits non-zero on a crash, a panic, a leak or a timeout; the input that
            # caused it is saved under fuzz/artifacts/$t/.
            cargo +nightly fuzz run "$t" -- -max_total_time="$FUZZ_SECONDS"
        done
    )
}

step_package() {
    # What `cargo publish` would upload: the list first (fast), checked against what a user needs,
    # then the package itself, which cargo verifies by building the unpacked crate on its own (no
    # dev-dependencies), here with every feature, as docs.rs builds it: the Redis backend's
    # include_str! of its Lua scripts is compiled only then. --allow-dirty: a local tree may have
    # uncommitted edits (CI's clean clone has none; untracked files the include globs match are
    # packaged too). The ordinary target directory: the unpacked crate (target/package/) is a
    # package of its own there, and reuses the dependencies the test step built with every feature.
    local pkg_target="$TARGET_ROOT"
    local list
    list=$(cargo package --list --allow-dirty -p tollgate)
    # Allowed: the sources with the Redis backend's Lua scripts, the examples, the README, the
    # changelog, the licenses, and what cargo adds itself (the manifest, its original, the lock file
    # and the VCS info). Anything else (tests/, benches/, fuzz/, scripts/, target/, a stray file)
    # fails the step: `include` in Cargo.toml is the place to change.
    local allowed='^(src/.+\.(rs|lua)|examples/[^/]+\.rs|README\.md|CHANGELOG\.md'
    allowed+='|LICENSE-(MIT|APACHE)|Cargo\.toml|Cargo\.toml\.orig|Cargo\.lock|\.cargo_vcs_info\.json)$'
    local unexpected
    unexpected=$(grep -v -E "$allowed" <<<"$list" || true)
    if [[ -n $unexpected ]]; then
        echo "error: cargo package would publish files a user does not need:" >&2
        sed 's/^/    /' <<<"$unexpected" >&2
        return 1
    fi
    # Required: the crate root, every Lua script the Redis backend compiles in (include_str! in
    # src/redis/script.rs), the README and changelog, the two licenses and the manifest.
    local required=(src/lib.rs README.md CHANGELOG.md LICENSE-MIT LICENSE-APACHE Cargo.toml)
    local lua
    for lua in src/redis/*.lua; do
        [[ -e $lua ]] && required+=("$lua")
    done
    if ((${#required[@]} == 6)); then
        echo "error: no Lua scripts found under src/redis/" >&2
        return 1
    fi
    local f missing=()
    for f in "${required[@]}"; do
        grep -qxF "$f" <<<"$list" || missing+=("$f")
    done
    if ((${#missing[@]} > 0)); then
        echo "error: cargo package would leave out ${missing[*]}" >&2
        return 1
    fi
    echo "package list: $(wc -l <<<"$list") files, every one expected, none required missing"
    # The tests and benches are left out on purpose, and cargo says so for each: those lines are
    # dropped here (every other line is passed through; cargo's exit status is kept by pipefail).
    local left_out='^warning: ignoring (test|benchmark) `[^`]+` as `(tests|benches)/[^`]+` '
    left_out+='is not included in the published package$'
    cargo package --allow-dirty --all-features -p tollgate 2>&1 \
        | { grep -v -E "$left_out" || true; }
    local id version crate
    id=$(cargo pkgid -p tollgate)
    version=${id##*[#@]}
    crate="$pkg_target/package/tollgate-$version.crate"
    echo "package: $crate, $(stat -c %s "$crate") bytes"
}

step_minver() {
    need_nightly minver
    # The lower bounds in the manifests, checked: every member's direct dependencies resolved to
    # the lowest versions their requirements allow (`-Z direct-minimal-versions`, nightly; their own
    # dependencies take the newest compatible releases, as a user's would), then the crate built and
    # tested against them with every feature (stable). In a scratch copy of the tree: the tracked
    # files and the untracked ones git does not ignore, as a clean clone has them, their times kept
    # so that a warm run rebuilds nothing; the ordinary Cargo.lock is left untouched. A target
    # directory of its own, as the asan step's: the minimal versions would otherwise replace the
    # ordinary build. A dev-dependency pinned with `=` stays at its pin, and a crate that is both a
    # dependency and a dev-dependency (tokio, axum, tonic) resolves to one version, so the two
    # requirements' floors must agree.
    # The Redis tests and the Redis module's doc examples then run against servers started as the
    # redis step starts them (fresh: servers an earlier step left running are stopped first), up
    # only while those run: the directory is set here, so that `cleanup` stops them on a failure,
    # and the servers are started in the copy once the other tests have passed.
    cleanup
    REDIS_DIR=$(mktemp -d "${TMPDIR:-/tmp}/tollgate-redis.XXXXXX")
    local minver_dir="$TARGET_ROOT/minver"
    local copy="$minver_dir/tree"
    rm -rf "$copy"
    mkdir -p "$copy"
    git ls-files -z --cached --others --exclude-standard \
        | while IFS= read -r -d '' f; do if [[ -e $f ]]; then printf '%s\0' "$f"; fi; done \
        | tar --null -T - -cf - | tar -xf - -C "$copy"
    (
        cd "$copy"
        export CARGO_TARGET_DIR="$minver_dir/target"
        # No debuginfo: less to build and link (about 35 test binaries), and a failure here is a
        # compile error or a test's message, not a backtrace to read.
        export CARGO_PROFILE_DEV_DEBUG=false
        cargo +nightly update -Z direct-minimal-versions
        print_resolved_versions
        # Every member's unit tests, and tollgate's integration tests but the `*_model` ones: those
        # run thousands of cases of the algorithms' arithmetic against the reference models (no
        # dependency's code), and would double the step's time. One cargo run, so the crates are
        # built once, with one set of features. Not the Redis tests: they run below, with the
        # servers. Without any Redis variables an earlier step or the caller set, so nothing here
        # reaches a server.
        local t tests=()
        for t in tests/*.rs; do
            t=$(basename "$t" .rs)
            [[ $t == *_model || $t == redis || $t == redis_leases ]] || tests+=(--test "$t")
        done
        env -u TOLLGATE_REDIS_URL -u TOLLGATE_REDIS_CLUSTER -u TOLLGATE_REDIS_SERVER \
            -u TOLLGATE_REDIS_CLI -u TOLLGATE_REDIS_PID -u TOLLGATE_REDIS_PIDS -u TOLLGATE_REQUIRE_REDIS \
            cargo test --workspace --exclude tollgate-release-tests --all-features --no-fail-fast \
            --lib "${tests[@]}"
        # The Redis tests and the Redis module's doc examples against a standalone server and a
        # cluster, as in the redis step (not its redis_shared example, to keep the step short), so
        # the redis floor is one the tests pass with, not only one that builds: redis 1.2.0 to
        # 1.2.3 built, but failed the cluster failover test (Cargo.toml). The same features as
        # above, so only the test binary and the doc examples are built here.
        bash scripts/redis.sh start "$REDIS_DIR"
        # shellcheck source=/dev/null
        source "$REDIS_DIR/env"
        TOLLGATE_REQUIRE_REDIS=1 cargo test --workspace --all-features --test redis --test redis_leases
        cargo test --workspace --all-features --doc redis
    )
    cleanup
}

step_features() {
    if ! cargo hack --version >/dev/null 2>&1; then
        echo "cargo-hack is missing; installing it"
        cargo install cargo-hack --locked
    fi
    # Every feature on its own, and every pair, builds and lints without the others (a user turns
    # on only what they need); the library alone, without the dev-dependencies (--no-dev-deps,
    # which cargo-hack takes out of Cargo.toml while it runs and then puts back). `loom` is left
    # out: it is internal (the crate's own loom models, with `--cfg tollgate_loom`), not for users.
    # Every pair is linted, not only checked: clippy compiles each combination as check does, so a
    # check of the pairs would find nothing more. A target directory of its own: each combination
    # would otherwise replace the ordinary build.
    local features_target="$TARGET_ROOT/features"
    # The powerset to depth 2 holds no feature, each feature alone and every pair (a separate
    # `check --each-feature` run would only repeat its first eight builds).
    local flags=(--no-dev-deps -p tollgate --exclude-features loom)
    CARGO_TARGET_DIR="$features_target" \
        cargo hack clippy --feature-powerset --depth 2 "${flags[@]}" -- -D warnings
}

step_bench() {
    # --all-features: the Redis bench needs the `redis` feature, the HTTP bench `tower` and `axum`.
    cargo bench --no-run --all-features
}

# Describes each step in its header.
describe() {
    case $1 in
        fmt) echo "cargo fmt --check (the workspace and fuzz/)" ;;
        layers) echo "imports point down, one name one meaning: scripts/layers.py against DESIGN.md" ;;
        clippy) echo "cargo clippy, all targets and features, warnings denied" ;;
        doc) echo "cargo doc, warnings denied" ;;
        docsrs) echo "cargo doc as docs.rs builds it: all features, --cfg docsrs (nightly)" ;;
        test) echo "cargo test: unit, integration and doc tests" ;;
        asan) echo "the keyed module's tests under AddressSanitizer (nightly)" ;;
        redis) echo "the Redis integration tests against a standalone server and a cluster started here" ;;
        loom) echo "loom models (release, LOOM_MAX_PREEMPTIONS=2)" ;;
        fuzz) echo "fuzz every target for ${FUZZ_SECONDS}s (nightly)" ;;
        package) echo "cargo package: the published files checked, the unpacked crate built" ;;
        minver) echo "build and test against the direct dependencies' minimal versions (nightly resolver), the Redis tests against servers started here" ;;
        features) echo "cargo hack: no feature, each feature alone and every pair of features linted" ;;
        bench) echo "cargo bench --no-run" ;;
        *) echo "$1" ;;
    esac
}

# Undoes anything a step started: the redis or minver step's servers and their directory.
cleanup() {
    if [[ -n $REDIS_DIR ]]; then
        bash scripts/redis.sh stop "$REDIS_DIR"
        rm -rf "$REDIS_DIR"
        REDIS_DIR=""
    fi
}

# The directory only step $1 builds in ("" for the steps that share the ordinary one).
own_target_dir() {
    case $1 in
        docsrs | asan | loom | minver | features) echo "$TARGET_ROOT/$1" ;;
        # cargo fuzz builds for an explicit --target: the fuzz workspace's own target directory,
        # or the triple's directory in CARGO_TARGET_DIR.
        fuzz)
            if [[ -n ${CARGO_TARGET_DIR:-} ]]; then
                echo "$CARGO_TARGET_DIR/$(host_triple)"
            else
                echo "$ROOT/fuzz/target"
            fi
            ;;
        *) echo "" ;;
    esac
}

# Free space, in whole GiB, on the file system the target directory is on (or would be on).
free_gib() {
    local dir=$TARGET_ROOT
    while [[ ! -e $dir ]]; do dir=$(dirname "$dir"); done
    df -Pk "$dir" | awk 'NR == 2 { print int($4 / 1048576) }'
}

# After step $1 has passed: its own target directory is removed when less than MIN_FREE_GIB is
# free, so that the steps after it have the space.
release_disk() {
    local dir free
    dir=$(own_target_dir "$1")
    free=$(free_gib)
    if [[ -n $dir && -d $dir ]] && ((free < MIN_FREE_GIB)); then
        echo "$free GiB free (under $MIN_FREE_GIB): removing $1's own target directory $dir ($(du -sh "$dir" | cut -f1))"
        rm -rf "$dir"
    fi
}

# --- driver ----------------------------------------------------------------------------------------

fmt_time() {
    local s=$1
    if ((s >= 60)); then
        printf '%dm%02ds' $((s / 60)) $((s % 60))
    else
        printf '%ds' "$s"
    fi
}

if [[ ! $FUZZ_SECONDS =~ ^[1-9][0-9]*$ ]]; then
    echo "error: FUZZ_SECONDS must be a whole number of seconds, got '$FUZZ_SECONDS'" >&2
    exit 2
fi

if (($# > 0)); then
    for s in "$@"; do
        if ! declare -F "step_$s" >/dev/null; then
            echo "error: no step named '$s'; steps: ${STEPS[*]}" >&2
            exit 2
        fi
    done
    STEPS=("$@")
fi

# rustfmt and clippy ship as rustup components that a minimal install leaves out.
if command -v rustup >/dev/null 2>&1; then
    installed=$(rustup component list --installed 2>/dev/null || true)
    for c in rustfmt clippy; do
        if ! grep -q "^$c" <<<"$installed"; then
            echo "adding the $c component"
            rustup component add "$c"
        fi
    done
fi

# The versions this run resolved for the direct dependencies (Cargo.lock is not committed, so a
# fresh clone takes the newest compatible releases): a failure caused by a dependency's new
# release then shows in the log what moved. `cargo tree` only reads the resolution, building nothing.
print_resolved_versions() {
    echo "==> resolved versions of the direct dependencies (all features, with dev and build)"
    cargo tree -p tollgate --all-features --depth 1 -e normal,build,dev --prefix none \
        | grep -v '^tollgate ' | sed -E 's/^([^ ]+) v([^ ]+).*/\1@\2/' | sort -u \
        | paste -sd ' ' | fold -s -w 100
}
print_resolved_versions

# A cold run of every step filled 4.8-5.4 GB of target directories at its peak (measured with the
# settings above, on a fresh clone); less than 8 GiB free is reported before the first step, as a
# failing link may not say that the disk was full.
echo "==> $(free_gib) GiB free on the target directory's file system ($TARGET_ROOT)"
if (($(free_gib) < 8)); then
    echo "warning: a cold run needs about 6 GiB; a link that dies with a bus error is a full disk" >&2
fi

TOTAL=${#STEPS[@]}
CURRENT=""
SUMMARY=()
START_ALL=$SECONDS

on_exit() {
    local status=$?
    cleanup || true
    echo
    if ((${#SUMMARY[@]} > 0)); then
        echo "timings: ${SUMMARY[*]}"
    fi
    local elapsed
    elapsed=$(fmt_time $((SECONDS - START_ALL)))
    if ((status == 0)); then
        echo "ALL PASSED: $TOTAL step(s) (${STEPS[*]}) in $elapsed"
    elif [[ -n $CURRENT ]]; then
        echo "FAILED: step '$CURRENT' ($(describe "$CURRENT")) exited with status $status after $elapsed"
    else
        echo "FAILED with status $status after $elapsed"
    fi
    exit "$status"
}
trap on_exit EXIT

i=0
for s in "${STEPS[@]}"; do
    i=$((i + 1))
    CURRENT=$s
    echo
    echo "==> [$i/$TOTAL] $s: $(describe "$s")"
    start=$SECONDS
    "step_$s"
    took=$((SECONDS - start))
    SUMMARY+=("$s=$(fmt_time "$took")")
    echo "<== [$i/$TOTAL] $s: ok in $(fmt_time "$took"), $(free_gib) GiB free"
    release_disk "$s"
done
CURRENT=""
# The EXIT trap prints the timings and the final line.
