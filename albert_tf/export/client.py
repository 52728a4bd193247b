r"""A client for ALBERT models served by TensorFlow Serving, over REST or gRPC.

    python -m albert_tf.export.client predict --server localhost:8501 --model albert \
        --text "ALBERT shares its layers."
    python -m albert_tf.export.client fill_mask --server localhost:8501 --model albert \
        --text "The capital of France is [MASK]."
    python -m albert_tf.export.client classify --server localhost:8500 --protocol grpc \
        --model sst2 --text "a gripping, funny film"

REST (port 8501) needs nothing beyond the standard library: requests are TF Serving's JSON, in
the row ("instances") or column ("inputs") format, with bytes that are not UTF-8 text sent as
`{"b64": ...}`. gRPC (port 8500) uses `tensorflow-serving-api`'s PredictionService. `classify`
and `regress` send `tf.Example`s of raw text (bytes features `text`, `text_b`), which the
export tokenizes in its graph; with `--spm_model_file` they send the official token features
(`input_ids`, `input_mask`, `segment_ids`) instead, tokenized here with the one tokenizer
(`albert_tf.tokenization`) and packed by `albert_tf.packing` to the model's own
`max_seq_length`, which the client asks the server for (every text answer carries it).
`fill_mask` calls the export's `fill_mask` signature, whose answer holds the candidates only.
Texts the model saw cut to its `max_seq_length` are reported (`truncated`, `num_tokens`).

Security: `--server https://host:port` keeps TLS, over REST and gRPC, and the server's
certificate is verified against the system's CAs, or against `--ca_file` (a private CA, or a
self-signed server certificate; a `--ca_file` with no scheme means https). Redirects are not
followed (TF Serving never redirects, and a redirect can drop TLS). `--timeout` bounds each request
as a whole (connecting, sending, the whole answer), not each read of the socket.

Errors are one line and name the cause: a server that is down, slow or not TF Serving (a web
page, a body that is not TF Serving's JSON), a certificate that does not verify, a malformed
--server, a model name it does not serve, a signature the model lacks (listing the ones it has),
or an input the signature refuses.
"""

from __future__ import annotations

from albert_tf.quiet import entry_point  # noqa: E402

entry_point(__name__)  # run as a program: TF's start-up lines filtered (albert_tf.quiet)

import base64
import http.client
import ipaddress
import json
import math
import os
import re
import socket
import ssl
import sys
import threading
import urllib.error
import urllib.request

from absl import flags

from albert_tf.commands import flags as albert_flags
from albert_tf.commands.flags import UsageError, own_flags_help, parse_own
from albert_tf.packing import pack_ids
from albert_tf.records import example_of
from albert_tf.tokenization import Tokenizer

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
    return _printable(value)


def _printable(text: str) -> str:
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


def text_examples(texts, texts_b=None) -> list[dict]:
    """Raw-text examples (`text`, `text_b`), as the export's tf.Example signatures take them
    and tokenize in the graph."""
    return [{"text": text} if texts_b is None else {"text": text, "text_b": texts_b[i]}
            for i, text in enumerate(texts)]


def example_features(texts, texts_b=None, spm_model_file=None, max_seq_length=None,
                     do_lower_case=True) -> list[dict]:
    """Token features of texts, as the export's tf.Example signatures take them, packed to
    `max_seq_length` (the served model's: `ServingClient.max_seq_length()`)."""

    if not spm_model_file:
        raise ServingError("Token features need the model's SentencePiece model: pass "
                           "--spm_model_file (the one it was trained with), or send "
                           "raw text (leave it out).")
    if not max_seq_length:
        raise ServingError("Token features are packed to the model's max_seq_length: pass it "
                           "(ServingClient.max_seq_length() asks the server).")
    tokenizer = Tokenizer(spm_model_file, do_lower_case)
    rows = []
    for i, text in enumerate(texts):
        ids, segments = pack_ids(tokenizer.encode_with_masks(text),
                                 None if texts_b is None else
                                 tokenizer.encode_with_masks(texts_b[i]), max_seq_length)
        rows.append({"input_ids": ids, "input_mask": [1] * len(ids), "segment_ids": segments})
    return rows


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



class _Rest(_Endpoint):
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
        return status, _printable(str(reason)), headers, payload

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



class _Grpc(_Endpoint):
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
            code, details = e.code(), _printable(e.details() or "")
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


class ServingClient:
    """Predict, classify, regress and fill-mask against one model on a TF Serving server.

    Args:
        server: host[:port] or [IPv6][:port] (REST default port 8501, gRPC 8500), after
            "http://" or "https://" (TLS, REST and gRPC) or neither (plain, unless `ca_file`);
            REST may add a URL path (a proxy's prefix). `parse_server` has the rules.
        model: the model name (the export directory's name).
        protocol: "rest" or "grpc".
        version: a version number, or None for the latest.
        timeout: seconds per request, the whole of it (connecting, sending, reading the answer).
        ca_file: PEM certificate(s) to verify the server's certificate with, instead of the
            system's CAs (a private CA, or a self-signed server certificate); implies TLS.
    """

    def __init__(self, server: str, model: str, protocol: str = "rest",
                 version: int | None = None, timeout: float = 30.0,
                 ca_file: str | None = None):
        if protocol not in DEFAULT_PORTS:
            raise ServingError(f"protocol must be rest or grpc; got {protocol!r}")
        try:
            valid = math.isfinite(timeout) and 0 < timeout <= MAX_TIMEOUT_S
        except TypeError:
            valid = False
        if not valid:
            raise ServingError(f"--timeout must be a positive number of seconds, at most "
                               f"{MAX_TIMEOUT_S:g} (a day); got {timeout!r}.")
        if not isinstance(model, str) or not MODEL_NAME.fullmatch(model):
            raise ServingError(f"--model {model!r} is not a model name: letters, digits, '_', "
                               "'-' and '.' (not '.' or '..'), as the NAME of the export's "
                               "BASE/NAME.")
        if version is not None and not 0 <= version < 2 ** 63:
            raise ServingError(f"--version must be a version number (0 to 2^63 - 1); got "
                               f"{version}.")
        self.protocol = protocol
        self.model = model
        self.version = version
        self.timeout = timeout
        scheme, host, port, path = parse_server(server, protocol)
        if scheme == "http" and ca_file:
            raise ServingError(f"--ca_file asks for TLS, but --server {server!r} says http://: "
                               "use https:// (or leave the scheme out).")
        self.tls = scheme == "https" or bool(ca_file)
        self.address = f"{host}:{port}"
        ssl_context = self._tls_context(ca_file) if self.tls else None
        endpoint = (self.address, self.tls, model, version, timeout)
        if protocol == "rest":
            self._transport = _Rest(*endpoint, path, ssl_context)
        else:
            ca_pem = None
            if ca_file:
                with open(ca_file, "rb") as f:  # readable: _tls_context loaded it
                    ca_pem = f.read()
            self._transport = _Grpc(*endpoint, ca_pem)

    @staticmethod
    def _tls_context(ca_file: str | None) -> ssl.SSLContext:
        """Certificates and host names verified: against `ca_file`, or the system's CAs."""
        try:
            return ssl.create_default_context(cafile=ca_file)
        except ssl.SSLError as e:
            raise ServingError(f"--ca_file {ca_file!r} holds no PEM certificate ({e.reason or e}); "
                               "pass the certificate (PEM) of the CA that signed the server's "
                               "certificate, or the self-signed certificate itself.") from None
        except OSError as e:
            raise ServingError(f"--ca_file {ca_file!r}: cannot read it "
                               f"({e.strerror or e}).") from None

    def signatures(self) -> list[str]:
        """The served model's signature names (REST metadata)."""
        if self.protocol != "rest":
            raise ServingError("signatures() uses the REST metadata API.")
        return self._transport.signatures()

    def predict(self, inputs: dict, signature: str = "serving_default",
                row_format: bool = True) -> dict:
        """{output name: numpy array (gRPC) or nested list (REST)} for a batch of inputs
        ({input name: list over the batch})."""
        if self.protocol == "rest":
            body = encode_rest_request(inputs, signature, row_format)
            return decode_rest_response(self._transport.call("predict", body, signature),
                                        source=f"TF Serving at {self.address}")
        import numpy as np
        import tensorflow as tf
        from tensorflow_serving.apis import predict_pb2

        request = predict_pb2.PredictRequest()
        self._transport.model_spec(request, signature)
        for name, value in inputs.items():
            array = np.array(value, dtype=object) if value and isinstance(
                value[0], (str, bytes)) else np.asarray(value)
            request.inputs[name].CopyFrom(tf.make_tensor_proto(array))
        response = self._transport.call("Predict", request, signature)
        return {k: tf.make_ndarray(v) for k, v in response.outputs.items()}

    def classify(self, examples: list[dict], signature: str = "classify") -> list[list]:
        """[(class, score), ...] per example (token features with the official names)."""
        if self.protocol == "rest":
            body = {"signature_name": signature, "examples": examples}
            results = self._transport.call("classify", body, signature)["results"]
            try:
                rows = [[(c, float(s)) for c, s in row] for row in results]
            except (TypeError, ValueError):
                raise self._transport.malformed("classify", "results that are not [[class, score], ...] "
                                      "per example", results) from None
            return self._one_per_example("classify", rows, examples)
        from tensorflow_serving.apis import classification_pb2

        request = classification_pb2.ClassificationRequest()
        self._transport.model_spec(request, signature)
        _fill_examples(request.input.example_list.examples, examples)
        response = self._transport.call("Classify", request, signature)
        return [[(c.label, c.score) for c in row.classes]
                for row in response.result.classifications]

    def regress(self, examples: list[dict], signature: str = "regress") -> list[float]:
        if self.protocol == "rest":
            body = {"signature_name": signature, "examples": examples}
            results = self._transport.call("regress", body, signature)["results"]
            try:
                values = [float(v) for v in results]
            except (TypeError, ValueError):
                raise self._transport.malformed("regress", "results that are not one number per example",
                                      results) from None
            return self._one_per_example("regress", values, examples)
        from tensorflow_serving.apis import regression_pb2

        request = regression_pb2.RegressionRequest()
        self._transport.model_spec(request, signature)
        _fill_examples(request.input.example_list.examples, examples)
        response = self._transport.call("Regress", request, signature)
        return [r.value for r in response.result.regressions]

    def _one_per_example(self, verb: str, results: list, examples: list) -> list:
        if len(results) != len(examples):
            raise self._transport.malformed(verb, f"results for {len(results)} examples, not "
                                  f"{len(examples)}", results)
        return results

    def max_seq_length(self) -> int:
        """The served model's max_seq_length, from a text answer (`serve_text_pair` on an
        empty pair: 3 tokens), asked once."""
        if getattr(self, "_max_seq_length", None) is None:
            out = self.predict({"text": [""], "text_b": [""]}, "serve_text_pair")
            if "max_seq_length" not in out:
                raise ServingError(f"Model {self.model!r} does not report its max_seq_length "
                                   "(an export of an earlier version); pass --max_seq_length.")
            try:
                self._max_seq_length = int(_tolist(out["max_seq_length"])[0])
            except (TypeError, ValueError, IndexError, KeyError):
                raise self._transport.malformed("predict", "a max_seq_length that is not a number",
                                      _tolist(out["max_seq_length"])) from None
        return self._max_seq_length

    def fill_mask(self, texts: list[str], signature: str = "fill_mask") -> list[list]:
        """For each text, for each [MASK] in it: [(piece, probability), ...] best first (the
        export's `fill_mask` signature; its answer holds no per-token vectors)."""
        out = self.predict({"text": list(texts)}, signature)
        if "fill_mask_pieces" not in out:
            raise ServingError(f"Model {self.model!r} returns no fill-mask outputs (it is not a "
                               "pretrained model with its masked-LM head).")
        missing = [k for k in ("mask_positions", "fill_mask_probabilities") if k not in out]
        if missing:
            raise ServingError(f"The server at {self.address} answered fill_mask without "
                               f"{', '.join(missing)}: not the export's fill_mask signature.")
        results = []
        try:
            for positions, pieces, probs in zip(out["mask_positions"], out["fill_mask_pieces"],
                                                out["fill_mask_probabilities"]):
                row = []
                for position, p, q in zip(_tolist(positions), _tolist(pieces), _tolist(probs)):
                    if position < 0:
                        continue
                    row.append([(_text(x), float(y)) for x, y in zip(p, q)])
                results.append(row)
        except (TypeError, ValueError):  # binascii.Error, UnicodeDecodeError included
            raise self._transport.malformed("fill_mask", "outputs that are not masks' candidates",
                                  {k: _tolist(out[k]) for k in ("mask_positions",
                                                                "fill_mask_pieces")}) from None
        return results


def _tolist(value):
    return value.tolist() if hasattr(value, "tolist") else value


def _text(value):
    if isinstance(value, dict) and "b64" in value:
        value = base64.b64decode(value["b64"])
    return value.decode("utf-8") if isinstance(value, bytes) else value


def _fill_examples(container, examples):
    from tensorflow.core.example import example_pb2

    for features in examples:  # raw text (str) or token features (int lists)
        container.append(example_pb2.Example.FromString(example_of(features)))


COMMANDS = {"predict": "a signature's outputs as JSON (default serving_default)",
            "fill_mask": "the top pieces of each [MASK] (a pretrainer's export)",
            "classify": "label:score of each text (a classifier's export)",
            "regress": "the score of each text (a regression head's export)",
            "signatures": "the signatures the model serves"}


PROGRAM = "python -m albert_tf.export.client"
EXAMPLE = f"{PROGRAM} classify --server localhost:8501 --model sst2 --text 'a gripping film'"


def define_flags(flag_values: flags.FlagValues) -> None:
    """The command's flags (absl, as every command's), on `flag_values`: the client's own set,
    not absl's global FLAGS, so that `main(argv)` can be called again in one process and the
    client's --model (a served model's name) and --version (a served version) stay apart from
    the flags of those names of convert and export_saved_model."""
    own = {"flag_values": flag_values}
    flags.DEFINE_string("server", "localhost",
                        "host[:port] or [IPv6]:port, optionally after http:// or https:// (TLS, "
                        "REST and gRPC; the certificate is verified). Default port: 8501 "
                        "(REST), 8500 (gRPC).", **own)
    flags.DEFINE_string("model", None, "Model name on the server (required).", **own)
    flags.DEFINE_enum("protocol", "rest", ["rest", "grpc"], "REST or gRPC.", **own)
    flags.DEFINE_integer("version", None, "Model version (default: the latest the server "
                         "has).", **own)
    flags.DEFINE_string("signature", None, "Signature to call (default: the command's: "
                        "serving_default or serve_text_pair, fill_mask, classify, regress).",
                        **own)
    flags.DEFINE_multi_string("text", [], "A text (repeatable).", **own)
    flags.DEFINE_multi_string("text_b", None, "Second segments (as many as --text).", **own)
    flags.DEFINE_enum("format", "row", ["row", "column"], "REST request format.", **own)
    albert_flags.define(
        "spm_model_file", "max_seq_length", max_seq_length=None, notes={
            "spm_model_file": "classify/regress: tokenize here and send token features "
                              "(default: send raw text, tokenized by the model).",
            "max_seq_length": "With --spm_model_file: the packing length (default: the "
                              "model's, asked from the server)."}, **own)
    flags.DEFINE_string("ca_file", None,
                        "PEM certificate(s) that verify the server's TLS certificate instead of "
                        "the system's CAs: a private CA, or the server's self-signed "
                        "certificate. Implies https:// when --server has no scheme.", **own)
    flags.DEFINE_float("timeout", 30.0, "Seconds for each request as a whole (connecting, "
                       "sending, reading the answer).", **own)


def usage(flag_values: flags.FlagValues) -> str:
    """The --help text: what the client does, its commands, its flags."""
    commands = "\n".join(f"  {name}: {what}" for name, what in COMMANDS.items())
    return (f"{__doc__.strip()}\n\nUsage: {PROGRAM} COMMAND --flag=value ...\n\nCommands:\n"
            f"{commands}\n\nFlags:\n{own_flags_help(flag_values)}")


def parse(argv) -> tuple[str, flags.FlagValues]:
    """(COMMAND, the parsed flags) of a command line (without the program), or UsageError.
    Flags and the command may come in any order; --flagfile works as in every command."""
    words, flag_values = parse_own(define_flags, argv, PROGRAM)
    if flag_values.help:
        return "help", flag_values
    if not words:
        raise UsageError(f"name a command first, one of {', '.join(COMMANDS)}; e.g. {EXAMPLE}")
    if words[0] not in COMMANDS:
        raise UsageError(f"unknown command {words[0]!r}: one of {', '.join(COMMANDS)}; e.g. "
                         f"{EXAMPLE}")
    if len(words) > 1:
        raise UsageError(f"unexpected argument(s) after the command: {' '.join(words[1:])}; a "
                         "value goes with its flag (--text 'two words' or --text='two words')")
    if flag_values.model is None:
        raise UsageError("--model is required: the model's name on the server (the NAME of the "
                         "export's BASE/NAME).")
    return words[0], flag_values


def main(argv=None) -> int:
    """The command: `argv` without the program (default: sys.argv[1:]); the exit status."""
    try:
        command, args = parse(sys.argv[1:] if argv is None else list(argv))
    except UsageError as e:
        print(f"error: {_printable(str(e))}\nRun `{PROGRAM} --help` for the flags.",
              file=sys.stderr)
        return 1
    if command == "help":
        print(usage(args))
        return 0
    # gRPC core's own INFO lines (a failed TLS handshake) would come before the one-line error.
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    try:
        client = ServingClient(args.server, args.model, args.protocol, args.version,
                               args.timeout, args.ca_file)
        if command == "signatures":
            print("\n".join(client.signatures()))
            return 0
        if not args.text:
            raise ServingError("Pass at least one --text.")
        if args.text_b is not None and len(args.text_b) != len(args.text):
            raise ServingError("Pass as many --text_b as --text.")
        if command == "predict":
            inputs = {"text": args.text}
            signature = args.signature or ("serving_default" if args.text_b is None
                                           else "serve_text_pair")
            if args.text_b is not None:
                inputs["text_b"] = args.text_b
            out = client.predict(inputs, signature, row_format=args.format == "row")
            print(json.dumps({k: _tolist(v) for k, v in out.items()}, default=_text))
            report_truncation(args.text, out)
        elif command == "fill_mask":
            for text, masks in zip(args.text, client.fill_mask(args.text,
                                                               args.signature or
                                                               "fill_mask")):
                print(text)
                for i, candidates in enumerate(masks):
                    print(f"  [MASK] {i + 1}: " + ", ".join(f"{_printable(str(p))} {q:.3f}"
                                                            for p, q in candidates))
        else:
            if args.spm_model_file:
                examples = example_features(args.text, args.text_b, args.spm_model_file,
                                            args.max_seq_length or client.max_seq_length())
            else:
                examples = text_examples(args.text, args.text_b)
            if command == "classify":
                for text, row in zip(args.text, client.classify(
                        examples, args.signature or "classify")):
                    print(f"{text}\t" + " ".join(f"{_printable(str(c))}:{s:.4f}"
                                            for c, s in row))
            else:
                for text, value in zip(args.text, client.regress(
                        examples, args.signature or "regress")):
                    print(f"{text}\t{value:.4f}")
    except ServingError as e:
        print(f"error: {_printable(str(e))}", file=sys.stderr)
        return 1
    except OSError as e:  # a file named by a flag (--spm_model_file) that cannot be read
        what = f"cannot read {e.filename}: {e.strerror}" if e.filename else str(e)
        print(f"error: {_printable(what.rstrip('.'))}.", file=sys.stderr)
        return 1
    return 0


def report_truncation(texts, out) -> None:
    """A stderr line for each text the model saw cut to its max_seq_length."""
    if any(k not in out for k in ("truncated", "num_tokens", "max_seq_length")):
        return
    cuts, tokens, lengths = (_tolist(out[k]) for k in ("truncated", "num_tokens",
                                                       "max_seq_length"))
    if not all(isinstance(v, list) and len(v) == len(texts) for v in (cuts, tokens, lengths)):
        return  # not one value per text: nothing this note could say
    for i, cut in enumerate(cuts):
        if cut:
            print(f"note: text {i + 1} ({texts[i][:40]!r}...) has {_printable(str(tokens[i]))} "
                  f"tokens; the model saw the first {_printable(str(lengths[i]))}.",
                  file=sys.stderr)


def cli():
    """The command (`python -m` and the console script in pyproject.toml)."""
    sys.exit(main())


if __name__ == "__main__":
    cli()
