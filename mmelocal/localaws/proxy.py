"""The local AWS as an HTTPS proxy for AWS's own addresses, with a certificate authority of
its own: what lets libraries that hard-code ``https://<service>.<region>.amazonaws.com``
(the SageMaker Python SDK's STS client, 2.x and 3.x) reach the local AWS unmodified.

``AWS_ENDPOINT_URL`` redirects every boto3 client that a library builds without an
``endpoint_url``; a client built with an explicit one (the SDK's
``sts_regional_endpoint(region)``) ignores it. Every HTTPS client honours ``HTTPS_PROXY``,
though: with ``HTTPS_PROXY=http://127.0.0.1:4566`` it sends ``CONNECT host:443`` to the
local AWS, which

* for an AWS host (``*.amazonaws.com``, ``*.amazonaws.com.cn``, ``*.api.aws``) answers 200,
  then speaks TLS as that host with a certificate issued by its own CA, and serves the
  requests that follow exactly as those sent to ``AWS_ENDPOINT_URL`` (the same
  application: routed by the SigV4 scope, the ``X-Amz-Target`` header and the path). boto3
  trusts that CA through ``AWS_CA_BUNDLE``. Nothing addressed to AWS leaves the machine.
* for any other host relays the bytes untouched (no TLS is opened: ``pip`` in a notebook
  still works), but only while the local AWS listens on a loopback address; on any other
  address it refuses (403), so it is never an open relay.

The CA is made once per data folder (``DIR/ca/``, kept across restarts so a bundle path
that a user exported stays valid), and its name constraints limit it to AWS's domains: even
a leaked bundle vouches for no other host. Host certificates are made on first use and
kept in memory.
"""

from __future__ import annotations

import datetime
import io
import ipaddress
import logging
import os
import select
import socket
import ssl
import threading
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

#: the domains served as AWS (and the CA's permitted name subtrees)
AWS_DOMAINS = ("amazonaws.com", "amazonaws.com.cn", "api.aws")
CA_FILE = "mmelocal-local-aws-ca.pem"
CA_KEY_FILE = "mmelocal-local-aws-ca.key"
#: how long an idle relayed (non-AWS) tunnel is kept open
RELAY_IDLE_S = 300.0


def is_aws_host(host: str) -> bool:
    """True for a host name under one of :data:`AWS_DOMAINS`."""
    host = host.lower().rstrip(".")
    return any(host == d or host.endswith("." + d) for d in AWS_DOMAINS)


def is_loopback(host: str) -> bool:
    """True when ``host`` (an address the server listens on) is a loopback address."""
    if host in ("localhost", ""):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class CertificateAuthority:
    """The local AWS's CA under ``folder`` (made on first use, then reused)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.cert_path = folder / CA_FILE
        self._key_path = folder / CA_KEY_FILE
        self._lock = threading.Lock()
        self._contexts: dict[str, ssl.SSLContext] = {}
        self._ca_cert: Any = None
        self._ca_key: Any = None
        self._leaf_key: Any = None

    def ensure(self) -> Path:
        """Make the CA if ``folder`` has none; the path of its certificate (the
        ``AWS_CA_BUNDLE``)."""
        from cryptography import x509
        from cryptography.hazmat.primitives import serialization

        with self._lock:
            if self._ca_cert is not None:
                return self.cert_path
            if self.cert_path.is_file() and self._key_path.is_file():
                self._ca_cert = x509.load_pem_x509_certificate(self.cert_path.read_bytes())
                self._ca_key = serialization.load_pem_private_key(
                    self._key_path.read_bytes(), password=None
                )
            else:
                self._make_ca()
        return self.cert_path

    def _make_ca(self) -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "mmelocal"),
                x509.NameAttribute(NameOID.COMMON_NAME, "mmelocal local AWS CA"),
            ]
        )
        now = datetime.datetime.now(datetime.UTC)
        permitted: list[x509.GeneralName] = [x509.DNSName(d) for d in AWS_DOMAINS]
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.NameConstraints(permitted_subtrees=permitted, excluded_subtrees=None),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
            .sign(key, hashes.SHA256())
        )
        self.folder.mkdir(parents=True, exist_ok=True)
        key_pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        fd = os.open(self._key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(key_pem)
        self.cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        self._ca_cert, self._ca_key = cert, key
        logger.debug("made the local AWS's CA: %s", self.cert_path)

    def context_for(self, host: str) -> ssl.SSLContext:
        """A server-side TLS context presenting a certificate for ``host``."""
        host = host.lower().rstrip(".")
        self.ensure()
        with self._lock:
            context = self._contexts.get(host)
            if context is None:
                context = self._contexts[host] = self._make_context(host)
        return context

    def _make_context(self, host: str) -> ssl.SSLContext:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        if self._leaf_key is None:
            self._leaf_key = ec.generate_private_key(ec.SECP256R1())
        key = self._leaf_key
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host[:64])]))
            .issuer_name(self._ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=365))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._ca_key.public_key()),
                critical=False,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
            .sign(self._ca_key, hashes.SHA256())
        )
        hosts = self.folder / "hosts"
        hosts.mkdir(parents=True, exist_ok=True)
        pem = hosts / f"{host}.pem"
        fd = os.open(pem, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(cert.public_bytes(serialization.Encoding.PEM))
            handle.write(
                key.private_bytes(
                    serialization.Encoding.PEM,
                    serialization.PrivateFormat.PKCS8,
                    serialization.NoEncryption(),
                )
            )
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(str(pem))
        return context


class _SocketWriter(io.BufferedIOBase):
    """``wfile`` over a TLS socket (every write sent in full, nothing buffered)."""

    def __init__(self, sock: ssl.SSLSocket) -> None:
        super().__init__()
        self._sock = sock

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self._sock.sendall(data)
        with memoryview(data) as view:
            return view.nbytes


class HttpsProxy:
    """``CONNECT`` for the local AWS's request handler (see the module docstring).
    ``relay_others``: relay non-AWS hosts (only safe on a loopback listener)."""

    def __init__(self, ca: CertificateAuthority, *, relay_others: bool) -> None:
        self.ca = ca
        self.relay_others = relay_others

    def connect(self, handler: Any) -> None:
        """Serve ``CONNECT host:port`` on ``handler`` (an ``http.server`` request handler
        whose later requests on the same connection then arrive decrypted)."""
        host, _, port_text = str(handler.path).rpartition(":")
        host = host.strip("[]")
        try:
            port = int(port_text)
        except ValueError:
            host, port = str(handler.path), 443
        if is_aws_host(host):
            self._intercept(handler, host)
        elif self.relay_others:
            self._relay(handler, host, port)
        else:
            self._refuse(handler, host)

    def _intercept(self, handler: Any, host: str) -> None:
        context = self.ca.context_for(host)
        # headers and body go out as separate TLS records: without this, Nagle's algorithm
        # and the client's delayed ACK hold each answer ~40 ms
        handler.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        handler.wfile.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
        handler.wfile.flush()
        try:
            tls = context.wrap_socket(handler.connection, server_side=True)
        except (ssl.SSLError, OSError) as exc:
            logger.info(
                "TLS with a client of %s failed (does it trust AWS_CA_BUNDLE=%s?): %s",
                host,
                self.ca.cert_path,
                exc,
            )
            handler.close_connection = True
            return
        handler.connection = handler.request = tls
        handler.rfile = tls.makefile("rb", -1)
        handler.wfile = _SocketWriter(tls)
        handler.close_connection = False

    def _refuse(self, handler: Any, host: str) -> None:
        body = (
            f"the local AWS proxies AWS's hosts (*.amazonaws.com) only; {host} is not one, "
            "and this server does not listen on a loopback address, so it does not relay "
            "other hosts: set NO_PROXY for them\n"
        ).encode()
        handler.wfile.write(
            b"HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nConnection: close\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        handler.close_connection = True

    def _relay(self, handler: Any, host: str, port: int) -> None:
        try:
            upstream = socket.create_connection((host, port), timeout=30)
        except OSError as exc:
            body = f"cannot reach {host}:{port}: {exc}\n".encode()
            handler.wfile.write(
                b"HTTP/1.1 502 Bad Gateway\r\nConnection: close\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            handler.close_connection = True
            return
        handler.wfile.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
        handler.wfile.flush()
        client = handler.connection
        with upstream:
            sockets = [client, upstream]
            while True:
                readable, _, broken = select.select(sockets, [], sockets, RELAY_IDLE_S)
                if broken or not readable:
                    break
                done = False
                for sock in readable:
                    data = sock.recv(65536)
                    if not data:
                        done = True
                        break
                    (upstream if sock is client else client).sendall(data)
                if done:
                    break
        handler.close_connection = True


__all__ = [
    "AWS_DOMAINS",
    "CertificateAuthority",
    "HttpsProxy",
    "is_aws_host",
    "is_loopback",
]
