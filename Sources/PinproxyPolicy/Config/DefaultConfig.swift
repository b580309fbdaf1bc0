/// The built-in default config: the text of `config/pinproxy.toml` (a test keeps them equal).
public enum DefaultConfig {
    public static let text = #"""
# pinproxy configuration: the reference for every key, and the built-in default
# (`pinproxy run` without --config uses exactly this file's settings).
#
# Point clients at the proxy:   HTTPS_PROXY=http://127.0.0.1:3128
# Check a config:               pinproxy check --config FILE
# Compute pins:                 pinproxy pin cert.pem   |   pinproxy pin --connect HOST
# Paths in this file are relative to the file's own directory.

[proxy]
# Addresses to accept CONNECT on (IP literal and port; IPv6 as "[::1]:3128").
listen = ["127.0.0.1:3128"]

# Where the local interception CA is created and kept (key 0600, directory 0700).
# Unset: $STATE_DIRECTORY under systemd, else /var/lib/pinproxy for root,
# else $XDG_STATE_HOME/pinproxy or ~/.local/state/pinproxy.
# ca_dir = "/var/lib/pinproxy"

# Destination ports a CONNECT may name (an entry's `ports` overrides this).
allow_ports = [443]

# Refuse destinations that resolve to loopback, RFC 1918, link-local, CGNAT,
# unique-local, unspecified or multicast addresses (destination-denied).
block_private_destinations = true

# Prometheus /metrics and /healthz (off unless set).
# metrics_listen = "127.0.0.1:9128"

# "logfmt" or "json": one line per decision and per closed tunnel, on stderr.
# log_format = "logfmt"

# How a refused connection is answered. "connect": an HTTP error status on the CONNECT, with
# the reason in its status line and a Pinproxy-Refusal header. "in-tls": for clients that
# print only a CONNECT status (curl, git), a 200, then the client's TLS completed with a leaf
# from the local CA and an HTTP 403/502/504 inside it whose body explains the refusal (the
# client sees a TLS session that succeeded; no byte goes to or comes from the refused server).
# refusal = "connect"

# Where `pinproxy run` writes its process id, so that `pinproxy reload --config FILE` can
# signal this daemon and no other (not needed under systemd: systemctl reload pinproxy).
# pid_file = "/run/user/1000/pinproxy.pid"

# Pin-failure reports (RFC 7469 JSON, plus pinproxy's reason and entry) for every refusal, and
# every report-only "would refuse", by a certificate reason. "file:PATH" appends JSON lines
# (reopened on SIGHUP, for logrotate) to a regular file of the daemon's user with one link: a
# symbolic link, FIFO or hard link at PATH is refused and logged. "https://HOST[:PORT]/PATH"
# POSTs them in batches (a JSON array) from a thread of their own, with retries; the collector
# is verified like any other host (its [hosts] entry applies). At most 10 reports per host a
# minute and report_rate_limit for all hosts together; a full queue drops. Takes effect at start.
# report_to = ["file:/var/log/pinproxy/reports.jsonl", "https://reports.example.com/pinproxy"]
# report_rate_limit = 600            # reports a minute, all hosts together
# report_file_max_bytes = 67108864   # a file stops growing here (64 MiB); reports are dropped
#                                    # until it is reopened (SIGHUP): pinproxy never renames it

# verify_command (a policy key, below) runs off the event loops: at most this many at once,
# each killed with its process group after its timeout (the connection is then refused), exit
# statuses reused this long (a reload forgets them).
# verify_command_timeout = 5
# verify_command_concurrency = 4
# verify_command_cache = 300

# Whether pin-failure reports carry the client's identity (uid, user, unit, program): off by
# default, since user names and paths would go to the collector.
# report_client_identity = false

# Event loops; default one per core.
# workers = 2

# Limits and timeouts (seconds). These are the defaults.
# request_timeout = 10       # whole CONNECT request, from accept to the blank line
# dns_timeout = 10           # resolving one destination
# connect_timeout = 10       # TCP connect, all of the upstream's addresses together
# handshake_timeout = 10     # each TLS handshake (upstream, then client)
# idle_timeout = 300         # a tunnel with no traffic either way is closed
# drain_timeout = 30         # on SIGTERM, how long open tunnels may finish
# admin_timeout = 10         # each metrics_listen request in total, from accept to the answer
# max_connections = 10000    # open client connections at most (default: what the open-file limit allows)
# relay_buffer_bytes = 262144  # per direction, before reading pauses
# client_identity_timeout = 2  # with [clients]: the user's name, unit and program, looked up off the loop

# The egress lock's listener (docs/deployment.md): clients that `pinproxy egress apply`
# redirects arrive here without CONNECT; the host comes from their SNI. One 127.0.0.1 and
# one [::1] address (the [::1] one may be left out where IPv6 is off). A privileged port, so
# that no other user can take it: under systemd pinproxy-transparent.socket binds it, else
# pinproxy needs CAP_NET_BIND_SERVICE; restart-only.
# transparent_listen = ["127.0.0.1:8", "[::1]:8"]

# [resolve]
# Names answered here instead of by DNS: one address or a list. These answers are checked
# like DNS answers: a private address here needs block_private_destinations = false.
# "api.internal.test" = "127.0.0.1"
# "dual.internal.test" = ["127.0.0.1", "::1"]

# [capture]
# The egress lock (`pinproxy egress print|apply|remove|status`): an nftables table that sends
# this host's outgoing HTTPS to transparent_listen. These are the defaults.
# ports = [443]                # outgoing TCP to these is redirected
# local = false                # true: this host's own addresses are captured too
# block_quic = true            # outgoing UDP to these ports is rejected (HTTP/3 falls back to TCP)
# exempt_users = ["pinproxy"]  # their processes go out uncaptured: the user pinproxy runs as
# forward_interfaces = []      # containers' bridges ("docker0", "br-*", "cni*"): their forwarded TCP
#                              # is captured too (needs transparent_listen on 0.0.0.0:8 and [::]:8)

[default]
# The policy for hosts that no [hosts."..."] entry matches. Host entries do not
# inherit from it: a key an entry leaves out takes the default shown below.
action = "verify"
trust = "system"

# Policy keys, valid here and in every [hosts."PATTERN"] entry:
#
# action             "verify" (default) | "deny" (refuse always: host-denied)
#                    | "allow-insecure" (no checks at all; warned by check, logged per connection)
# trust              "system" (default, the OS trust store) | "pinned" (the pinned certificates
#                    are the only anchors; a pinned leaf or intermediate may be the anchor)
#                    | "none" (the chain is not verified; pins required, only the leaf may match)
#                    | ["anchors/", "root.pem"] (files or directories; every listed certificate
#                    is an anchor, self-signed or not) | ["system", "corp-root.pem"] (the OS
#                    store plus the listed certificates)
# validate_host      true (default): the CONNECT host must match the leaf's subjectAltName
#                    (DNS, or IP for IP literals; no CN fallback). false requires pins.
# pin                "none" (default) | "public-key" | "certificate"
# pins               ["sha256/BASE64", ...]: public-key = SHA-256 of the DER SubjectPublicKeyInfo,
#                    certificate = SHA-256 of the certificate DER. Keep a backup pin.
# certificates       ["pinned/leaf.pem", "pinned/"]: pinned certificates (PEM or DER, bundles,
#                    directories of .pem .crt .cer .der); with pin = "public-key" their keys are pinned.
# enforce            true (default) | false: report-only for pin-mismatch, revocation-unknown,
#                    host-denied and port-denied (allowed, logged as "would refuse", and the
#                    200 carries "Pinproxy-Verdict: would-refuse REASON"). The chain, its dates,
#                    the host name and revocation are always enforced. Not allowed with
#                    trust = "none" or validate_host = false.
# expires            2027-01-31: after this date pins are not enforced (chain and host still are);
#                    only where trust is "system" or a list and validate_host = true.
# include_subdomains false (default) | true: an exact-name entry also matches every subdomain.
# ports              [443, 8443]: default proxy.allow_ports.
# min_tls            "1.2" (default) | "1.3"
# mode               "intercept" (default) | "tunnel": host entries only; the client's TLS is
#                    relayed as it is, unverified (for programs that pin their own certificates or
#                    present their own client certificate). No pins, verify_command, revocation,
#                    client_certificate or enforce = false with it; `check` warns for each one.
# revocation         "off" (default) | "crl" (leaf checked against its issuer's CRL from `crls`)
#                    | "ocsp-staple" (the server must staple a valid OCSP response)
# crls               ["crl/issuer.crl"]: CRL files (PEM or DER), with revocation = "crl".
# require_web_pki_profile
#                    true (default) | false: with trust "system" or a list, the chain must also
#                    meet the web-PKI issuance rules (extendedKeyUsage serverAuth, key
#                    identifiers, the CN among the SANs; docs/trust-decisions.md). false for a
#                    private CA whose certificates lack them.
# client_certificate "client/api.pem": PEM, the certificate then its chain, and
# client_key         "client/api.key": its key, presented to an upstream that asks for a client
#                    certificate (mutual TLS).
#                    The key: unencrypted PEM, mode 0600 or 0400 (or from systemd's LoadCredential=,
#                    under $CREDENTIALS_DIRECTORY). Every local process that reaches the entry uses it.
# verify_command     ["/usr/local/libexec/check-ct", "--strict"]: your own check, run after the
#                    built-in ones passed, with the verified chain (PEM, leaf first) on stdin and
#                    PINPROXY_HOST / PINPROXY_PORT set. Exit 0 allows; anything else (or no answer
#                    within verify_command_timeout) refuses: custom-check, with the first line of
#                    its stderr. It can only refuse more. enforce = false makes it report-only.
#
# Host patterns: an exact name, "*.example.com" (exactly one more label), or an IP literal.
# Precedence: exact > "*." > include_subdomains (longest suffix) > [default].

# [hosts."api.example.com"]
# pin = "public-key"
# pins = [
#   "sha256/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",  # current key
#   "sha256/BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBA=",  # backup key
# ]
#
# [hosts."internal.example.test"]
# trust = "pinned"
# pin = "certificate"
# certificates = ["pinned/internal.pem"]
#
# [hosts."*.cdn.example.com"]        # trying out pins: a pin mismatch is only logged
# pin = "public-key"
# pins = ["sha256/...", "sha256/..."]
# enforce = false
#
# [hosts."tracker.example.com"]
# action = "deny"

# [clients."SELECTOR"]
# Which local clients may reach which hosts: the kernel says who owns each client's socket.
# Selectors: uid:N, user:NAME (looked up when the config loads), exe:/absolute/path (the
# program: an identification, not a confinement), unit:NAME.service (system units only),
# unknown (a local socket that was not found), remote (a peer that is not this host).
# Every matching section applies: a host must be in each one's allow (no allow: no limit) and
# in no one's deny. Once any section exists, unknown clients are refused unless
# [clients."unknown"] says otherwise; remote clients are limited only by [clients."remote"].
# Refusals say client-denied (403); enforce = false makes a section's refusals report-only.
#
# [clients."unit:backup.service"]
# allow = ["backup.example.com", "*.s3.amazonaws.com"]
# deny = ["public.s3.amazonaws.com"]  # deny wins over allow
#
# [clients."user:www-data"]
# allow = []                      # nothing
#
# [clients."exe:/usr/bin/git"]
# allow = ["git.example.com"]
# enforce = false                 # report-only while rolling out

"""#
}
