"""Outgoing HTTP on `wasi:http/outgoing-handler` (the `http` capability:
`capabilities = ["http"]` in `[tool.sandgraph]`, and an `http` grant of the
origin in the operator's config). The API reads like `requests`:

    response = sandgraph.http.get("https://example.com/api", params={"q": "x"})
    response.raise_for_status()
    data = response.json()

A request waits for its answer inside the call (the wait counts against the
run's deadline, not its fuel). Denied and failed requests raise `HttpError`.
"""

import json as _json
import urllib.parse
from collections.abc import Mapping
from typing import Any, Iterator, List, Optional, Tuple

from . import _bindings
from .errors import HttpError

__all__ = [
    "Headers", "MAX_RESPONSE_BYTES", "Response", "aget", "apost", "arequest", "get", "post",
    "request",
]  # fmt: skip

#: The largest response body read: the body lives in the instance's memory,
#: whose cap would otherwise end the run with a trap instead of an error.
MAX_RESPONSE_BYTES = 16 * 1024 * 1024

#: The largest request body sent (bounded for the same reason).
MAX_REQUEST_BYTES = 16 * 1024 * 1024

# The most bytes asked of the body stream per read.
_READ_SIZE = 64 * 1024
# The most bytes written to the request body per call (wasi:io allows 4096
# per `blocking-write-and-flush`).
_WRITE_SIZE = 4096

_METHODS = ("GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH")


class Headers(Mapping):
    """Response headers: a read-only mapping with case-insensitive names;
    a repeated header's values are joined with `, `."""

    def __init__(self, pairs: List[Tuple[str, str]]) -> None:
        self._items: dict = {}
        for name, value in pairs:
            key = name.lower()
            if key in self._items:
                self._items[key] = (self._items[key][0], f"{self._items[key][1]}, {value}")
            else:
                self._items[key] = (name, value)

    def __getitem__(self, name: str) -> str:
        return self._items[name.lower()][1]

    def __iter__(self) -> Iterator[str]:
        return (name for name, _ in self._items.values())

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._items

    def __repr__(self) -> str:
        return f"Headers({dict(self.items())!r})"


class Response:
    """An HTTP answer: `status`, `headers` (case-insensitive), `content`
    (bytes), `url`; `text()`, `json()`, `raise_for_status()`."""

    def __init__(self, url: str, status: int, headers: Headers, content: bytes) -> None:
        self.url = url
        self.status = status
        self.status_code = status
        self.headers = headers
        self.content = content

    @property
    def ok(self) -> bool:
        """True for a status below 400."""
        return self.status < 400

    def text(self) -> str:
        """The body decoded with the charset of its Content-Type (else
        UTF-8); undecodable bytes become U+FFFD."""
        charset = "utf-8"
        for part in self.headers.get("content-type", "").split(";")[1:]:
            key, _, value = part.strip().partition("=")
            if key.lower() == "charset" and value:
                charset = value.strip('"')
        try:
            return self.content.decode(charset, "replace")
        except LookupError:
            return self.content.decode("utf-8", "replace")

    def json(self) -> Any:
        """The body parsed as JSON."""
        return _json.loads(self.text())

    def raise_for_status(self) -> None:
        """Raises `HttpError("status", ...)` for a 4xx or 5xx answer."""
        if self.status >= 400:
            raise HttpError("status", f"{self.status} from {self.url}")

    def __repr__(self) -> str:
        return f"<Response [{self.status}]>"


def _kind(code: Any) -> str:
    """The `HttpError` kind of a wasi:http `error-code` case."""
    name = type(code).__name__.split("_", 1)[-1]
    if name in ("HttpRequestDenied", "DestinationIpProhibited"):
        return "denied"
    if "Timeout" in name:
        return "timeout"
    if name.startswith(("Dns", "Destination", "Connection", "Tls")):
        return "connection"
    return "protocol"


def _error(code: Any, url: str) -> HttpError:
    name = type(code).__name__.split("_", 1)[-1]
    detail = getattr(code, "value", None)
    text = f"{name}" + (f" ({detail})" if detail not in (None, "") else "")
    return HttpError(_kind(code), f"{url}: {text}")


def _split_url(url: str, params: Any) -> Tuple[str, str, str]:
    """(scheme, authority, path-with-query) of `url` plus `params`."""
    if not isinstance(url, str):
        raise TypeError(f"the url must be a string, not {type(url).__name__}")
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise HttpError("protocol", f"{url!r} is not an http or https url")
    host = parts.hostname.encode("idna").decode("ascii")
    if ":" in host:
        host = f"[{host}]"
    authority = host if parts.port is None else f"{host}:{parts.port}"
    query = parts.query
    if params:
        extra = urllib.parse.urlencode(params, doseq=True)
        query = f"{query}&{extra}" if query else extra
    path = urllib.parse.quote(parts.path or "/", safe="/%:@!$&'()*+,;=~-._")
    return parts.scheme, authority, path + (f"?{query}" if query else "")


def _body(headers: dict, json: Any, data: Any) -> bytes:
    if json is not None and data is not None:
        raise TypeError("give json or data, not both")
    names = {k.lower() for k in headers}
    if json is not None:
        if "content-type" not in names:
            headers["Content-Type"] = "application/json"
        return _json.dumps(json, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    if data is None:
        return b""
    if isinstance(data, str):
        data = data.encode("utf-8")
    elif isinstance(data, Mapping):
        if "content-type" not in names:
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        data = urllib.parse.urlencode(data, doseq=True).encode("ascii")
    if not isinstance(data, (bytes, bytearray)):
        raise TypeError(f"data must be bytes, str or a dict, not {type(data).__name__}")
    if len(data) > MAX_REQUEST_BYTES:
        raise HttpError("protocol", f"the request body is larger than {MAX_REQUEST_BYTES} bytes")
    return bytes(data)


def _wait(future: Any, url: str) -> Any:
    """Blocks on the response future; its incoming-response."""
    while True:
        answer = future.get()
        if answer is not None:
            break
        with future.subscribe() as pollable:
            pollable.block()
    value = answer.value  # Ok | Err: the future was read once
    if type(answer).__name__ == "Err":
        raise HttpError("protocol", f"{url}: the response was already taken")
    inner = value
    if type(inner).__name__ == "Err":
        raise _error(inner.value, url)
    return inner.value


def _read_body(response: Any, url: str) -> bytes:
    http = _bindings.binding("http", 1)
    chunks: List[bytes] = []
    size = 0
    body = response.consume()
    stream = body.stream()
    try:
        while True:
            try:
                chunk = stream.blocking_read(_READ_SIZE)
            except Exception as error:
                value = getattr(error, "value", None)
                if type(value).__name__.endswith("_Closed"):
                    break
                raise HttpError("connection", f"{url}: the body stopped: {value or error}") from None
            size += len(chunk)
            if size > MAX_RESPONSE_BYTES:
                raise HttpError(
                    "protocol", f"{url}: the response body is larger than {MAX_RESPONSE_BYTES} bytes"
                )
            chunks.append(chunk)
    finally:
        stream.__exit__(None, None, None)
    http.IncomingBody.finish(body)
    return b"".join(chunks)


def request(
    method: str,
    url: str,
    *,
    headers: Optional[Mapping] = None,
    params: Any = None,
    json: Any = None,
    data: Any = None,
    timeout: Optional[float] = None,
) -> Response:
    """Sends an HTTP request and waits for the whole answer (at most
    `MAX_RESPONSE_BYTES` of body). `params` are added to the query, `json`
    is sent as JSON, `data` as bytes, text or a form; `timeout` (seconds)
    bounds connecting and each wait for bytes. Raises `HttpError` (kinds
    `denied`, `timeout`, `connection`, `protocol`)."""
    http = _bindings.binding("http", 1)
    handler = _bindings.binding("http", 0)
    scheme, authority, path = _split_url(url, params)
    headers = dict(headers or {})
    body = _body(headers, json, data)
    fields = []
    for name, value in headers.items():
        value = value if isinstance(value, bytes) else str(value).encode("utf-8")
        fields.append((str(name).lower(), value))
    try:
        outgoing = http.OutgoingRequest(http.Fields.from_list(fields))
    except Exception as error:
        raise HttpError("protocol", f"{url}: bad headers: {getattr(error, 'value', error)}") from None
    method = str(method).upper()
    outgoing.set_method(
        getattr(http, f"Method_{method.title()}")() if method in _METHODS else http.Method_Other(method)
    )
    outgoing.set_scheme(http.Scheme_Https() if scheme == "https" else http.Scheme_Http())
    outgoing.set_authority(authority)
    outgoing.set_path_with_query(path)
    options = None
    if timeout is not None:
        options = http.RequestOptions()
        nanos = int(timeout * 1_000_000_000)
        options.set_connect_timeout(nanos)
        options.set_first_byte_timeout(nanos)
        options.set_between_bytes_timeout(nanos)
    outgoing_body = outgoing.body()
    try:
        future = handler.handle(outgoing, options)
    except Exception as error:
        code = getattr(error, "value", None)
        if code is None:
            raise
        raise _error(code, url) from None
    _write_body(http, outgoing_body, body, url)
    response = _wait(future, url)
    pairs = [(n, v.decode("utf-8", "replace")) for n, v in response.headers().entries()]
    status = response.status()
    content = _read_body(response, url)
    return Response(url, status, Headers(pairs), content)


def _write_body(http: Any, outgoing_body: Any, body: bytes, url: str) -> None:
    stream = outgoing_body.write()
    try:
        for start in range(0, len(body), _WRITE_SIZE):
            stream.blocking_write_and_flush(body[start : start + _WRITE_SIZE])
    except Exception as error:
        raise HttpError("connection", f"{url}: the request body: {getattr(error, 'value', error)}") from None
    finally:
        stream.__exit__(None, None, None)
    try:
        http.OutgoingBody.finish(outgoing_body, None)
    except Exception as error:
        code = getattr(error, "value", None)
        if code is None:
            raise
        raise _error(code, url) from None


def get(url: str, **kwargs: Any) -> Response:
    """`request("GET", url, ...)`."""
    return request("GET", url, **kwargs)


def post(url: str, **kwargs: Any) -> Response:
    """`request("POST", url, ...)`."""
    return request("POST", url, **kwargs)


async def arequest(method: str, url: str, **kwargs: Any) -> Response:
    """`request`, awaitable (the request is made synchronously: several
    awaited with `asyncio.gather` run one after another)."""
    return request(method, url, **kwargs)


async def aget(url: str, **kwargs: Any) -> Response:
    """`get`, awaitable."""
    return request("GET", url, **kwargs)


async def apost(url: str, **kwargs: Any) -> Response:
    """`post`, awaitable."""
    return request("POST", url, **kwargs)
