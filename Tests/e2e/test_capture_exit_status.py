"""What a script sees of a refusal under the egress lock (issue 33, docs/deployment.md, "Scripts
under the lock"): the refusal is an HTTP 403 inside TLS, so a client that does not fail on an
HTTP error status takes it for success. Measured here with the real clients, as user nobody in
a fresh network namespace, against a host whose pin does not match: curl -sS exits 0, curl -f
and --fail-with-body 22, wget 8, Python's urllib 1 (an uncaught HTTPError), Node's fetch 0 unless
the script tests `response.ok`.
"""

from __future__ import annotations

import shutil
import sys

from capture_harness import capture, public_dir  # noqa: F401 (fixtures)
from proxy_harness import PIN_X, PIN_Y

URL = "https://www.api.test/small"


def test_exit_status_of_each_client_for_a_refusal(capture, pki):
    capture.origin("api")
    proxy = capture.proxy(hosts={"www.api.test": {"trust": ["root-a.pem"], "pin": "public-key", "pins": [PIN_X, PIN_Y]}})
    proxy.lock()
    ca = str(capture.ca(proxy))
    hosts = {"www.api.test": "127.0.0.1"}
    node = shutil.which("node") or "node"
    clients = {
        "curl -sS": ["curl", "-sS", "--cacert", ca, URL],
        "curl -fsS": ["curl", "-fsS", "--cacert", ca, URL],
        "curl --fail-with-body": ["curl", "-sS", "--fail-with-body", "--cacert", ca, URL],
        "wget": ["wget", "-q", "-O", "-", f"--ca-certificate={ca}", URL],
        "python urllib": [sys.executable, "-c",
                          "import ssl, sys, urllib.request; "
                          f"urllib.request.urlopen(sys.argv[1], context=ssl.create_default_context(cafile={ca!r}))", URL],
        "node fetch": [node, "-e", "fetch(process.argv[1]).then(r => r.text())", URL],
        "node fetch, r.ok tested": [node, "-e", "fetch(process.argv[1]).then(r => { if (!r.ok) process.exit(1) })", URL],
    }
    statuses, outputs = {}, {}
    for name, argv in clients.items():
        env = {"NODE_EXTRA_CA_CERTS": ca} if argv[0] == node else None
        done = capture.client(argv, hosts=hosts, env=env)
        statuses[name] = done.returncode
        outputs[name] = done.stderr[-600:]
    assert statuses == {"curl -sS": 0, "curl -fsS": 22, "curl --fail-with-body": 22, "wget": 8, "python urllib": 1,
                        "node fetch": 0, "node fetch, r.ok tested": 1}, "\n".join(f"{k}: {statuses[k]} {outputs[k]}" for k in statuses)
    refusals = [l for l in proxy.decisions(listener="transparent") if l.get("outcome") == "refused"]
    assert len(refusals) == len(clients) and {l.get("reason") for l in refusals} == {"pin-mismatch"}, refusals
