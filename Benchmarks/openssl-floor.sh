#!/usr/bin/env bash
# What OpenSSL itself spends per TLS 1.3 handshake on this machine, now: the yardstick for
# pinproxy's CPU per new connection. `openssl s_server` presents an ECDSA P-256 leaf (as
# pinproxy's minted leaves are) on loopback; `openssl s_time -new` makes full handshakes
# against it for SECONDS; the server's CPU (user + system, from /proc) is divided by the
# handshakes. pinproxy does one such handshake per connection as a server, plus a resumed one
# as a client, the verdict, and the relay. Not a test: it prints one line and exits 0.
#
#   Benchmarks/openssl-floor.sh [SECONDS]
set -euo pipefail

seconds=${1:-10}
work=$(mktemp -d "${TMPDIR:-/tmp}/pinproxy-floor.XXXXXX")
server=
cleanup() {
    [[ -n $server ]] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=localhost \
    -keyout "$work/key.pem" -out "$work/cert.pem" 2>/dev/null
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
openssl s_server -accept "127.0.0.1:$port" -cert "$work/cert.pem" -key "$work/key.pem" -tls1_3 -quiet \
    >/dev/null 2>&1 &
server=$!
for _ in $(seq 100); do
    python3 -c "import socket; socket.create_connection(('127.0.0.1', $port), 1).close()" 2>/dev/null && break
    sleep 0.1
done

cpu_ticks() { awk '{print $14 + $15}' "/proc/$server/stat"; }
before=$(cpu_ticks)
report=$(openssl s_time -connect "127.0.0.1:$port" -new -time "$seconds" 2>&1 | grep -m1 'connections in')
after=$(cpu_ticks)
handshakes=${report%% *}
python3 - "$before" "$after" "$handshakes" "$(getconf CLK_TCK)" <<'PY'
import sys
before, after, handshakes, tick = (int(v) for v in sys.argv[1:])
cpu = (after - before) / tick
print(f"openssl s_server: {handshakes} full TLS 1.3 handshakes (ECDSA P-256 leaf), "
      f"{cpu * 1000 / handshakes:.3f} ms of server CPU each")
PY
