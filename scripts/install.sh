#!/bin/sh
# Installs pinproxy as a systemd service:
#   - builds the release binary (swift build -c release) and installs it as
#     $PREFIX/bin/pinproxy (PREFIX defaults to /usr/local);
#   - installs systemd/pinproxy.service, pinproxy.socket, pinproxy-egress.service
#     and the transparent listeners' pinproxy-transparent{,6}.socket into
#     /etc/systemd/system/;
#   - creates the static system user pinproxy the service runs as (useradd
#     --system; not under DESTDIR, where it prints the command instead);
#   - installs config/pinproxy.toml as /etc/pinproxy/pinproxy.toml unless that
#     file already exists (an existing config is never overwritten);
#   - installs the man pages (pinproxy.1, pinproxy-COMMAND.1, made from the
#     binary's own help by scripts/manpages) under $PREFIX/share/man/man1, and the
#     bash, zsh and fish completions under $PREFIX/share;
#   - prints the systemctl commands that enable it. It runs no systemctl itself.
#
#   scripts/install.sh --uninstall   removes what it installed (the binary, the
#     units, the man pages and completions); keeps /etc/pinproxy and the CA in
#     /var/lib/pinproxy, and says so. Stop the service first.
#
# Environment:
#   DESTDIR=/tmp/stage      stage everything under this root instead of /
#                           (no root needed, nothing outside it is touched)
#   PREFIX=/usr/local       where bin/pinproxy goes; the unit's ExecStart follows
#   PINPROXY_BINARY=path    install this binary instead of building one
#
# Re-running it upgrades the binary and the units and keeps the config.
set -eu

repo=$(cd "$(dirname "$0")/.." && pwd)
destdir=${DESTDIR:-}
prefix=${PREFIX:-/usr/local}
unitdir=/etc/systemd/system
confdir=/etc/pinproxy
mandir=$prefix/share/man/man1
man5dir=$prefix/share/man/man5
bashdir=$prefix/share/bash-completion/completions
zshdir=$prefix/share/zsh/site-functions
fishdir=$prefix/share/fish/vendor_completions.d
uninstall=false
case ${1:-} in
    --uninstall) uninstall=true ;;
    "") ;;
    *) echo "usage: scripts/install.sh [--uninstall]" >&2; exit 2 ;;
esac

case $prefix in
    /*) ;;
    *) echo "install.sh: PREFIX must be an absolute path, not '$prefix'" >&2; exit 2 ;;
esac
if [ -n "$destdir" ]; then
    case $destdir in
        /*) ;;
        *) destdir=$(pwd)/$destdir ;;
    esac
fi
if [ -z "$destdir" ] && [ "$(id -u)" -ne 0 ]; then
    echo "install.sh: installing into / needs root (or set DESTDIR= to stage elsewhere)" >&2
    exit 1
fi

if $uninstall; then
    # The egress lock goes first: without its daemon it would leave the host without HTTPS.
    if [ -z "$destdir" ]; then
        if command -v systemctl >/dev/null 2>&1; then systemctl stop pinproxy-egress.service 2>/dev/null || true; fi
        if command -v nft >/dev/null 2>&1 && nft list table inet pinproxy >/dev/null 2>&1; then
            echo "==> lifting the egress lock (nft delete table inet pinproxy)"
            nft delete table inet pinproxy
        fi
    fi
    for file in "$destdir$prefix/bin/pinproxy" "$destdir$unitdir/pinproxy.service" "$destdir$unitdir/pinproxy.socket" \
        "$destdir$unitdir/pinproxy-egress.service" "$destdir$unitdir/pinproxy-transparent.socket" \
        "$destdir$unitdir/pinproxy-transparent6.socket" \
        "$destdir$bashdir/pinproxy" "$destdir$zshdir/_pinproxy" "$destdir$fishdir/pinproxy.fish" \
        "$destdir$mandir"/pinproxy.1 "$destdir$mandir"/pinproxy-*.1 "$destdir$man5dir"/pinproxy.toml.5; do
        if [ -e "$file" ]; then
            echo "==> removing $file"
            rm -f "$file"
        fi
    done
    cat <<EOF

Uninstalled. Kept: $confdir (your config) and the local CA in /var/lib/pinproxy
(clients that trust it still do: remove it from them, e.g. from
/usr/local/share/ca-certificates, then update-ca-certificates). If the service was
enabled, run:  systemctl disable --now pinproxy-egress.service pinproxy.socket pinproxy-transparent.socket pinproxy-transparent6.socket pinproxy.service; systemctl daemon-reload
EOF
    exit 0
fi

# 1. The binary.
if [ -n "${PINPROXY_BINARY:-}" ]; then
    binary=$PINPROXY_BINARY
else
    "$repo/scripts/setup"
    . "$repo/scripts/build-info"
    echo "==> swift build -c release --product pinproxy"
    (cd "$repo" && swift build -c release --product pinproxy)
    binary=$(cd "$repo" && swift build -c release --show-bin-path)/pinproxy
fi
if [ ! -x "$binary" ]; then
    echo "install.sh: no executable pinproxy at $binary" >&2
    exit 1
fi
echo "==> $destdir$prefix/bin/pinproxy"
install -d -m 0755 "$destdir$prefix/bin"
install -m 0755 "$binary" "$destdir$prefix/bin/pinproxy"

# 2. The units (ExecStart and ExecReload name the installed binary).
echo "==> $destdir$unitdir/pinproxy.service, pinproxy.socket, pinproxy-egress.service, pinproxy-transparent{,6}.socket"
install -d -m 0755 "$destdir$unitdir"
sed "s#^\(Exec[A-Za-z]*=\)/usr/local/bin/pinproxy #\1$prefix/bin/pinproxy #" \
    "$repo/systemd/pinproxy.service" > "$destdir$unitdir/pinproxy.service.tmp"
chmod 0644 "$destdir$unitdir/pinproxy.service.tmp"
mv -f "$destdir$unitdir/pinproxy.service.tmp" "$destdir$unitdir/pinproxy.service"
install -m 0644 "$repo/systemd/pinproxy.socket" "$destdir$unitdir/pinproxy.socket"
install -m 0644 "$repo/systemd/pinproxy-transparent.socket" "$destdir$unitdir/pinproxy-transparent.socket"
install -m 0644 "$repo/systemd/pinproxy-transparent6.socket" "$destdir$unitdir/pinproxy-transparent6.socket"
sed "s#^\(Exec[A-Za-z]*=\)/usr/local/bin/pinproxy #\1$prefix/bin/pinproxy #" \
    "$repo/systemd/pinproxy-egress.service" > "$destdir$unitdir/pinproxy-egress.service.tmp"
chmod 0644 "$destdir$unitdir/pinproxy-egress.service.tmp"
mv -f "$destdir$unitdir/pinproxy-egress.service.tmp" "$destdir$unitdir/pinproxy-egress.service"

# The static user the service runs as: the egress lock exempts its processes by uid.
useradd_command="useradd --system --user-group --home-dir /var/lib/pinproxy --no-create-home --shell /usr/sbin/nologin pinproxy"
if [ -n "$destdir" ]; then
    echo "==> not creating the user pinproxy under DESTDIR; on the target system run: $useradd_command"
elif id -u pinproxy >/dev/null 2>&1; then
    echo "==> user pinproxy exists"
else
    echo "==> $useradd_command"
    $useradd_command
fi

# 3. A starter config, only when there is none.
install -d -m 0755 "$destdir$confdir"
if [ -e "$destdir$confdir/pinproxy.toml" ]; then
    echo "==> keeping existing $destdir$confdir/pinproxy.toml"
else
    echo "==> $destdir$confdir/pinproxy.toml (starter config)"
    install -m 0644 "$repo/config/pinproxy.toml" "$destdir$confdir/pinproxy.toml"
fi

# 4. Man pages, from the binary's own help.
echo "==> $destdir$mandir/pinproxy.1, pinproxy-COMMAND.1, $destdir$man5dir/pinproxy.toml.5"
pages=$(mktemp -d)
trap 'rm -rf "$pages"' EXIT
"$repo/scripts/manpages" "$binary" "$pages"
install -d -m 0755 "$destdir$mandir"
install -m 0644 "$pages"/*.1 "$destdir$mandir/"
install -d -m 0755 "$destdir$man5dir"
install -m 0644 "$pages"/pinproxy.toml.5 "$destdir$man5dir/"

# 5. Shell completions.
echo "==> completions for bash, zsh and fish under $destdir$prefix/share"
install -d -m 0755 "$destdir$bashdir" "$destdir$zshdir" "$destdir$fishdir"
"$binary" --generate-completion-script bash > "$destdir$bashdir/pinproxy"
"$binary" --generate-completion-script zsh > "$destdir$zshdir/_pinproxy"
"$binary" --generate-completion-script fish > "$destdir$fishdir/pinproxy.fish"
chmod 0644 "$destdir$bashdir/pinproxy" "$destdir$zshdir/_pinproxy" "$destdir$fishdir/pinproxy.fish"

cat <<EOF

Installed. To start pinproxy now and at every boot:

    systemctl daemon-reload && systemctl enable --now pinproxy

Then point clients at it:  HTTPS_PROXY=http://127.0.0.1:3128
To send every process's HTTPS through it instead (the egress lock), set
transparent_listen in [proxy] and [capture], then:

    systemctl stop pinproxy
    systemctl enable --now pinproxy-transparent.socket pinproxy-transparent6.socket
    systemctl enable --now pinproxy pinproxy-egress

Edit $confdir/pinproxy.toml, check it with
'$prefix/bin/pinproxy check --config $confdir/pinproxy.toml',
and apply it with 'systemctl reload pinproxy'. See man pinproxy.
EOF
if [ -n "$destdir" ]; then
    echo "(staged under $destdir: copy the tree to / before running systemctl)"
fi
