"""The HTTP transport: kept-alive connections, TLS, proxies, redirects, cookies, framing.

A model call goes straight to the server, or through ``requests`` when a proxy or a
``.netrc`` entry applies (``providers/_transport.py``); these tests hold what a user of
``requests`` relied on, whichever path a call takes: the environment's proxies and CA
bundle, proxy credentials, redirects followed, cookies sent back.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import ipaddress
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from http_proxy import ForwardProxy
from provider_server import JSONReply, ProviderServer, Recorded, SSEReply, sse_events
from tcp_proxy import FreezableProxy

from lousho_sessions import Message
from lousho_sessions.errors import ProviderConfigError, ProviderError
from lousho_sessions.providers._http import RetryPolicy
from lousho_sessions.providers.anthropic import AnthropicProvider
from lousho_sessions.providers.base import ModelRequest, complete
from lousho_sessions.providers.openai import OpenAIProvider

KEY = "sk-transport-test"
REQUEST = ModelRequest(None, (Message.user("hi"),), session_id="s")
NO_RETRY = RetryPolicy(max_retries=0)
SETTINGS = ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NETRC")
PROXIES = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No proxy, CA bundle or .netrc of the machine's (an empty one of the test's)."""
    for name in SETTINGS + PROXIES + tuple(p.upper() for p in PROXIES):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "netrc").write_text("")
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))


def openai(base: str) -> OpenAIProvider:
    return OpenAIProvider("gpt-x", api_key=KEY, base_url=base + "/v1", retry=NO_RETRY)


def text() -> SSEReply:
    return SSEReply(sse_events("openai", "text"))


def answer(provider: OpenAIProvider | AnthropicProvider) -> str:
    return complete(provider, REQUEST).message.text


# --- connections ------------------------------------------------------------------------


def test_consecutive_calls_share_one_connection(server: ProviderServer) -> None:
    server.reply(text(), text(), text())
    with openai(server.url) as provider:
        for _ in range(3):
            assert answer(provider).startswith("Hello")
    assert len({r.client_port for r in server.requests}) == 1


def test_a_reply_that_closes_its_connection_is_followed_by_a_new_one(
    server: ProviderServer,
) -> None:
    server.reply(SSEReply(sse_events("openai", "text"), headers={"Connection": "close"}), text())
    with openai(server.url) as provider:
        answer(provider)
        answer(provider)
    first, second = server.requests
    assert first.client_port != second.client_port


def test_a_kept_connection_the_server_dropped_while_idle_is_not_used(
    server: ProviderServer,
) -> None:
    """A server (or a load balancer) closes idle connections: the next call must not fail
    on the pooled one (no retry is allowed here)."""
    port = int(server.url.rsplit(":", 1)[1])
    forwarder = FreezableProxy(port)
    server.reply(text(), text())
    try:
        with openai(f"http://127.0.0.1:{forwarder.port}") as provider:
            answer(provider)
            forwarder.cut()
            assert answer(provider).startswith("Hello")
    finally:
        forwarder.close()
    assert len(server.requests) == 2


# --- what requests did: redirects, cookies, .netrc ----------------------------------------


def test_a_307_redirect_is_followed_with_the_same_body(server: ProviderServer) -> None:
    moved = {"Location": server.url + "/v2/chat/completions"}
    # the redirect may be seen twice (once on the direct path, then by requests)
    server.reply(JSONReply(307, headers=moved), JSONReply(307, headers=moved), text())
    with openai(server.url) as provider:
        assert answer(provider).startswith("Hello")
    last = server.requests[-1]
    assert last.path == "/v2/chat/completions"
    assert last.body == server.requests[0].body


def test_cookies_the_server_sets_are_sent_back(server: ProviderServer) -> None:
    cookie = {"Set-Cookie": "__cf_bm=abc123; Path=/; HttpOnly"}
    server.reply(SSEReply(sse_events("openai", "text"), headers=cookie), text())
    with openai(server.url) as provider:
        answer(provider)
        answer(provider)
    first, second = server.requests
    assert "cookie" not in first.headers
    assert second.headers["cookie"] == "__cf_bm=abc123"


def test_a_netrc_entry_for_the_host_is_sent_as_requests_sends_it(
    server: ProviderServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    netrc = tmp_path / "with-entry"
    netrc.write_text("machine 127.0.0.1 login ann password s3cret\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    server.reply(SSEReply(sse_events("anthropic", "text")))
    provider = AnthropicProvider("claude-x", api_key=KEY, base_url=server.url, retry=NO_RETRY)
    with provider:
        answer(provider)
    sent = server.requests[0].headers
    assert sent["authorization"] == "Basic " + base64.b64encode(b"ann:s3cret").decode()
    assert sent["x-api-key"] == KEY


def test_on_sent_is_called_once_the_request_has_left_before_the_answer_comes(
    server: ProviderServer,
) -> None:
    """Straight to the server, ``ModelRequest.on_sent`` is called once the body is sent:
    the server here answers only after the test saw the call."""
    sent, gate = threading.Event(), threading.Event()

    def held(recorded: Recorded) -> SSEReply:
        gate.wait(10)
        return SSEReply(sse_events("anthropic", "text"))

    server.route = held
    request = ModelRequest(None, (Message.user("hi"),), session_id="s", on_sent=sent.set)
    provider = AnthropicProvider("claude-x", api_key=KEY, base_url=server.url, retry=NO_RETRY)
    answers: list[str] = []
    caller = threading.Thread(target=lambda: answers.append(answer_to(provider, request)))
    caller.start()
    try:
        assert sent.wait(10), "on_sent was not called before the answer came"
    finally:
        gate.set()
        caller.join(10)
    assert answers and answers[0]
    assert AnthropicProvider.reports_sent and OpenAIProvider.reports_sent
    provider.close()


def test_on_sent_is_called_through_requests_before_any_event(
    server: ProviderServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Through ``requests`` (a ``.netrc`` entry), ``on_sent`` is called once the response's
    head is read, before the first event is given."""
    netrc = tmp_path / "with-entry"
    netrc.write_text("machine 127.0.0.1 login ann password s3cret\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    server.reply(SSEReply(sse_events("anthropic", "text")))
    seen: list[str] = []
    request = ModelRequest(
        None, (Message.user("hi"),), session_id="s", on_sent=lambda: seen.append("sent")
    )
    with AnthropicProvider("claude-x", api_key=KEY, base_url=server.url, retry=NO_RETRY) as p:
        seen += [type(event).__name__ for event in p.stream(request, request.signal)]
    assert seen[0] == "sent" and seen.count("sent") == 1 and seen[-1] == "ModelResponse"
    assert "authorization" in server.requests[0].headers  # it went through requests


def answer_to(provider: AnthropicProvider, request: ModelRequest) -> str:
    return complete(provider, request).message.text


def test_the_default_headers_of_requests_are_sent(server: ProviderServer) -> None:
    server.reply(text())
    with openai(server.url) as provider:
        answer(provider)
    sent = server.requests[0].headers
    assert sent["user-agent"].startswith("python-requests/")
    assert sent["accept-encoding"] == "gzip, deflate"
    assert sent["accept"] == "text/event-stream"
    assert sent["authorization"] == f"Bearer {KEY}"


def test_a_header_name_http_cannot_carry_is_refused() -> None:
    with pytest.raises(ProviderConfigError, match=r"'x bad' is not a valid HTTP header name"):
        OpenAIProvider("gpt-x", api_key=KEY, headers={"x bad": "1"})


# --- proxies from the environment ---------------------------------------------------------


def test_a_proxy_from_the_environment_carries_the_call_with_its_credentials(
    server: ProviderServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.reply(text(), text())
    with ForwardProxy() as proxy, openai(server.url) as provider:
        monkeypatch.setenv("http_proxy", proxy.url.replace("//", "//ann:pw@"))
        assert answer(provider).startswith("Hello")
        assert proxy.lines == [f"POST {server.url}/v1/chat/completions HTTP/1.1"]
        assert proxy.auths == ["Basic " + base64.b64encode(b"ann:pw").decode()]
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")  # now the call goes straight there
        assert answer(provider).startswith("Hello")
        assert len(proxy.lines) == 1
    assert len(server.requests) == 2


# --- TLS ------------------------------------------------------------------------------------


class Certificates:
    """A test certificate authority and a certificate it signed for 127.0.0.1."""

    def __init__(self, folder: Path) -> None:
        now = datetime.datetime.now(datetime.timezone.utc)
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "lousho test CA")])
        ca = (
            x509.CertificateBuilder()
            .subject_name(ca_name)
            .issuer_name(ca_name)
            .public_key(ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(False, False, False, False, False, True, True, False, False),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
            )
            .sign(ca_key, hashes.SHA256())
        )
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(
                x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False,
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                critical=False,
            )
            .add_extension(
                x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
            )
            .sign(ca_key, hashes.SHA256())
        )
        self.ca = folder / "ca.pem"
        self.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
        self.chain = folder / "server.pem"
        self.chain.write_bytes(
            cert.public_bytes(serialization.Encoding.PEM)
            + key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )

    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.chain)
        return context


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[ProviderServer, Certificates]]:
    certificates = Certificates(tmp_path)
    with ProviderServer(tls=certificates.server_context()) as running:
        yield running, certificates


@pytest.mark.parametrize("variable", ["REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"])
def test_https_is_verified_against_the_ca_bundle_of_the_environment(
    tls_server: tuple[ProviderServer, Certificates],
    monkeypatch: pytest.MonkeyPatch,
    variable: str,
) -> None:
    server, certificates = tls_server
    assert server.url.startswith("https://")
    server.reply(text(), text())
    with openai(server.url) as provider:
        with pytest.raises(ProviderError, match="CERTIFICATE_VERIFY_FAILED"):
            answer(provider)  # certifi's authorities do not know the test's
        assert server.requests == []
        monkeypatch.setenv(variable, str(certificates.ca))
        assert answer(provider).startswith("Hello")
    assert len(server.requests) == 1


def test_https_through_a_proxy_tunnel(
    tls_server: tuple[ProviderServer, Certificates], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, certificates = tls_server
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(certificates.ca))
    server.reply(text())
    with ForwardProxy() as proxy, openai(server.url) as provider:
        monkeypatch.setenv("HTTPS_PROXY", proxy.url)
        assert answer(provider).startswith("Hello")
        host_port = server.url.removeprefix("https://")
        assert [line.rsplit(" ", 1)[0] for line in proxy.lines] == [f"CONNECT {host_port}"]
    assert len(server.requests) == 1


def test_a_ca_bundle_that_does_not_exist_is_a_clear_error(
    server: ProviderServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(tmp_path / "missing.pem"))
    provider = OpenAIProvider("gpt-x", api_key=KEY, base_url="https://127.0.0.1:9/v1")
    with provider, pytest.raises(ProviderConfigError, match=r"missing\.pem.*does not exist"):
        answer(provider)


# --- how a body is framed ---------------------------------------------------------------------


@contextlib.contextmanager
def raw_server(reply: bytes) -> Iterator[str]:
    """A server that reads one request and answers ``reply`` as it is, then closes."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        with contextlib.suppress(OSError):
            connection, _ = listener.accept()
            with connection:
                head = b""
                while b"\r\n\r\n" not in head:
                    head += connection.recv(65536)
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                body = head.partition(b"\r\n\r\n")[2]
                while len(body) < length:
                    body += connection.recv(65536)
                connection.sendall(reply)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()
        thread.join(5)


EVENTS = b"".join(sse_events("openai", "text"))
SSE_HEAD = b"Content-Type: text/event-stream\r\n"


@pytest.mark.parametrize(
    "reply",
    [
        b"HTTP/1.1 200 OK\r\n" + SSE_HEAD + b"Content-Length: %d\r\n\r\n" % len(EVENTS) + EVENTS,
        b"HTTP/1.1 200 OK\r\n" + SSE_HEAD + b"Connection: close\r\n\r\n" + EVENTS,
        b"HTTP/1.0 200 OK\r\n" + SSE_HEAD + b"\r\n" + EVENTS,
        b"HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n"
        + b"HTTP/1.1 200 OK\r\n"
        + SSE_HEAD
        + b"X-Folded: a\r\n  b\r\n"
        + b"Transfer-Encoding: chunked\r\n\r\n"
        + b"%x;ext=1\r\n%s\r\n0\r\nX-Trailer: t\r\n\r\n" % (len(EVENTS), EVENTS),
    ],
    ids=["content-length", "until-close", "http-1.0", "informational-folded-trailers"],
)
def test_every_framing_of_a_streamed_body_is_read(reply: bytes) -> None:
    with raw_server(reply) as url, openai(url) as provider:
        assert answer(provider).startswith("Hello")


@pytest.mark.parametrize(
    "reply",
    [
        b"HTTP/1.1 200 OK\r\n" + SSE_HEAD + b"Content-Length: 99999\r\n\r\n" + EVENTS[:40],
        b"HTTP/1.1 200 OK\r\n" + SSE_HEAD + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\n"
        + SSE_HEAD
        + b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s" % (len(EVENTS), EVENTS[:100]),
        b"SMTP ready\r\n\r\n",
        b"",
    ],
    ids=["short-content-length", "bad-chunk-size", "cut-chunk", "not-http", "nothing"],
)
def test_a_broken_response_is_a_retryable_provider_error(reply: bytes) -> None:
    with raw_server(reply) as url, openai(url) as provider, pytest.raises(ProviderError) as caught:
        answer(provider)
    assert caught.value.retryable is True
