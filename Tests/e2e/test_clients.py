"""Real clients through pinproxy, each pointed at it the way the README's client table says,
against a static HTTPS origin on loopback (a file, a PEP 503 simple index, a dumb-HTTP git
repository). For each: an allowed request works, and a request refused by pin prints the
reason word: from the CONNECT answer's reason phrase (wget, urllib, requests, pip) or, for
clients that print only a CONNECT status (curl, git), from the page `refusal = "in-tls"`
returns inside TLS.

Hosts: www.api.test is pinned to the origin's key (allowed); api.test is pinned to two
other keys (pin-mismatch). Both resolve to the one origin on 127.0.0.1.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from proxy_harness import API, PIN_X, PIN_Y, TIMEOUT, clean_env, module_proxies, urllib_get  # noqa: F401
from static_origin import StaticTLSOrigin

ALLOWED = "www.api.test"
WHEEL = "pinproxy_demo-1.0-py3-none-any.whl"
CLIENT_TIMEOUT = 60


def build_wheel() -> bytes:
    """A minimal pure-Python wheel of pinproxy-demo 1.0 (what pip needs to download it)."""
    files = {
        "pinproxy_demo/__init__.py": b"VALUE = 1\n",
        "pinproxy_demo-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: pinproxy-demo\nVersion: 1.0\n",
        "pinproxy_demo-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: pinproxy-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(
        f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}\n"
        for name, data in files.items()) + "pinproxy_demo-1.0.dist-info/RECORD,,\n"
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
        z.writestr("pinproxy_demo-1.0.dist-info/RECORD", record)
    return out.getvalue()


def git_env(home: Path, **extra) -> dict[str, str]:
    return clean_env(HOME=str(home), GIT_CONFIG_NOSYSTEM="1", GIT_TERMINAL_PROMPT="0", **extra)


@pytest.fixture(scope="module")
def site(tmp_path_factory, pki):
    """The served directory: a file, a simple index with one wheel, a dumb-HTTP git repo."""
    root = tmp_path_factory.mktemp("site")
    (root / "hello.txt").write_text("hello through pinproxy\n")
    (root / "files").mkdir()
    (root / "files" / WHEEL).write_bytes(build_wheel())
    (root / "simple" / "pinproxy-demo").mkdir(parents=True)
    (root / "simple" / "index.html").write_text('<!DOCTYPE html><html><body><a href="pinproxy-demo/">pinproxy-demo</a></body></html>\n')
    (root / "simple" / "pinproxy-demo" / "index.html").write_text(
        f'<!DOCTYPE html><html><body><a href="../../files/{WHEEL}">{WHEEL}</a></body></html>\n')
    git = shutil.which("git")
    if git:
        home = tmp_path_factory.mktemp("githome")
        work = tmp_path_factory.mktemp("gitwork")
        env = git_env(home)
        run = lambda *a, cwd=work: subprocess.run([git, *a], cwd=cwd, env=env, check=True, capture_output=True, timeout=TIMEOUT)
        run("init", "-q", "-b", "main")
        (work / "README").write_text("a repository behind pinproxy\n")
        run("add", "README")
        run("-c", "user.name=t", "-c", "user.email=t@test", "commit", "-q", "-m", "first")
        run("clone", "-q", "--bare", str(work), str(root / "repo.git"), cwd=root)
        run("update-server-info", cwd=root / "repo.git")
    return root


@pytest.fixture(scope="module")
def origin(site, pki):
    o = StaticTLSOrigin(site, pki.path("api-chain.pem"), pki.path("api.key"))
    yield o
    o.close()


def make(module_proxies, origin, pki, refusal):
    return module_proxies(
        proxy={"allow_ports": [origin.port], "refusal": refusal},
        resolve={ALLOWED: "127.0.0.1"},
        hosts={
            ALLOWED: {"trust": ["root-a.pem"], "pin": "public-key", "pins": [pki.spki("api"), PIN_X]},
            API: {"trust": ["root-a.pem"], "pin": "public-key", "pins": [PIN_X, PIN_Y]},
        },
    )


@pytest.fixture(scope="module")
def proxy(module_proxies, origin, pki):
    """The default: refusals on the CONNECT."""
    return make(module_proxies, origin, pki, "connect")


@pytest.fixture(scope="module")
def in_tls(module_proxies, origin, pki):
    return make(module_proxies, origin, pki, "in-tls")


def bundle(proxy) -> Path:
    """`pinproxy ca --bundle`: the system bundle plus this daemon's CA (what the README's table gives
    clients whose variable replaces their trust store)."""
    path = proxy.dir / "bundle.pem"
    if not path.exists():
        p = subprocess.run([str(proxy.bin), "ca", "--config", str(proxy.config_path), "--bundle", str(path)],
                           capture_output=True, text=True, timeout=TIMEOUT, env=clean_env(), stdin=subprocess.DEVNULL)
        assert p.returncode == 0, p
    return path


def url(origin, host, path):
    return f"https://{host}:{origin.port}{path}"


def client(argv, env, cwd=None):
    p = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=CLIENT_TIMEOUT + 30,
                       stdin=subprocess.DEVNULL)
    return p, p.stdout + p.stderr


def need(tool):
    path = shutil.which(tool)
    if not path:
        pytest.fail(f"{tool} is not installed (scripts/setup --tests installs it)", pytrace=False)
    return path


# ---------------------------------------------------------------- curl: -x / HTTPS_PROXY, --cacert / CURL_CA_BUNDLE


@pytest.mark.parametrize("mode", ["connect", "in-tls"])
def test_curl(proxy, in_tls, origin, mode):
    p = proxy if mode == "connect" else in_tls
    curl = need("curl")
    env = clean_env(HTTPS_PROXY=p.url, CURL_CA_BUNDLE=str(bundle(p)))
    res, out = client([curl, "-sS", "--max-time", str(CLIENT_TIMEOUT), url(origin, ALLOWED, "/hello.txt")], env)
    assert res.returncode == 0 and "hello through pinproxy" in out, out
    res, out = client([curl, "-sS", "--max-time", str(CLIENT_TIMEOUT), url(origin, API, "/hello.txt")], env)
    if mode == "in-tls":  # the page, printed as the response body
        assert "pin-mismatch" in out and "Expected" in out, out
    else:  # curl prints only the CONNECT status
        assert res.returncode != 0 and "403" in out, out


# ---------------------------------------------------------------- wget: https_proxy (lowercase only), --ca-certificate


def test_wget(proxy, origin, tmp_path):
    wget = need("wget")
    env = clean_env(https_proxy=proxy.url)
    args = [wget, "--ca-certificate", str(proxy.ca_path), "--tries", "1", "--timeout", str(CLIENT_TIMEOUT), "-O"]
    res, out = client(args + [str(tmp_path / "ok"), url(origin, ALLOWED, "/hello.txt")], env)
    assert res.returncode == 0 and (tmp_path / "ok").read_text() == "hello through pinproxy\n", out
    res, out = client(args + [str(tmp_path / "no"), url(origin, API, "/hello.txt")], env)
    assert res.returncode != 0 and "pinproxy: pin-mismatch for api.test" in out, out


def test_wget_ignores_uppercase_https_proxy(proxy, origin, tmp_path):
    # What the README warns about: with HTTPS_PROXY alone, wget goes direct (unpinned). The URL
    # names 127.0.0.1, so that going direct stays on loopback (and fails: the origin's
    # certificate is not issued by the pinproxy CA).
    wget = need("wget")
    mark = proxy.mark()
    env = clean_env(HTTPS_PROXY=proxy.url)
    res, out = client([wget, "--ca-certificate", str(proxy.ca_path), "--tries", "1", "--timeout", "5", "-O",
                       str(tmp_path / "x"), f"https://127.0.0.1:{origin.port}/hello.txt"], env)
    assert res.returncode != 0, out
    assert "certificate" in out, out
    assert not [l for l in proxy.logs(mark) if l.get("host") == "127.0.0.1"], "wget used HTTPS_PROXY"


# ---------------------------------------------------------------- Python: urllib, requests


def test_urllib(proxy, origin):
    status, body = urllib_get(proxy, url(origin, ALLOWED, "/hello.txt"))
    assert status == 200 and body == b"hello through pinproxy\n"
    with pytest.raises(OSError) as caught:
        urllib_get(proxy, url(origin, API, "/hello.txt"))
    assert "403 pinproxy: pin-mismatch for api.test" in str(caught.value), str(caught.value)


URLLIB_GET = ("import sys, urllib.request\n"
              "try:\n    r = urllib.request.urlopen(sys.argv[1], timeout=60); print(r.status, r.read().decode())\n"
              "except OSError as e:\n    sys.exit(f'error: {e}')")


def test_urllib_with_environment_variables(proxy, origin):
    env = clean_env(HTTPS_PROXY=proxy.url, SSL_CERT_FILE=str(bundle(proxy)))
    res, out = client([sys.executable, "-c", URLLIB_GET, url(origin, ALLOWED, "/hello.txt")], env)
    assert res.returncode == 0 and "200 hello through pinproxy" in out, out
    res, out = client([sys.executable, "-c", URLLIB_GET, url(origin, API, "/hello.txt")], env)
    assert res.returncode != 0 and "403 pinproxy: pin-mismatch for api.test" in out, out


REQUESTS_GET = "import requests, sys; r = requests.get(sys.argv[1], timeout=60); print(r.status_code, r.text)"


def test_requests(proxy, origin):
    if subprocess.run([sys.executable, "-c", "import requests"], capture_output=True).returncode != 0:
        pytest.fail("requests is not installed (scripts/setup --tests installs it)", pytrace=False)
    env = clean_env(HTTPS_PROXY=proxy.url, REQUESTS_CA_BUNDLE=str(bundle(proxy)))
    env.pop("CURL_CA_BUNDLE", None)
    res, out = client([sys.executable, "-c", REQUESTS_GET, url(origin, ALLOWED, "/hello.txt")], env)
    assert res.returncode == 0 and "200 hello through pinproxy" in out, out
    res, out = client([sys.executable, "-c", REQUESTS_GET, url(origin, API, "/hello.txt")], env)
    assert res.returncode != 0 and "pinproxy: pin-mismatch for api.test" in out, out


# ---------------------------------------------------------------- pip: HTTPS_PROXY, PIP_CERT


def pip_env(proxy, **extra):
    env = {k: v for k, v in clean_env(HTTPS_PROXY=proxy.url, PIP_CERT=str(bundle(proxy))).items()
           if not k.startswith("PIP_") or k == "PIP_CERT"}
    for k in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
        env.pop(k, None)
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1", **extra)
    return env


def pip_download(origin, host, dest, env, retries=0):
    # pip prints a connection error (the CONNECT's reason phrase) in its retry warnings.
    return client([sys.executable, "-m", "pip", "download", "--no-deps", "--no-cache-dir", "--retries", str(retries),
                   "--timeout", str(CLIENT_TIMEOUT), "--index-url", url(origin, host, "/simple/"), "-d", str(dest),
                   "pinproxy-demo"], env)


def test_pip(proxy, origin, tmp_path):
    res, out = pip_download(origin, ALLOWED, tmp_path / "ok", pip_env(proxy))
    assert res.returncode == 0 and (tmp_path / "ok" / WHEEL).is_file(), out
    res, out = pip_download(origin, API, tmp_path / "no", pip_env(proxy), retries=1)
    assert res.returncode != 0 and "pinproxy: pin-mismatch for api.test" in out, out


def test_pip_cert_is_overridden_by_curl_ca_bundle(proxy, origin, tmp_path, pki):
    # What the README warns about: requests (inside pip) lets CURL_CA_BUNDLE (or
    # REQUESTS_CA_BUNDLE) replace PIP_CERT. Pointed elsewhere, the pinproxy CA is not trusted.
    res, out = pip_download(origin, ALLOWED, tmp_path / "x", pip_env(proxy, CURL_CA_BUNDLE=str(pki.path("root-b.pem"))))
    assert res.returncode != 0 and "CERTIFICATE_VERIFY_FAILED" in out, out


# ---------------------------------------------------------------- git: https_proxy / http.proxy, GIT_SSL_CAINFO


@pytest.mark.parametrize("mode", ["connect", "in-tls"])
def test_git(proxy, in_tls, origin, tmp_path, mode):
    p = proxy if mode == "connect" else in_tls
    git = need("git")
    env = git_env(tmp_path, HTTPS_PROXY=p.url, GIT_SSL_CAINFO=str(bundle(p)))
    res, out = client([git, "clone", "-q", url(origin, ALLOWED, "/repo.git"), str(tmp_path / "ok")], env)
    assert res.returncode == 0 and (tmp_path / "ok" / "README").is_file(), out
    res, out = client([git, "clone", "-q", url(origin, API, "/repo.git"), str(tmp_path / "no")], env)
    assert res.returncode != 0, out
    if mode == "in-tls":  # git shows a text/plain error body as "remote:" lines
        assert "remote: pinproxy refused api.test" in out and "pin-mismatch" in out, out
    else:
        assert "403" in out, out


# ---------------------------------------------------------------- Node.js: NODE_EXTRA_CA_CERTS, CONNECT by hand

# Node before 22.21 / 24.5 ignores HTTPS_PROXY (NODE_USE_ENV_PROXY does not exist there), so a
# script opens the tunnel itself: http.request CONNECT, then tls.connect over the socket, which
# trusts the bundled roots plus NODE_EXTRA_CA_CERTS. The CONNECT's statusMessage is the reason.
NODE_GET = r"""
const http = require('http'), tls = require('tls');
const [proxyPort, host, port, path] = process.argv.slice(-4);
const req = http.request({host: '127.0.0.1', port: proxyPort, method: 'CONNECT', path: `${host}:${port}`});
req.on('connect', (res, socket) => {
  if (res.statusCode !== 200) { console.log(`CONNECT ${res.statusCode} ${res.statusMessage}`); process.exit(1); }
  const s = tls.connect({socket, servername: host}, () => {
    s.write(`GET ${path} HTTP/1.1\r\nHost: ${host}:${port}\r\nConnection: close\r\n\r\n`);
  });
  let data = '';
  s.on('data', d => data += d);
  s.on('end', () => console.log(data));
  s.on('error', e => { console.log(`error: ${e.message}`); process.exit(2); });
});
req.on('error', e => { console.log(`error: ${e.message}`); process.exit(2); });
req.end();
"""


def test_node(proxy, origin):
    node = need("node")
    env = clean_env(NODE_EXTRA_CA_CERTS=str(proxy.ca_path))
    res, out = client([node, "-e", NODE_GET, str(proxy.port), ALLOWED, str(origin.port), "/hello.txt"], env)
    assert res.returncode == 0 and "200 OK" in out and "hello through pinproxy" in out, out
    res, out = client([node, "-e", NODE_GET, str(proxy.port), API, str(origin.port), "/hello.txt"], env)
    assert res.returncode == 1 and "CONNECT 403 pinproxy: pin-mismatch for api.test" in out, out
    # Without NODE_EXTRA_CA_CERTS, the minted leaf is not trusted.
    res, out = client([node, "-e", NODE_GET, str(proxy.port), ALLOWED, str(origin.port), "/hello.txt"], clean_env())
    assert res.returncode == 2 and "certificate" in out, out
