"""How a request reaches TensorFlow Serving and its answer comes back, for the client
(`albert_tf.export.client`): the server's address (`parse_server`), TF Serving's REST JSON in the
row ("instances") or column ("inputs") format and its answers (`encode_rest_request`,
`decode_rest_response`), and the two transports: REST over the standard library (`RestEndpoint`:
TLS verified against the system's CAs or a given CA, no redirects followed, a deadline on each
request as a whole, `_Deadline`, which closes the sockets of a request whose time ran out) and
gRPC through `tensorflow-serving-api`'s PredictionService (`GrpcEndpoint`). A failure is a
`ServingError` of one line naming its cause."""

from __future__ import annotations

import base64
import http.client
import ipaddress
import json
import re
import socket
import ssl
import threading
import urllib.error
import urllib.request


DEFAULT_PORTS = {"rest": 8501, "grpc": 8500}
MAX_TIMEOUT_S = 86400.0  # beyond it, timers overflow the platform's time_t
# A served model's name: the NAME of BASE/NAME (albert_tf.export.saved_model), a path segment of
# the URL.
MODEL_NAME = re.compile(r"(?!\.{1,2}$)[A-Za-z0-9_.\-]+")


class ServingError(RuntimeError):
    """A request failed; the message says why and what to check."""


def _snippet(value, limit: int = 120) -> str:
    """A short, one-line, printable quote of what a server sent (control characters escaped:
    a hostile answer cannot drive the terminal)."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    elif not isinstance(value, str):
        try:
            value = json.dumps(value)
        except (TypeError, ValueError):
            value = repr(value)
    value = " ".join(value.split())
    if len(value) > limit:
        value = value[:limit] + "..."
    return printable(value)


def printable(text: str) -> str:
    """`text` with control characters (but newlines and tabs) escaped."""
    return "".join(c if c.isprintable() or c in "\n\t" else c.encode("unicode_escape").decode()
                   for c in text)


def parse_server(server: str, protocol: str = "rest") -> tuple[str | None, str, int, str]:
    """(scheme or None, host, port, URL path prefix) of --server: `host[:port]`,
    `[IPv6]:port`, optionally after `http://` or `https://` and before a path (REST behind a
    proxy). An IPv6 address needs brackets: without them `::1:8501` could be an address or an
    address and a port. The port defaults to TF Serving's for the protocol."""
    default = DEFAULT_PORTS[protocol]
    prefix = f"--server {server!r}:"
    text = server.strip()
    scheme = None
    if "://" in text:
        scheme, text = text.split("://", 1)
        scheme = scheme.lower()
        if scheme not in ("http", "https"):
            raise ServingError(f"{prefix} {scheme}:// is not supported; use http:// or https:// "
                               "(REST and gRPC), or no scheme (host:port).")
    if any(c in text for c in "?#@"):
        raise ServingError(f"{prefix} write [http:// or https://]host[:port][/path]; no user "
                           "name, query or fragment.")
    authority, _, path = text.partition("/")
    path = "/" + path.strip("/") if path.strip("/") else ""
    if path and protocol == "grpc":
        raise ServingError(f"{prefix} a gRPC server has no URL path; write host:port.")
    port = None
    if authority.startswith("["):
        inner, closed, rest = authority[1:].partition("]")
        if not closed:
            raise ServingError(f"{prefix} the IPv6 address has no closing ']'. Write it in "
                               f"brackets, the port after them: --server "
                               f"{_bracketed(inner, default)}.")
        if not _is_ipv6(inner):
            raise ServingError(f"{prefix} {inner!r} in brackets is not an IPv6 address. Brackets "
                               f"are for IPv6 addresses (--server [::1]:{default}); write a host "
                               "name or IPv4 address without them.")
        if rest and not rest.startswith(":"):
            raise ServingError(f"{prefix} after the IPv6 address comes nothing or ':PORT' (e.g. "
                               f"--server [{inner}]:{default}); got {rest!r}.")
        host, port = f"[{inner}]", rest[1:] if rest else None
    elif authority.count(":") > 1:
        raise ServingError(f"{prefix} write an IPv6 address in brackets, the port after them: "
                           f"--server {_bracketed(authority, default)} (without brackets, "
                           f"{authority!r} could be an address or an address and a port).")
    else:
        host, colon, port = authority.partition(":")
        port = port if colon else None
        if not host:
            raise ServingError(f"{prefix} no host. Write host[:port], e.g. --server "
                               f"localhost:{default}.")
        if not re.fullmatch(r"[\w.-]+", host):
            raise ServingError(f"{prefix} {host!r} is not a host name or IP address.")
    if port is None:
        return scheme, host, default, path
    if not re.fullmatch(r"[0-9]{1,5}", port) or not 1 <= int(port) <= 65535:
        raise ServingError(f"{prefix} the port {port!r} is not a number from 1 to 65535. Write "
                           f"host:port, e.g. --server localhost:{default}.")
    return scheme, host, int(port), path


def _is_ipv6(text: str) -> bool:
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def _bracketed(text: str, default_port: int) -> str:
    """The bracketed form the user most likely meant by `text` (an IPv6 address, maybe with a
    port after it)."""
    head, _, tail = text.rpartition(":")
    if re.fullmatch(r"[0-9]{1,5}", tail) and _is_ipv6(head) and not _is_ipv6(text):
        return f"[{head}]:{tail}"
    if re.fullmatch(r"[0-9]{1,5}", tail) and _is_ipv6(head):
        return f"[{head}]:{tail} (or [{text}]:{default_port})"
    if _is_ipv6(text):
        return f"[{text}]:{default_port}"
    return f"[::1]:{default_port}"


def _json_value(value):
    """A request value as TF Serving's REST API takes it (bytes that are not UTF-8 -> b64)."""
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return {"b64": base64.b64encode(value).decode("ascii")}
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    if hasattr(value, "tolist"):  # numpy
        return _json_value(value.tolist())
    return value


def encode_rest_request(inputs: dict, signature: str, row_format: bool = True) -> dict:
    """The JSON body of a REST predict request.

    Args:
        inputs: {input name: list of per-example values} (same length for every input in the
            row format).
        signature: signature name.
        row_format: `instances` (one object per example) or `inputs` (one list per input).
    """
    if not inputs:
        raise ServingError("A predict request needs at least one input.")
    if not row_format:
        return {"signature_name": signature,
                "inputs": {k: _json_value(list(v)) for k, v in inputs.items()}}
    sizes = {k: len(v) for k, v in inputs.items()}
    if len(set(sizes.values())) != 1:
        raise ServingError(f"Row format needs the same number of values for every input; got "
                           f"{sizes}. Use the column format for inputs of different sizes.")
    n = next(iter(sizes.values()))
    names = list(inputs)
    if len(names) == 1:  # a single input: a list of values (TF Serving's short row form)
        return {"signature_name": signature, "instances": _json_value(list(inputs[names[0]]))}
    return {"signature_name": signature,
            "instances": [{k: _json_value(inputs[k][i]) for k in names} for i in range(n)]}


def decode_rest_response(body: dict, output_names=None, source: str = "the server") -> dict:
    """{output name: list over the batch} from a predict response in either format."""
    def unexpected(problem, value):
        return ServingError(f"Unexpected predict answer from {source}: {problem}: "
                            f"{_snippet(value)}")

    if not isinstance(body, dict):
        raise unexpected("not a JSON object", body)
    if "predictions" in body:
        predictions = body["predictions"]
        if not isinstance(predictions, list):
            raise unexpected("'predictions' is not a list", predictions)
        if predictions and isinstance(predictions[0], dict):
            names = set(predictions[0])
            if any(not isinstance(p, dict) or set(p) != names for p in predictions):
                raise unexpected("'predictions' mixes rows of different outputs", predictions)
            return {k: [p[k] for p in predictions] for k in predictions[0]}
        name = (output_names or ["output"])[0]
        return {name: predictions}
    if "outputs" in body:
        outputs = body["outputs"]
        if isinstance(outputs, dict):
            return outputs
        if not isinstance(outputs, list):
            raise unexpected("'outputs' is not a list or an object", outputs)
        return {(output_names or ["output"])[0]: outputs}
    raise unexpected("no predictions or outputs", body)


class _Deadline:
    """Bounds one HTTP exchange as a whole. `seconds` after the start it shuts the exchange's
    sockets down, which ends any read or write waiting on them: a server that drips its answer
    a byte at a time defeats a per-read socket timeout, not this."""

    def __init__(self, seconds: float):
        self.expired = False
        self._sockets = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def __enter__(self):
        self._timer.start()
        return self

    def __exit__(self, *exc):
        self._timer.cancel()

    def track(self, sock):
        with self._lock:
            self._sockets.append(sock)
            if self.expired:
                _shut(sock)
        return sock

    def _expire(self):
        with self._lock:
            self.expired = True
            for sock in self._sockets:
                _shut(sock)


def _shut(sock) -> None:
    try:  # the plain socket's shutdown: also ends a TLS socket's pending read (same descriptor)
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass  # already closed


def _tracked(connection_class):
    """`connection_class` with its sockets (the TCP one, then the TLS one around it) handed to
    a `_Deadline` (the `deadline` keyword)."""

    class Tracked(connection_class):
        def __init__(self, *args, deadline: _Deadline, **kwargs):
            super().__init__(*args, **kwargs)
            self._deadline = deadline
            create = self._create_connection
            self._create_connection = lambda *a, **k: deadline.track(create(*a, **k))

        def connect(self):
            super().connect()
            self._deadline.track(self.sock)

    return Tracked


_HTTPConnection = _tracked(http.client.HTTPConnection)
_HTTPSConnection = _tracked(http.client.HTTPSConnection)


class _HTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, deadline: _Deadline):
        super().__init__()
        self._deadline = deadline

    def http_open(self, req):
        return self.do_open(_HTTPConnection, req, deadline=self._deadline)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, deadline: _Deadline, context: ssl.SSLContext | None):
        super().__init__(context=context)
        self._deadline = deadline

    def https_open(self, req):
        return self.do_open(_HTTPSConnection, req, deadline=self._deadline,
                            context=self._context)


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """Redirects come back as answers (TF Serving never redirects; one could drop TLS)."""

    def redirect_request(self, *args, **kwargs):
        return None


# What each REST verb's answer holds (TF Serving's REST API).
_ANSWER_KEYS = {"predict": ("predictions", "outputs"), "classify": ("results",),
                "regress": ("results",), "metadata": ("metadata",)}


class _Endpoint:
    """What the REST and gRPC transports share: the model's address and the errors that name
    it."""

    def __init__(self, address: str, tls: bool, model: str, version: int | None,
                 timeout: float):
        self.address, self.tls, self.model = address, tls, model
        self.version, self.timeout = version, timeout
        self.known_signatures = None  # () -> [names], for a "no such signature" error

    def timed_out(self, protocol: str) -> ServingError:
        return ServingError(f"TF Serving at {self.address} did not answer within --timeout "
                            f"{self.timeout:g} s (it bounds the whole request: connecting, "
                            f"sending, reading the answer) over {protocol}. Is the server "
                            "overloaded, or the model slow on this input? Raise --timeout.")

    def certificate_refused(self, reason) -> ServingError:
        return ServingError(f"The TLS certificate of {self.address} does not verify: {reason}. "
                            "If it is self-signed or signed by a private CA, pass --ca_file with "
                            "that certificate (PEM); if its name does not match, use the name "
                            "it was issued for in --server.")

    def malformed(self, verb: str, what: str, value) -> ServingError:
        return ServingError(f"The server at {self.address} answered {verb} with {what}: "
                            f"{_snippet(value)}. Is {self.address} TF Serving's REST port (8501 "
                            "by default)?")

    def explain(self, status, message: str, signature: str | None) -> ServingError:
        lowered = message.lower()
        if "servable not found" in lowered or "could not find any versions" in lowered \
                or status == 404 or status == "NOT_FOUND":
            version = "" if self.version is None else f" version {self.version}"
            return ServingError(f"The server at {self.address} does not serve model "
                                f"{self.model!r}{version}: {message}. Check the model name (the "
                                "export directory's name, as in models.config).")
        if "signature" in lowered and "not found" in lowered:
            known = ""
            try:
                if self.known_signatures is not None:
                    known = f" The model's signatures: {', '.join(self.known_signatures())}."
            except ServingError:
                pass
            return ServingError(f"Model {self.model!r} has no signature {signature!r}: "
                                f"{message}.{known}")
        return ServingError(f"The server refused the request to {self.model!r} "
                            f"(signature {signature!r}): {message}")



class RestEndpoint(_Endpoint):
    """TF Serving's REST API: one HTTP(S) exchange per request, bounded by the timeout, the
    answer checked to be TF Serving's JSON."""

    def __init__(self, address, tls, model, version, timeout, path: str,
                 ssl_context: ssl.SSLContext | None):
        super().__init__(address, tls, model, version, timeout)
        self._path, self._ssl_context = path, ssl_context
        self.known_signatures = self.signatures

    def model_url(self):
        url = (f"{'https' if self.tls else 'http'}://{self.address}{self._path}"
               f"/v1/models/{self.model}")
        return url + (f"/versions/{self.version}" if self.version is not None else "")

    def call(self, verb: str, body: dict | None = None, signature: str | None = None) -> dict:
        """The JSON object TF Serving answered `verb` with; any other answer is a
        ServingError that says what came back."""
        url = self.model_url() + (f":{verb}" if verb != "metadata" else "/metadata")
        data = None if body is None else json.dumps(body).encode()
        status, reason, headers, payload = self._exchange(url, data)
        if 300 <= status < 400:
            location = _snippet(headers.get("Location", "nowhere"))
            raise ServingError(f"The server at {self.address} answered HTTP {status}, a redirect "
                               f"to {location}; the client follows none (TF Serving never "
                               "redirects, and a redirect can drop TLS): if that is the server, "
                               "pass it as --server.")
        if not 200 <= status < 300:
            try:
                message = json.loads(payload)["error"]
            except (ValueError, TypeError, KeyError):
                message = None
            message = f"HTTP {status} {reason}" if message is None else str(message)
            raise self.explain(status, message, signature)
        answer = self._json_object(verb, status, headers, payload)
        keys = _ANSWER_KEYS[verb]
        if not any(k in answer for k in keys):
            raise ServingError(f"The server at {self.address} answered {verb} with JSON that has "
                               f"no {' or '.join(map(repr, keys))} (its keys: "
                               f"{_snippet(', '.join(map(str, answer)) or 'none')}), not TF "
                               f"Serving's answer. Is {self.address} TF Serving's REST port "
                               "(8501 by default)?")
        return answer

    def _json_object(self, verb: str, status: int, headers, payload: bytes) -> dict:
        text = payload.strip()
        content_type = (headers.get("Content-Type") or "").lower()
        value = None
        if not text:
            what = "an empty body"
        elif "html" in content_type or text[:1] == b"<":
            what = f"an HTML page ('{_snippet(text, 80)}')"
        else:
            try:
                value = json.loads(text)
                what = f"JSON that is not an object ('{_snippet(text, 80)}')"
            except ValueError:  # UnicodeDecodeError included
                what = f"a body that is not JSON ('{_snippet(text, 80)}')"
        if isinstance(value, dict):
            return value
        raise ServingError(f"The server at {self.address} answered {verb} with {what} (HTTP "
                           f"{status}), not TF Serving's JSON. Is {self.address} TF Serving's "
                           "REST port (8501 by default), not a web server, a proxy's page or "
                           "the gRPC port?")

    def _exchange(self, url: str, data: bytes | None):
        """(status, reason, headers, body) of one HTTP(S) request, all of it within
        self.timeout; what fails on the way is a ServingError naming the cause."""
        request = urllib.request.Request(url, data=data,
                                         method="GET" if data is None else "POST",
                                         headers={"Content-Type": "application/json"})
        deadline = _Deadline(self.timeout)
        opener = urllib.request.build_opener(_NoRedirects(), _HTTPHandler(deadline),
                                             _HTTPSHandler(deadline, self._ssl_context))
        failure = None
        with deadline:
            try:
                try:
                    response = opener.open(request, timeout=self.timeout)
                    status, reason = response.status, response.reason
                except urllib.error.HTTPError as e:
                    response, status, reason = e, e.code, e.reason
                with response:
                    headers, payload = response.headers, response.read()
            except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as e:
                failure = e
        if deadline.expired:
            raise self.timed_out("REST")
        if failure is not None:
            raise self._transport_error(failure) from None
        return status, printable(str(reason)), headers, payload

    def _transport_error(self, error: Exception) -> ServingError:
        reason = error.reason if isinstance(error, urllib.error.URLError) else error
        port_hint = ("Is this TF Serving's REST port (8501 by default; gRPC is 8500)?"
                     + ("" if self.tls else " If the server speaks HTTPS, use https://."))
        if isinstance(reason, ssl.SSLCertVerificationError):
            return self.certificate_refused(reason.verify_message or reason)
        if isinstance(reason, ssl.SSLError):
            return ServingError(f"TLS with {self.address} failed: {reason}. Does the server "
                                "speak HTTPS there? For a plain-HTTP server use http://.")
        if isinstance(reason, TimeoutError):
            return self.timed_out("REST")
        if isinstance(reason, http.client.RemoteDisconnected):
            return ServingError(f"The server at {self.address} closed the connection without "
                                f"answering. {port_hint}")
        if isinstance(reason, http.client.IncompleteRead):
            return ServingError(f"The server at {self.address} broke its answer off "
                                f"({len(reason.partial)} bytes, "
                                f"{reason.expected or 'more'} missing).")
        if isinstance(reason, http.client.HTTPException):
            return ServingError(f"The server at {self.address} answered something that is not "
                                f"HTTP ({type(reason).__name__}: {_snippet(str(reason), 60)}). "
                                f"{port_hint}")
        if isinstance(reason, ValueError):
            return ServingError(f"Cannot make a request of {self.model_url()!r}: {reason}. "
                                "Check --server and --model.")
        return ServingError(f"Cannot reach TF Serving at {self.address} over REST: {reason}. "
                            "Is the server running, and is this its REST port (8501 by "
                            "default; gRPC is 8500)?")

    def signatures(self) -> list[str]:
        """The served model's signature names (REST metadata)."""
        meta = self.call("metadata")
        defs = meta["metadata"]
        for key in ("signature_def", "signature_def"):  # {"signature_def": {"signature_def": }}
            defs = defs.get(key) if isinstance(defs, dict) else None
        if not isinstance(defs, dict):
            raise self.malformed("metadata", "no signature_def map", meta)
        return sorted(map(str, defs))



class GrpcEndpoint(_Endpoint):
    """TF Serving's gRPC API (PredictionService), the deadline of the whole call the timeout."""

    def __init__(self, address, tls, model, version, timeout, ca_pem: bytes | None):
        super().__init__(address, tls, model, version, timeout)
        self._ca_pem = ca_pem
        self._stub = None

    def stub(self):
        if self._stub is None:
            import grpc
            from tensorflow_serving.apis import prediction_service_pb2_grpc

            if self.tls:  # the server's certificate verified (--ca_file, or gRPC's roots)
                channel = grpc.secure_channel(self.address, grpc.ssl_channel_credentials(
                    root_certificates=self._ca_pem))
            else:
                channel = grpc.insecure_channel(self.address)
            self._stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        return self._stub

    def model_spec(self, request, signature):
        request.model_spec.name = self.model
        request.model_spec.signature_name = signature
        if self.version is not None:
            request.model_spec.version.value = int(self.version)

    def call(self, method: str, request, signature: str):
        import grpc

        try:  # timeout: the deadline of the whole call
            return getattr(self.stub(), method)(request, timeout=self.timeout)
        except grpc.RpcError as e:
            code, details = e.code(), printable(e.details() or "")
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                raise self.timed_out("gRPC") from None
            if code == grpc.StatusCode.UNAVAILABLE:
                verify = re.search(r"CERTIFICATE_VERIFY_FAILED:\s*([^:]+)", details)
                if self.tls and verify:
                    raise self.certificate_refused(verify.group(1).strip()) from None
                if self.tls and "handshake failed" in details.lower():
                    raise ServingError(f"TLS with {self.address} failed: {details}. Does the "
                                       "server take TLS there? For a plain server leave https:// "
                                       "and --ca_file out.") from None
                hint = ("" if self.tls or "refused" in details.lower() else
                        " If it takes TLS, use https:// (and --ca_file for a private CA).")
                raise ServingError(f"Cannot reach TF Serving at {self.address} over gRPC: "
                                   f"{details}. Is the server running, and is this its gRPC "
                                   f"port (8500 by default; REST is 8501)?{hint}") from None
            raise self.explain(code.name, details, signature) from None
