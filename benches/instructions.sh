#!/usr/bin/env bash
# Instructions, data reads and data writes per check, counted by callgrind (machine-independent:
# the same binary and inputs give the same counts whatever else the machine is doing), for tollgate
# and governor side by side. See benches/instructions.rs for the cases.
#
#   bash benches/instructions.sh                 every case
#   bash benches/instructions.sh keyed100000     the cases whose name contains this
#
# Per check = (count with N checks - count with 0 checks) / N, N = $CHECKS (default 200 000),
# counted inside the checking loop only (`run` in benches/instructions.rs): the set-up and the
# clock's calibration, whose length varies from run to run, are left out.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
CHECKS=${CHECKS:-200000}
filter=${1:-}
cargo bench --bench instructions --no-run 2>&1 | tail -1 >&2
exe=$(ls -t "${CARGO_TARGET_DIR:-target}"/release/deps/instructions-* | grep -v '\.d$' | head -1)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# The totals line of a callgrind run as "Ir Dr Dw".
counts() {
    valgrind --tool=callgrind --cache-sim=yes --toggle-collect='instructions::run*' \
        --callgrind-out-file="$out/cg" "$exe" "$@" >/dev/null 2>&1
    python3 - "$out/cg" <<'PY'
import sys
events = totals = None
for line in open(sys.argv[1]):
    if line.startswith("events:"):
        events = line.split()[1:]
    elif line.startswith("totals:") or line.startswith("summary:"):
        totals = [int(v) for v in line.split()[1:]]
d = dict(zip(events, totals))
print(d.get("Ir", 0), d.get("Dr", 0), d.get("Dw", 0))
PY
}

echo "| case | Ir/check | Dr/check | Dw/check |"
echo "| --- | ---: | ---: | ---: |"
for shape in keyed1 keyed100000 direct; do
    for load in allow deny; do
        for krate in tollgate governor; do
            case=${krate}_${shape}_${load}
            [[ -n $filter && $case != *$filter* ]] && continue
            read -r i0 r0 w0 < <(counts "$case" 0)
            read -r i1 r1 w1 < <(counts "$case" "$CHECKS")
            python3 -c "
n=$CHECKS
print(f'| $case | {($i1-$i0)/n:.1f} | {($r1-$r0)/n:.1f} | {($w1-$w0)/n:.1f} |')"
        done
    done
done
