"""`pinproxy run`: the refusal's status line says what happened.

Python's http.client (so urllib, requests and pip) and wget print only the CONNECT answer's
reason phrase, so the phrase carries the reason and the host:
`HTTP/1.1 403 pinproxy: pin-mismatch for api.test`. It is one line of printable ASCII,
bounded in length whatever the host holds; the `Pinproxy-Refusal` header and the text body
stay.
"""

from __future__ import annotations

import re
import urllib.error

import pytest

from proxy_harness import (
    API,
    PIN_X,
    PIN_Y,
    connect,
    expect_refusal,
    make_proxy,  # noqa: F401 (fixture)
    origins,  # noqa: F401 (fixture)
    raw_exchange,
    urllib_get,
)

#: At most this many bytes in a refusal's status line.
MAX_STATUS_LINE = 160


@pytest.fixture
def proxy(make_proxy, origins, pki):
    return make_proxy(
        proxy={"allow_ports": [origins.api.port]},
        hosts={API: {"trust": ["root-a.pem"], "pin": "public-key", "pins": [PIN_X, PIN_Y]}},
    )


def test_pin_mismatch_status_line_names_reason_and_host(proxy, origins):
    ans, _ = expect_refusal(proxy, API, origins.api.port, "pin-mismatch")
    assert ans.status_line == f"HTTP/1.1 403 pinproxy: pin-mismatch for {API}", ans.status_line
    assert f"pinproxy refused {API}:{origins.api.port}: pin-mismatch" in ans.text


def test_urllib_error_carries_the_reason(proxy, origins):
    with pytest.raises(urllib.error.URLError) as caught:
        urllib_get(proxy, f"https://{API}:{origins.api.port}/small")
    assert f"403 pinproxy: pin-mismatch for {API}" in str(caught.value), str(caught.value)


def test_request_without_a_target_has_reason_only(proxy):
    ex = raw_exchange(proxy.port, b"CONNECT nonsense HTTP/1.1\r\n\r\n")
    assert ex.answer.status_line == "HTTP/1.1 400 pinproxy: bad-request", ex.answer.status_line


def test_long_host_is_cut_and_the_line_bounded(proxy):
    host = ".".join(["a" * 60] * 4) + ".test"  # 249 characters, a valid name no entry allows
    c = connect(proxy.port, host, 443)
    line = c.answer.status_line
    assert c.answer.status == 403 and c.answer.refusal == "host-denied", str(c.answer)
    assert line.startswith("HTTP/1.1 403 pinproxy: host-denied for aaaa"), line
    assert line.endswith("..."), line
    assert len(line.encode()) <= MAX_STATUS_LINE, len(line)
    assert re.fullmatch(r"[\x20-\x7e]+", line), repr(line)


def test_ipv6_literal_is_shown_in_brackets(proxy):
    c = connect(proxy.port, "::1", 443)
    assert c.answer.status_line.startswith("HTTP/1.1 403 pinproxy: "), c.answer.status_line
    assert c.answer.status_line.endswith(" for [::1]"), c.answer.status_line
