"""Shared parts of pinproxy's benchmarks (proxy-bench.py, soak.py): a throw-away PKI, an nginx
origin and a pinproxy daemon on loopback, process figures read from /proc, and a client that
opens CONNECT tunnels. Every socket goes to 127.0.0.1; every wait is bounded.
Not a test: nothing here asserts timings."""

import argparse
import os
import resource
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time

TICK = os.sysconf("SC_CLK_TCK")
PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024


def argument_parser(doc):
    """A benchmark's command line: its docstring as help, and `--bin` (the release build)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", default=os.path.join(root, ".build/release/pinproxy"))
    return parser


def require_binary(path):
    """Exits with a hint when the pinproxy binary to measure is not built."""
    if not os.access(path, os.X_OK):
        raise SystemExit(f"{path} is not executable (swift build -c release)")


def log(message):
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def raise_open_file_limit():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, seconds, what):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise SystemExit(f"timed out after {seconds}s waiting for {what}")


def port_open(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


# ---------------------------------------------------------------- process figures

def cpu_seconds(pid):
    """User + system CPU of `pid` (all its threads), in seconds; 10 ms resolution."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def rss_kib(pid):
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * PAGE_KIB


def open_descriptors(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def cpu_nanoseconds(pid):
    """User + system CPU of `pid`'s threads, in nanoseconds (schedstat: no tick rounding), and
    the ids of those threads: a thread that ended took its share along, so two readings compare
    only when they saw the same threads."""
    total, threads = 0, set()
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
            threads.add(task)
        except (FileNotFoundError, ProcessLookupError):
            pass  # a thread that ended meanwhile
    return total, threads


# ---------------------------------------------------------------- PKI

def _openssl(*args):
    subprocess.run(["openssl", *args], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _key_args(kind):
    return ["-newkey", "rsa:2048"] if kind == "rsa2048" else ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"]


def make_pki(directory, kind="rsa2048"):
    """An origin CA, a leaf for localhost/127.0.0.1 and a second leaf with another key (for a
    pin mismatch). Returns the origin leaf's public-key pin (base64 SHA-256 of its SPKI)."""
    os.makedirs(directory, exist_ok=True)
    ca = os.path.join(directory, "origin-ca")
    _openssl("req", "-x509", "-new", *_key_args(kind), "-nodes", "-sha256", "-days", "30", "-keyout", ca + ".key",
             "-out", ca + ".pem", "-subj", "/CN=pinproxy bench origin CA",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    extensions = os.path.join(directory, "leaf.ext")
    with open(extensions, "w") as f:
        f.write("basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n"
                "subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    for name in ("origin", "altkey"):
        leaf = os.path.join(directory, name)
        _openssl("req", "-new", *_key_args(kind), "-nodes", "-keyout", leaf + ".key", "-out", leaf + ".csr", "-subj", "/CN=localhost")
        _openssl("x509", "-req", "-in", leaf + ".csr", "-CA", ca + ".pem", "-CAkey", ca + ".key", "-set_serial",
                 str(int.from_bytes(os.urandom(8), "big")), "-days", "30", "-sha256", "-extfile", extensions, "-out", leaf + ".pem")
    pubkey = subprocess.run(["openssl", "x509", "-in", os.path.join(directory, "origin.pem"), "-pubkey", "-noout"],
                            check=True, capture_output=True).stdout
    der = subprocess.run(["openssl", "pkey", "-pubin", "-outform", "der"], input=pubkey, check=True, capture_output=True).stdout
    import base64
    import hashlib
    return base64.b64encode(hashlib.sha256(der).digest()).decode()


# ---------------------------------------------------------------- origin

def ensure_nginx():
    if shutil.which("nginx"):
        return
    if os.geteuid() != 0:
        raise SystemExit("nginx is not installed (apt-get install nginx), and this is not root")
    log("apt-get install nginx")
    subprocess.run(["apt-get", "update", "-qq"], check=True)
    subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "nginx"], check=True,
                   env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"}, stdout=subprocess.DEVNULL)


class Origin:
    """nginx on 127.0.0.1: `port` serves the pinned leaf, `altkey_port` a leaf of the same CA with
    another key. /small.txt (100 bytes), /large.bin (`large_mib` MiB), /cut (the connection is
    closed without an answer: an upstream that vanishes mid-relay)."""

    def __init__(self, work, pki, large_mib=0, workers=1):
        ensure_nginx()
        self.work = work
        self.port = free_port()
        self.altkey_port = free_port()
        root = os.path.join(work, "www")
        os.makedirs(root, exist_ok=True)
        with open(os.path.join(root, "small.txt"), "w") as f:
            f.write("x" * 100)
        if large_mib:
            with open(os.path.join(root, "large.bin"), "wb") as f:
                for _ in range(large_mib):
                    f.write(os.urandom(1 << 20))
        for path in (work, root, pki):
            os.chmod(path, 0o755)
        for name in os.listdir(root):
            os.chmod(os.path.join(root, name), 0o644)
        for name in os.listdir(pki):
            os.chmod(os.path.join(pki, name), 0o644)
        nginx_dir = os.path.join(work, "nginx")
        os.makedirs(nginx_dir, exist_ok=True)

        def server(port, leaf):
            return f"""
  server {{
    listen 127.0.0.1:{port} ssl;
    server_name localhost;
    ssl_certificate {pki}/{leaf}.pem; ssl_certificate_key {pki}/{leaf}.key;
    root {root};
    location / {{ }}
    location = /cut {{ return 444; }}
  }}"""
        user = "user nobody nogroup;" if os.geteuid() == 0 else ""
        config = os.path.join(nginx_dir, "nginx.conf")
        with open(config, "w") as f:
            f.write(f"""{user}
worker_processes {workers};
worker_rlimit_nofile {resource.getrlimit(resource.RLIMIT_NOFILE)[1]};
daemon off;
pid {nginx_dir}/nginx.pid;
error_log {nginx_dir}/error.log crit;
events {{ worker_connections 30000; }}
http {{
  access_log off;
  default_type application/octet-stream;
  sendfile on;
  keepalive_timeout 600s;
  keepalive_requests 1000000;
  ssl_protocols TLSv1.2 TLSv1.3;
  client_body_temp_path {nginx_dir}; proxy_temp_path {nginx_dir}; fastcgi_temp_path {nginx_dir};
  uwsgi_temp_path {nginx_dir}; scgi_temp_path {nginx_dir};
{server(self.port, "origin")}
{server(self.altkey_port, "altkey")}
}}
""")
        self.process = subprocess.Popen(["nginx", "-c", config, "-p", nginx_dir + "/"], stdout=subprocess.DEVNULL,
                                        stderr=open(os.path.join(nginx_dir, "stderr.log"), "w"), start_new_session=True)
        wait_for(lambda: port_open(self.port) and port_open(self.altkey_port), 20, "nginx")

    def stop(self):
        stop_process(self.process)


# ---------------------------------------------------------------- pinproxy

class Daemon:
    """pinproxy on 127.0.0.1, pinning the origin's key for `localhost`; `denied.test` is denied by
    policy. `wrapper` (e.g. valgrind) is put in front of the binary; `name` is its directory
    under `work`."""

    def __init__(self, binary, work, pki, origin, pin, log_path=None, wrapper=(), extra_proxy="", extra_tables="", start_timeout=60,
                 name="pinproxy"):
        self.port = free_port()
        self.directory = os.path.join(work, name)
        os.makedirs(self.directory, exist_ok=True)
        self.config = os.path.join(self.directory, "pinproxy.toml")
        ports = f"[{origin.port}, {origin.altkey_port}]"
        with open(self.config, "w") as f:
            f.write(f"""[proxy]
listen = ["127.0.0.1:{self.port}"]
ca_dir = "{self.directory}/ca"
block_private_destinations = false
allow_ports = {ports}
{extra_proxy}

[resolve]
"localhost" = "127.0.0.1"

[default]
action = "deny"

[hosts."localhost"]
trust = ["{pki}/origin-ca.pem"]
pin = "public-key"
pins = ["sha256/{pin}", "sha256/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="]
ports = {ports}
{extra_tables}""")
        ca = subprocess.run([binary, "ca", "--config", self.config], check=True, capture_output=True, text=True).stdout
        self.ca_path = ca.splitlines()[0]
        self.log_path = log_path or os.devnull
        self.process = subprocess.Popen([*wrapper, binary, "run", "--config", self.config], stdout=subprocess.DEVNULL,
                                        stderr=open(self.log_path, "w"), start_new_session=True)
        self.pid = self.process.pid
        wait_for(lambda: self.process.poll() is None and port_open(self.port), start_timeout, "pinproxy to listen")

    def stop(self):
        stop_process(self.process)


def valgrind_binary(binary, work):
    """A copy of `binary` valgrind can run: Valgrind 3.19 cannot read the DWARF 5 the Swift
    toolchain writes, and the symbol table suffices."""
    copy = os.path.join(work, "pinproxy-nodebug")
    subprocess.run(["objcopy", "--strip-debug", binary, copy], check=True)
    return copy


def stop_process(process, seconds=20):
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(seconds)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(5)


def work_directory(prefix):
    return tempfile.mkdtemp(prefix=prefix, dir=os.environ.get("TMPDIR", "/tmp"))


# ---------------------------------------------------------------- client

def read_head(sock, limit=65536):
    """Reads an HTTP response head; returns (status, head bytes, bytes after the head)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            raise ConnectionError(f"closed after {len(data)} bytes of the response head")
        data += chunk
        if len(data) > limit:
            raise ConnectionError("response head too long")
    head, _, rest = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), head, rest


def connect_request(proxy_port, host, port, timeout=30):
    """A socket to the proxy with its CONNECT sent and answered: (socket, status)."""
    sock = socket.create_connection(("127.0.0.1", proxy_port), timeout=timeout)
    try:
        sock.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
        status, _, _ = read_head(sock)
        return sock, status
    except BaseException:
        sock.close()
        raise


def read_response(tls):
    """Reads one HTTP/1.1 response with a Content-Length; returns (status, body length)."""
    status, head, rest = read_head(tls)
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    body = len(rest)
    while body < length:
        chunk = tls.recv(min(65536, length - body))
        if not chunk:
            raise ConnectionError("closed in the body")
        body += len(chunk)
    return status, body


def open_tunnel(proxy_port, context, port, path="/small.txt", timeout=30):
    """CONNECT localhost:port, TLS through it, one keep-alive request answered: the TLS socket."""
    sock, status = connect_request(proxy_port, "localhost", port, timeout)
    if status != 200:
        sock.close()
        raise ConnectionError(f"CONNECT answered {status}")
    tls = context.wrap_socket(sock, server_hostname="localhost")
    try:
        tls.sendall(f"GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
        status, _ = read_response(tls)
        if status != 200:
            raise ConnectionError(f"GET answered {status}")
        return tls
    except BaseException:
        tls.close()
        raise


def client_context(ca_path):
    context = ssl.create_default_context(cafile=ca_path)
    context.set_alpn_protocols(["http/1.1"])
    return context
