#!/usr/bin/env bash
# Times `pinproxy check --config` on a generated config with many host entries (default 100,000):
# a third exact names pinned by public key with 2 pins each, a third "*." patterns, a third
# exact names with include_subdomains. Not a test: it prints timings and exits 0.
#
#   Benchmarks/config-load.sh [ENTRIES] [RUNS]
#
# Uses the release binary (.build-release), building it when missing. Set PINPROXY=path to time
# another binary, KEEP=1 to keep the generated config.
set -euo pipefail

entries=${1:-100000}
runs=${2:-3}
root=$(cd "$(dirname "$0")/.." && pwd)
binary=${PINPROXY:-$root/.build-release/release/pinproxy}

if [[ ! -x $binary ]]; then
    echo "building $binary (swift build -c release --scratch-path .build-release)" >&2
    (cd "$root" && swift build -c release --scratch-path .build-release --product pinproxy >&2)
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/pinproxy-bench.XXXXXX")
[[ ${KEEP:-0} == 1 ]] || trap 'rm -rf "$work"' EXIT
config=$work/pinproxy.toml

python3 - "$entries" "$config" <<'PY'
import base64, hashlib, sys
count, path = int(sys.argv[1]), sys.argv[2]
def pin(i, j):
    return "sha256/" + base64.b64encode(hashlib.sha256(f"{i}/{j}".encode()).digest()).decode()
with open(path, "w") as out:
    out.write('[default]\naction = "deny"\n\n')
    for i in range(count):
        kind = i % 3
        if kind == 0:
            out.write(f'[hosts."h{i}.example.test"]\npin = "public-key"\npins = ["{pin(i, 0)}", "{pin(i, 1)}"]\n\n')
        elif kind == 1:
            out.write(f'[hosts."*.h{i}.example.test"]\nports = [443, 8443]\n\n')
        else:
            out.write(f'[hosts."h{i}.example.test"]\ninclude_subdomains = true\naction = "deny"\n\n')
PY

echo "config: $entries entries, $(wc -l <"$config") lines, $(du -h "$config" | cut -f1) ($config)"
echo "binary: $binary"
times=()
for run in $(seq "$runs"); do
    start=$EPOCHREALTIME
    "$binary" check --config "$config" >"$work/out.txt" 2>&1 || { cat "$work/out.txt" >&2; echo "check failed" >&2; exit 1; }
    end=$EPOCHREALTIME
    seconds=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.3f", b - a }')
    echo "run $run: $seconds s"
    times+=("$seconds")
done
grep -E '^hosts:' "$work/out.txt" || true
printf '%s\n' "${times[@]}" | sort -n | awk -v n="$runs" -v entries="$entries" '
    { t[NR] = $1 }
    END { printf "%d entries, %d runs: best %.3f s, median %.3f s, worst %.3f s\n", entries, n, t[1], t[int((n + 1) / 2)], t[n] }
'
