"""Reload under load: while a large download and several keep-alive tunnels stay open, the
config is reloaded many times, good and broken files alternating.

- no open tunnel is cut, and every byte arrives (the download is checked by SHA-256, each
  keep-alive response byte for byte);
- after every reload, new connections follow the newest good policy: www.api.test flips
  between allowed and host-denied with each good file, while each broken file would have
  flipped it the other way (and fails with FILE:LINE, changing nothing).
"""

from __future__ import annotations

import hashlib
import http.client

import pytest

import origin as originlib
from proxy_harness import (
    API,
    Tunnel,
    expect_refusal,
    make_proxy,  # noqa: F401 (fixture)
    pinned_entry,
)

WWW = "www.api.test"
RELOADS = 24  # half good, half broken
CHUNK = originlib.BIG_SIZE // RELOADS + 1
KEEPALIVE_TUNNELS = 4


@pytest.fixture
def api_origin(pki):
    o = originlib.TLSOrigin(pki.path("api-chain.pem"), pki.path("api.key"), name="reload-under-load")
    yield o
    o.close()


def www_allowed(proxy, port: int) -> None:
    with Tunnel(proxy, WWW, port) as t:
        assert t.get("/small") == (200, originlib.SMALL_BODY)


def test_reloads_under_load_cut_nothing_and_apply_the_newest_good_policy(make_proxy, pki, api_origin):
    port = api_origin.port
    good = pinned_entry(pki, "api", "int-a")
    p = make_proxy(proxy={"allow_ports": [port]}, resolve={API: "127.0.0.1", WWW: "127.0.0.1"},
                   hosts={API: good, WWW: good})

    # The download: GET /big (8 MiB), read a slice after each reload.
    download = Tunnel(p, API, port)
    download.conn.request("GET", "/big", headers={"Host": f"{API}:{port}"})
    response = download.conn.getresponse()
    assert response.status == 200
    digest, received = hashlib.sha256(), 0

    keepalive = [Tunnel(p, API, port) for _ in range(KEEPALIVE_TUNNELS)]
    www_is_allowed = True
    try:
        for i in range(RELOADS):
            broken = i % 2 == 1
            if broken:
                # Would flip www.api.test, but the file does not load.
                p.hosts[WWW] = {"action": "deny"} if www_is_allowed else good
                p.write_config(p.render() + f'\n[hosts."{WWW}"]\nmin_tls = "1.1"\n')
            else:
                www_is_allowed = not www_is_allowed
                p.hosts[WWW] = good if www_is_allowed else {"action": "deny"}
                p.write_config()
            line = p.reload()
            assert line.get("outcome") == ("failed" if broken else "ok"), line.raw
            if broken:
                assert f"{p.config_path}:" in line.get("error", ""), line.raw

            # New connections: the newest good policy.
            if www_is_allowed:
                www_allowed(p, port)
            else:
                expect_refusal(p, WWW, port, "host-denied")

            # Open tunnels: untouched.
            chunk = response.read(CHUNK)
            digest.update(chunk)
            received += len(chunk)
            for n, t in enumerate(keepalive):
                size = 1000 * (i + 1) + n
                assert t.get(f"/bytes/{size}") == (200, originlib.big_body()[:size]), f"tunnel {n} after reload {i + 1}"

        rest = response.read()
        digest.update(rest)
        received += len(rest)
        assert received == originlib.BIG_SIZE
        assert digest.hexdigest() == originlib.big_sha256(), "the download was corrupted across reloads"
        assert download.get("/small") == (200, originlib.SMALL_BODY)  # and its tunnel still serves
    except (http.client.HTTPException, OSError) as e:
        raise AssertionError(f"a tunnel broke during the reloads: {e!r}\n{p.describe()}") from e
    finally:
        for t in keepalive + [download]:
            t.close()

    ports = {t.client_port for t in keepalive + [download]}
    closed = [p.wait_for_log(lambda l, c=c: l.get("event") == "tunnel-closed" and l.get("client") == f"127.0.0.1:{c}",
                             what=f"tunnel-closed for 127.0.0.1:{c}") for c in ports]
    for line in closed:
        assert "upstream closed" not in line.get("detail", ""), f"a tunnel was closed from the upstream side: {line.raw}"
    big = next(l for l in closed if l["client"] == f"127.0.0.1:{download.client_port}")
    assert int(big["bytes_down"]) >= originlib.BIG_SIZE, big.raw
    reloads = [l for l in p.logs() if l.get("event") == "reload"]
    assert [l.get("outcome") for l in reloads] == ["ok", "failed"] * (RELOADS // 2)
    p.assert_alive("after the reloads")


@pytest.mark.parametrize("text", ["[=]\n", "[\n", "[\x1b]\n", "x = [}]\n"],
                         ids=["header-without-key", "bracket-ends-line", "control-character", "brace-in-array"])
def test_reload_of_text_the_toml_parser_aborts_on_keeps_serving(make_proxy, pki, api_origin, text):
    """toml++ (under TOMLKit) aborted the process on these (found by the config fuzzer): a
    SIGHUP with such a file killed the daemon. Now it is a failed reload like any other."""
    port = api_origin.port
    p = make_proxy(proxy={"allow_ports": [port]}, resolve={API: "127.0.0.1"}, hosts={API: pinned_entry(pki, "api", "int-a")})
    with Tunnel(p, API, port) as t:
        p.write_config(p.render() + "\n" + text)
        line = p.reload()
        assert line.get("outcome") == "failed", line.raw
        assert f"{p.config_path}:" in line.get("error", ""), line.raw
        p.assert_alive("after reloading a file the TOML parser used to abort on")
        assert t.get("/small") == (200, originlib.SMALL_BODY)
    with Tunnel(p, API, port) as t:
        assert t.get("/small") == (200, originlib.SMALL_BODY)
