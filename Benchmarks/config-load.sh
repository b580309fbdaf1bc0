#!/usr/bin/env bash
# Times `pinproxy check --config` on a generated config with many host entries (default 100,000).
# Two shapes (SHAPE=…):
#   mixed (the default): a third exact names pinned by public key with 2 pins each, a third "*."
#         patterns, a third exact names with include_subdomains;
#   pins: every entry an exact name pinned by public key with 2 pins (17 MB for 100,000: the
#         policy of issue 19, whose goal is under one second, best of three).
# Not a test: it prints timings (/usr/bin/time: wall, user and system time, peak RSS) and exits 0.
#
#   Benchmarks/config-load.sh [ENTRIES] [RUNS]
#
# Uses the release binary (.build-release), building it when missing. Set PINPROXY=path to time
# another binary (e.g. .build/release/pinproxy after `swift build -c release`), KEEP=1 to keep
# the generated config. The load average is printed first: on a shared machine, wall time
# follows it.
set -euo pipefail

entries=${1:-100000}
runs=${2:-3}
shape=${SHAPE:-mixed}
root=$(cd "$(dirname "$0")/.." && pwd)
binary=${PINPROXY:-$root/.build-release/release/pinproxy}

[[ $shape == mixed || $shape == pins ]] || { echo "SHAPE is mixed or pins, not $shape" >&2; exit 2; }
[[ -x /usr/bin/time ]] || { echo "needs /usr/bin/time (Debian: apt-get install time)" >&2; exit 2; }
if [[ ! -x $binary ]]; then
    echo "building $binary (swift build -c release --scratch-path .build-release)" >&2
    (cd "$root" && swift build -c release --scratch-path .build-release --product pinproxy >&2)
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/pinproxy-bench.XXXXXX")
[[ ${KEEP:-0} == 1 ]] || trap 'rm -rf "$work"' EXIT
config=$work/pinproxy.toml

python3 - "$entries" "$config" "$shape" <<'PY'
import base64, hashlib, sys
count, path, shape = int(sys.argv[1]), sys.argv[2], sys.argv[3]
def pin(i, j):
    return "sha256/" + base64.b64encode(hashlib.sha256(f"{i}/{j}".encode()).digest()).decode()
with open(path, "w") as out:
    if shape == "pins":
        for i in range(count):
            out.write(f'[hosts."h{i}.example.test"]\npin = "public-key"\npins = ["{pin(i, 0)}", "{pin(i, 1)}"]\n\n')
        sys.exit()
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

echo "config: $entries entries ($shape), $(wc -l <"$config") lines, $(stat -c %s "$config") bytes ($config)"
echo "binary: $binary"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPU(s)"
times=()
for run in $(seq "$runs"); do
    /usr/bin/time -o "$work/time.txt" -f "%e %U %S %M" "$binary" check --config "$config" >"$work/out.txt" 2>&1 \
        || { cat "$work/out.txt" >&2; echo "check failed" >&2; exit 1; }
    read -r wall user system rss <"$work/time.txt"
    echo "run $run: $wall s (user $user s, system $system s, peak RSS $((rss / 1024)) MiB)"
    times+=("$wall")
done
grep -E '^hosts:' "$work/out.txt" || true
printf '%s\n' "${times[@]}" | sort -n | awk -v n="$runs" -v entries="$entries" '
    { t[NR] = $1 }
    END { printf "%d entries, %d runs: best %.2f s, median %.2f s, worst %.2f s\n", entries, n, t[1], t[int((n + 1) / 2)], t[n] }
'
