"""The local AWS as an HTTPS proxy for AWS's hosts: a client that hard-codes
``https://sts.<region>.amazonaws.com`` reaches it through HTTPS_PROXY and trusts it through
AWS_CA_BUNDLE; other hosts are relayed untouched on loopback and refused elsewhere; the CA
vouches for AWS's domains only."""

from __future__ import annotations

import http.client
import http.server
import io
import threading
from pathlib import Path
from types import SimpleNamespace

import boto3
import pytest
from botocore.exceptions import SSLError

from mmelocal.localaws import LocalAws
from mmelocal.localaws.proxy import CertificateAuthority, HttpsProxy, is_aws_host, is_loopback


def test_hard_coded_aws_addresses_reach_the_local_aws(local_aws_env: LocalAws) -> None:
    # what the SageMaker SDK does: an explicit regional STS URL, which AWS_ENDPOINT_URL
    # does not override
    sts = boto3.client(
        "sts", region_name="us-east-1", endpoint_url="https://sts.us-east-1.amazonaws.com"
    )
    assert sts.get_caller_identity()["Account"] == local_aws_env.account_id
    s3 = boto3.client("s3", endpoint_url="https://s3.us-east-1.amazonaws.com")
    assert "Buckets" in s3.list_buckets()
    # the CA is what makes it trusted: without AWS_CA_BUNDLE the same call is refused
    untrusted = boto3.client(
        "sts",
        region_name="us-east-1",
        endpoint_url="https://sts.us-east-1.amazonaws.com",
        verify=True,  # the default bundle, not AWS_CA_BUNDLE
    )
    with pytest.raises(SSLError):
        untrusted.get_caller_identity()


def test_other_hosts_are_relayed_on_loopback(local_aws_env: LocalAws) -> None:
    # a plain tunnel through the proxy to another loopback server, whose answer comes back
    # byte for byte (a pip or a notebook download through HTTPS_PROXY works the same way)
    body = b'{"relayed": true}'

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler) as target:
        threading.Thread(target=target.serve_forever, daemon=True).start()
        try:
            connection = http.client.HTTPConnection("127.0.0.1", local_aws_env.port, timeout=30)
            connection.set_tunnel("127.0.0.1", target.server_address[1])
            connection.request("GET", "/anything")
            answer = connection.getresponse()
            assert (answer.status, answer.read()) == (200, body)
            connection.close()
        finally:
            target.shutdown()


def test_off_loopback_other_hosts_are_refused_and_the_ca_is_for_aws_only(
    tmp_path: Path,
) -> None:
    assert is_aws_host("sts.us-east-1.amazonaws.com") and is_aws_host("sagemaker.us-east-1.api.aws")
    assert not is_aws_host("pypi.org") and not is_aws_host("amazonaws.com.evil.example")
    assert is_loopback("127.0.0.1") and is_loopback("::1") and not is_loopback("0.0.0.0")
    ca = CertificateAuthority(tmp_path / "ca")
    handler = SimpleNamespace(path="pypi.org:443", wfile=io.BytesIO(), close_connection=False)
    HttpsProxy(ca, relay_others=False).connect(handler)
    assert handler.wfile.getvalue().startswith(b"HTTP/1.1 403 Forbidden")
    assert b"NO_PROXY" in handler.wfile.getvalue() and handler.close_connection
    # the CA's name constraints limit it to AWS's domains; its key is its owner's only; a
    # second start reuses it (an exported AWS_CA_BUNDLE stays valid)
    from cryptography import x509

    bundle = ca.ensure()
    constraints = x509.load_pem_x509_certificate(
        bundle.read_bytes()
    ).extensions.get_extension_for_class(x509.NameConstraints)
    assert constraints.critical
    assert {n.value for n in constraints.value.permitted_subtrees or []} == {
        "amazonaws.com",
        "amazonaws.com.cn",
        "api.aws",
    }
    assert (bundle.parent / "mmelocal-local-aws-ca.key").stat().st_mode & 0o077 == 0
    assert CertificateAuthority(tmp_path / "ca").ensure().read_bytes() == bundle.read_bytes()
