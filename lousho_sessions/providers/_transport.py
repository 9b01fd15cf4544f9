"""Where a model call's POST goes: straight to the server, or through ``requests``.

:meth:`Transport.post` sends one request and gives the open :class:`Response`. For
each URL it decides once, and again whenever the environment changes (``requests``
reads the environment on every request, which costs about 0.1 ms):

- **straight to the server** (``_direct``: HTTP/1.1 on kept-alive connections, without
  ``requests``' per-request work) when no proxy applies to the URL and ``.netrc`` has
  no entry for its host. Whether a proxy applies is asked of ``requests`` itself
  (``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``, ``NO_PROXY``, any case); TLS is
  verified against the CA bundle ``requests`` would use (``REQUESTS_CA_BUNDLE``, else
  ``CURL_CA_BUNDLE``, else certifi's), and the request carries the headers ``requests``
  sends by default (``User-Agent``, ``Accept-Encoding``, ``Connection``) under ours;
- **through a** ``requests.Session`` otherwise: proxies (HTTP, HTTPS, SOCKS with
  ``requests[socks]``) and ``.netrc`` credentials work exactly as ``requests`` does them.

A redirect answered on the direct path (a 3xx with a ``Location``) is sent again
through ``requests``, which follows it as it always did. Cookies a server sets go into
the one jar both paths share and are sent back, as a ``requests.Session`` does.
"""

from __future__ import annotations

import http.client
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

import requests
import requests.cookies
import requests.utils

from ..errors import ProviderConfigError
from ._direct import DirectPool, DirectRoute
from ._sockets import AbortableAdapter, AbortScope, scoped

__all__ = ["Response", "Transport"]


class Response(Protocol):
    """An open response: its status, headers (looked up by lower-case name) and body."""

    @property
    def status(self) -> int: ...

    @property
    def reason(self) -> str: ...

    @property
    def headers(self) -> Mapping[str, str]: ...

    def chunks(self) -> Iterator[bytes]:
        """The body, decoded, as it arrives."""
        ...

    def read_timeout(self, seconds: float) -> None:
        """The longest wait of the body's next reads."""
        ...

    def read(self) -> bytes:
        """The rest of the body."""
        ...

    def close(self) -> None: ...


class RequestsResponse:
    """A ``requests.Response`` seen as a :class:`Response`."""

    def __init__(self, response: requests.Response, scope: AbortScope) -> None:
        self.response = response
        self._scope = scope  # its current socket is the one urllib3 reads this body from
        self.status = response.status_code
        self.reason = response.reason or ""
        self.headers: Mapping[str, str] = response.headers

    def chunks(self) -> Iterator[bytes]:
        raw = self.response.raw
        read1 = getattr(raw, "read1", None)
        if read1 is None:  # urllib3 < 2.3: per HTTP chunk when chunked, else may buffer
            yield from raw.stream(65536, decode_content=True)
            return
        while True:
            chunk = read1(65536, decode_content=True)  # requests leaves raw bodies encoded
            if not chunk:
                return
            yield chunk

    def read_timeout(self, seconds: float) -> None:
        sock = self._scope.current
        if sock is not None and sock.gettimeout() != seconds:  # setting it is a system call
            sock.settimeout(seconds)

    def read(self) -> bytes:
        return self.response.content

    def close(self) -> None:
        self.response.close()


class _Session(requests.Session):
    """A ``requests.Session`` that reads the environment's proxy and CA-bundle settings
    once per change rather than on every request.

    ``requests`` scans every environment variable twice a request to find proxies
    (about 0.1 ms); this keeps what it found for each URL with a copy of the
    environment it found it in, and asks again whenever the environment differs.
    """

    def __init__(self) -> None:
        super().__init__()
        self._merged: dict[tuple[Any, ...], tuple[dict[bytes, bytes], Any]] = {}

    def merge_environment_settings(
        self, url: Any, proxies: Any, stream: Any, verify: Any, cert: Any
    ) -> Any:
        environ = getattr(os.environ, "_data", None)  # (the raw variables: cheap to compare)
        if proxies or not self.trust_env or not isinstance(environ, dict):
            return super().merge_environment_settings(url, proxies, stream, verify, cert)
        key = (url, stream, verify, cert)
        found = self._merged.get(key)
        if found is None or found[0] != environ:
            merged = super().merge_environment_settings(url, proxies, stream, verify, cert)
            if len(self._merged) >= 64:
                self._merged.clear()
            found = self._merged[key] = (dict(environ), merged)
        return {k: dict(v) if isinstance(v, dict) else v for k, v in found[1].items()}


def _environment() -> dict[Any, Any]:
    environ = getattr(os.environ, "_data", None)  # the raw variables: cheap to compare
    return environ if isinstance(environ, dict) else dict(os.environ)


class Transport:
    """Sends the POSTs of ``provider`` (with ``headers``) straight to the server or through
    ``requests``, as the module says; ``close()`` closes pooled connections (it still
    works afterwards)."""

    def __init__(self, provider: str, headers: Mapping[str, str]) -> None:
        self._provider = provider
        self._headers = dict(headers)
        self._session = _Session()
        adapter = AbortableAdapter()
        self._session.mount("http://", adapter)
        self._session.mount("https://", adapter)
        # what requests would send: its default headers, ours over them
        sent = requests.structures.CaseInsensitiveDict(requests.utils.default_headers())
        sent.update(self._headers)
        self._direct_headers = dict(sent.items())
        self._pool = DirectPool()
        self._routes: dict[str, DirectRoute | None] = {}
        self._prepared: dict[str, requests.PreparedRequest] = {}  # for the cookie jar
        self._environ: dict[Any, Any] = {}
        self._cookies = False  # the jar may hold cookies

    def close(self) -> None:
        self._session.close()
        self._pool.close()

    def post(
        self,
        url: str,
        body: bytes | memoryview,
        timeout: tuple[float, float],
        scope: AbortScope,
        sent: Callable[[], None] | None = None,
    ) -> Response:
        """POST ``body`` to ``url``; the response, once its head is read. ``timeout`` is
        (connect, read); the sockets used join ``scope``. ``sent`` is called once the
        request has left (straight to the server: before the head is waited for; through
        requests: once it is read)."""
        route = self._route(url)
        if route is not None:
            extra = None
            if self._cookies and len(self._session.cookies):
                cookie = requests.cookies.get_cookie_header(  # type: ignore[no-untyped-call]
                    self._session.cookies, self._prepare(url)
                )
                extra = {"Cookie": cookie} if cookie else None
            response = route.post(body, timeout, scope, extra, sent)
            if response.set_cookies:
                self._keep_cookies(url, response.set_cookies)
            if not (300 <= response.status < 400 and "location" in response.headers):
                return response
            response.close()  # a redirect: requests follows it
        self._cookies = True  # requests keeps what it is sent in the jar
        with scoped(scope):
            answer = self._session.post(
                url, data=bytes(body), headers=self._headers, stream=True, timeout=timeout
            )
        if sent is not None:
            try:
                sent()
            except BaseException:
                answer.close()
                raise
        return RequestsResponse(answer, scope)

    def _route(self, url: str) -> DirectRoute | None:
        environ = _environment()
        if environ != self._environ:
            self._routes.clear()
            self._environ = dict(environ)
        try:
            return self._routes[url]
        except KeyError:
            pass
        route = self._routes[url] = self._resolve(url)
        return route

    def _resolve(self, url: str) -> DirectRoute | None:
        """The direct route to ``url``; ``None`` when requests must send it."""
        session = self._session
        try:
            settings = session.merge_environment_settings(url, {}, True, None, None)
            if requests.utils.select_proxy(url, settings["proxies"]) is not None:
                return None
            if session.trust_env and requests.utils.get_netrc_auth(url) is not None:
                return None
        except Exception:  # a URL the direct path does not take: requests tells what is wrong
            return None
        tls: dict[str, Any] = {}
        if url.lower().startswith("https:"):
            verify = settings["verify"]
            if verify is False or settings["cert"]:
                return None
            bundle = verify if isinstance(verify, str) else requests.utils.DEFAULT_CA_BUNDLE_PATH
            if not os.path.exists(bundle):
                raise ProviderConfigError(
                    None,
                    f"{self._provider}: the CA bundle {bundle!r} (from REQUESTS_CA_BUNDLE, "
                    "CURL_CA_BUNDLE or certifi) does not exist",
                    retryable=False,
                )
            where = "ca_cert_dir" if os.path.isdir(bundle) else "ca_certs"
            tls = {"cert_reqs": "CERT_REQUIRED", where: bundle}
        try:
            return DirectRoute(url, self._direct_headers, tls, self._pool)
        except Exception:
            return None

    def _prepare(self, url: str) -> requests.PreparedRequest:
        prepared = self._prepared.get(url)
        if prepared is None:
            prepared = requests.PreparedRequest()
            prepared.prepare(method="POST", url=url, headers=self._direct_headers)
            self._prepared[url] = prepared
        return prepared

    def _keep_cookies(self, url: str, values: list[str]) -> None:
        message = http.client.HTTPMessage()
        for value in values:
            message["Set-Cookie"] = value
        self._session.cookies.extract_cookies(
            requests.cookies.MockResponse(message),  # type: ignore[arg-type]
            requests.cookies.MockRequest(self._prepare(url)),  # type: ignore[arg-type]
        )
        self._cookies = True
