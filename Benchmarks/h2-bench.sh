#!/usr/bin/env bash
# HTTP/2 through pinproxy: h2load sends many concurrent streams over ONE connection (one
# CONNECT tunnel) to a local nghttpd, directly and through pinproxy, and prints requests per
# second, mean request time and time to the first response byte (connection setup: for
# pinproxy the CONNECT, the upstream handshake, the verdict and the client's handshake). Not a test: it prints figures and exits 0. Loopback only.
#
#   Benchmarks/h2-bench.sh [REQUESTS] [RUNS]     (default 20000 requests, 3 runs; median shown)
#
# Paths measured, each with h2load -c 1 -m 100 (100 streams in flight on one connection):
#   direct        h2load -> nghttpd
#   socat         h2load -> socat (plain TCP forwarder) -> nghttpd       (the forwarder's own cost)
#   pinproxy      h2load -> socat (CONNECT via pinproxy) -> pinproxy -> nghttpd
# h2load cannot speak to an HTTP proxy itself: socat's PROXY address sends the CONNECT, then
# forwards h2load's TLS bytes, so the pinproxy path pays the socat hop too; compare it with the
# socat line. pinproxy verifies the chain to a root made here and pins the leaf key, offers
# h2 upstream, and the client gets h2 (one upstream handshake per tunnel).
#
# Uses the release binary (.build-release), building it when missing; PINPROXY=path picks
# another. Needs h2load (nghttp2-client), nghttpd (nghttp2-server), socat and openssl: installed
# through apt when missing. KEEP=1 keeps the work directory.
set -euo pipefail

requests=${1:-20000}
runs=${2:-3}
root=$(cd "$(dirname "$0")/.." && pwd)
binary=${PINPROXY:-$root/.build-release/release/pinproxy}

missing=()
command -v h2load >/dev/null || missing+=(nghttp2-client)
command -v nghttpd >/dev/null || missing+=(nghttp2-server)
command -v socat >/dev/null || missing+=(socat)
command -v openssl >/dev/null || missing+=(openssl)
if [[ ${#missing[@]} -gt 0 ]]; then
    echo "installing ${missing[*]}" >&2
    sudo_=""; [[ $(id -u) -eq 0 ]] || sudo_=sudo
    $sudo_ env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    $sudo_ env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [[ ! -x $binary ]]; then
    echo "building $binary (swift build -c release --scratch-path .build-release)" >&2
    (cd "$root" && swift build -c release --scratch-path .build-release --product pinproxy >&2)
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/pinproxy-h2bench.XXXXXX")
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    [[ ${KEEP:-0} == 1 ]] || rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# Waits until something listens on 127.0.0.1:PORT (without connecting: a connection to the
# tunnel forwarder would open a tunnel).
wait_port() {
    for _ in $(seq 200); do
        [[ -n $(ss -Hltn "sport = :$1") ]] && return 0
        sleep 0.05
    done
    echo "nothing listens on 127.0.0.1:$1" >&2; exit 1
}

# A root, and a leaf for bench.test signed by it (ECDSA P-256).
cd "$work"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout root.key -out root.pem -days 2 \
    -subj "/CN=h2-bench root" -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout leaf.key -out leaf.csr -subj "/CN=bench.test" 2>/dev/null
printf 'subjectAltName=DNS:bench.test\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n' >leaf.ext
openssl x509 -req -in leaf.csr -CA root.pem -CAkey root.key -CAcreateserial -days 2 -extfile leaf.ext -out leaf.pem 2>/dev/null
cat leaf.pem root.pem >chain.pem
leaf_pin=$("$binary" pin leaf.pem | sed -n 's/.*public-key: \(sha256\/[^ ]*\).*/\1/p' | head -1)
root_pin=$("$binary" pin root.pem | sed -n 's/.*public-key: \(sha256\/[^ ]*\).*/\1/p' | head -1)
[[ -n $leaf_pin && -n $root_pin ]] || { echo "cannot read the pins" >&2; exit 1; }

mkdir -p htdocs
head -c 1024 /dev/urandom >htdocs/1k
head -c 65536 /dev/urandom >htdocs/64k

origin_port=$(free_port)
nghttpd -a 127.0.0.1 -d htdocs "$origin_port" leaf.key chain.pem >nghttpd.log 2>&1 &
pids+=($!)

proxy_port=$(free_port)
cat >pinproxy.toml <<EOF
[proxy]
listen = ["127.0.0.1:$proxy_port"]
ca_dir = "ca"
allow_ports = [$origin_port]
block_private_destinations = false

[resolve]
"bench.test" = "127.0.0.1"

[default]
action = "deny"

[hosts."bench.test"]
trust = ["root.pem"]
pin = "public-key"
pins = ["$leaf_pin", "$root_pin"]
EOF
"$binary" run --config pinproxy.toml 2>pinproxy.log &
pids+=($!)

forward_port=$(free_port)
socat "TCP-LISTEN:$forward_port,bind=127.0.0.1,reuseaddr,fork" "TCP:127.0.0.1:$origin_port" &
pids+=($!)
tunnel_port=$(free_port)
socat "TCP-LISTEN:$tunnel_port,bind=127.0.0.1,reuseaddr,fork" "PROXY:127.0.0.1:bench.test:$origin_port,proxyport=$proxy_port" &
pids+=($!)
for port in "$origin_port" "$proxy_port" "$forward_port" "$tunnel_port"; do wait_port "$port"; done

# The mean of an h2load timing row ("time for request:", ...), in milliseconds.
milliseconds() {
    awk -v row="$1" 'index($0, row) == 1 {
        sub(row, ""); v = $3; unit = v; sub(/[0-9.]+/, "", unit); sub(/[a-z]+$/, "", v)
        printf "%.2f", unit == "us" ? v / 1000 : unit == "s" ? v * 1000 : v }'
}

# One h2load run: prints "REQ_PER_S MEAN_MS FIRST_BYTE_MS PROTOCOL".
run_h2load() {
    local connect_port=$1 path=$2 out
    out=$(h2load -c 1 -m 100 -n "$requests" --connect-to="127.0.0.1:$connect_port" "https://bench.test:$origin_port/$path" 2>&1) || {
        echo "$out" >&2; return 1; }
    grep -q "succeeded, 0 failed, 0 errored" <<<"$out" || { echo "$out" >&2; echo "h2load saw failures" >&2; return 1; }
    local rps mean first proto
    rps=$(sed -n 's/^finished in .*, \([0-9.]*\) req\/s.*/\1/p' <<<"$out")
    mean=$(milliseconds "time for request:" <<<"$out")
    first=$(milliseconds "time to 1st byte:" <<<"$out")
    proto=$(sed -n 's/^Application protocol: //p' <<<"$out")
    echo "$rps $mean $first $proto"
}

median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

echo "h2load -c 1 -m 100 -n $requests, median of $runs runs; $(nproc) cores; binary $binary"
printf '%-10s %-6s %12s %16s %15s %s\n' path body "req/s" "mean request ms" "first byte ms" protocol
for path in 1k 64k; do
    for route in direct:$origin_port socat:$forward_port pinproxy:$tunnel_port; do
        name=${route%%:*} port=${route#*:}
        results=()
        for _ in $(seq "$runs"); do results+=("$(run_h2load "$port" "$path")"); done
        rps=$(printf '%s\n' "${results[@]}" | awk '{ print $1 }' | median)
        mean=$(printf '%s\n' "${results[@]}" | awk '{ print $2 }' | median)
        first=$(printf '%s\n' "${results[@]}" | awk '{ print $3 }' | median)
        proto=$(printf '%s\n' "${results[@]}" | awk '{ print $4 }' | head -1)
        printf '%-10s %-6s %12s %16s %15s %s\n' "$name" "$path" "$rps" "$mean" "$first" "$proto"
    done
done
tunnels=$(grep -c 'event=connection .*outcome=allowed.*alpn=h2' pinproxy.log || true)
echo "pinproxy: $tunnels tunnel(s) allowed with alpn=h2, $(grep -c 'outcome=refused' pinproxy.log || true) refused"
