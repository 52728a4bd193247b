"""`albert_tf.export.client` against stand-ins of TF Serving's REST and gRPC front ends
(tests/serving_stub.py) serving the exported SavedModels: request encoding (row and column formats,
b64 bytes, tf.Example features), responses equal to calling the signatures directly, and errors that
name the cause."""

import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import grpc
import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

from albert_tf.tokenization import Tokenizer
from albert_tf.export.client import (ServingClient, ServingError, encode_rest_request,
                                     example_features,
                           main, text_examples)
from serving_stub import StubModel, serve_grpc, serve_rest

ROOT = Path(__file__).resolve().parents[1]

TEXTS = ["The capital of France is [MASK].", "Alice was [MASK] [MASK] of sitting by her sister"]
SST = ["a gripping , funny film", "dull and overlong", "It cost 1,000 pounds"]


def test_rest_request_encoding():
    body = encode_rest_request({"text": ["héllo", b"\xff\xferaw"], "text_b": ["a", "b"]},
                               "serve_text_pair")
    assert body == {"signature_name": "serve_text_pair",
                    "instances": [{"text": "héllo", "text_b": "a"},
                                  {"text": {"b64": "//5yYXc="}, "text_b": "b"}]}
    assert encode_rest_request({"text": ["x"]}, "serving_default") == {
        "signature_name": "serving_default", "instances": ["x"]}
    column = encode_rest_request({"input_ids": np.array([[2, 5, 3]]),
                                  "input_mask": [[1, 1, 1]]}, "serve_tokens", row_format=False)
    assert column == {"signature_name": "serve_tokens",
                      "inputs": {"input_ids": [[2, 5, 3]], "input_mask": [[1, 1, 1]]}}
    with pytest.raises(ServingError, match="same number of values for every input"):
        encode_rest_request({"text": ["a", "b"], "text_b": ["c"]}, "serve_text_pair")


@pytest.fixture(scope="module")
def servers(exported):
    started = {}
    for kind in ("pretrainer", "classifier", "regressor"):
        model = StubModel(kind, exported[kind][2])
        started[kind] = {"rest": serve_rest(model), "grpc": serve_grpc(model)}
    yield started
    for pair in started.values():
        pair["rest"][0].shutdown()
        pair["grpc"][0].stop(0)


def _client(servers, kind, protocol, model=None):
    port = servers[kind][protocol][1]
    # Generous: the stub traces a signature on its first call, slow on a loaded machine.
    return ServingClient(f"127.0.0.1:{port}", model or kind, protocol=protocol, timeout=120)


@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["rest", "grpc"])
def test_predict_and_fill_mask_equal_the_signature(servers, exported, protocol):
    _, _, loaded = exported["pretrainer"]
    expected = loaded.signatures["serving_default"](text=tf.constant(TEXTS))
    client = _client(servers, "pretrainer", protocol)
    formats = (True, False) if protocol == "rest" else (True,)
    for row_format in formats:
        out = client.predict({"text": TEXTS}, row_format=row_format)
        assert set(out) == set(expected)
        np.testing.assert_allclose(np.array(out["pooled_output"], np.float32),
                                   expected["pooled_output"].numpy(), atol=1e-6)
        np.testing.assert_array_equal(np.array(out["input_ids"]),
                                      expected["input_ids"].numpy())
    masks = client.fill_mask(TEXTS)
    assert [len(m) for m in masks] == [1, 2]
    pieces = expected["fill_mask_pieces"].numpy()
    probs = expected["fill_mask_probabilities"].numpy()
    for row, per_text in enumerate(masks):
        for m, candidates in enumerate(per_text):
            assert [p for p, _ in candidates] == [x.decode() for x in pieces[row, m]]
            np.testing.assert_allclose([q for _, q in candidates], probs[row, m], atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["rest", "grpc"])
def test_classify_and_regress(servers, exported, sample_vocab, protocol):
    examples = example_features(SST, spm_model_file=sample_vocab, max_seq_length=48)
    tok = Tokenizer(sample_vocab)
    assert examples[2]["input_ids"][1:-1] == tok.encode_with_masks(SST[2])
    # The model on these token features (SST[2]'s "000" is a tie between equal-score
    # segmentations, which the in-graph tokenizer breaks the other way: docs/differences.md).
    tokens = {name: tf.constant([e[name] + [0] * (48 - len(e[name])) for e in examples])
              for name in ("input_ids", "input_mask", "segment_ids")}
    _, _, loaded = exported["classifier"]
    expected = loaded.signatures["serve_tokens"](**tokens)["probabilities"]
    rows = _client(servers, "classifier", protocol).classify(examples)
    assert [[c for c, _ in row] for row in rows] == [["neg", "neutral", "pos"]] * 3
    np.testing.assert_allclose([[s for _, s in row] for row in rows], expected.numpy(),
                               atol=1e-6)
    _, _, loaded = exported["regressor"]
    values = _client(servers, "regressor", protocol).regress(examples)
    np.testing.assert_allclose(values, loaded.signatures["serve_tokens"](**tokens)[
        "score"].numpy(), atol=1e-6)
    expected = loaded.signatures["serving_default"](text=tf.constant(SST))["score"]
    # Raw text: the model tokenizes (no SentencePiece model here), same answers; the client
    # learns the model's max_seq_length from the server.
    client = _client(servers, "classifier", protocol)
    assert client.max_seq_length() == 48
    rows = client.classify(text_examples(SST))
    np.testing.assert_allclose([[s for _, s in row] for row in rows],
                               loaded_probabilities(exported, SST), atol=1e-6)
    np.testing.assert_allclose(_client(servers, "regressor", protocol).regress(
        text_examples(SST)), expected.numpy(), atol=1e-6)


def loaded_probabilities(exported, texts):
    _, _, loaded = exported["classifier"]
    return loaded.signatures["serving_default"](text=tf.constant(texts))["probabilities"].numpy()


@pytest.mark.parametrize("protocol", ["rest", "grpc"])
def test_errors_name_the_cause(servers, protocol):
    with socket.socket() as s:  # a port where nothing listens
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    down = ServingClient(f"127.0.0.1:{free}", "albert", protocol=protocol, timeout=3)
    with pytest.raises(ServingError, match=r"Cannot reach TF Serving at 127.0.0.1:\d+ over "
                                           + protocol.replace("rest", "REST").replace("grpc",
                                                                                      "gRPC")):
        down.predict({"text": ["x"]})
    with pytest.raises(ServingError, match=r"does not serve model 'albrt'.*Servable not found"):
        _client(servers, "pretrainer", protocol, model="albrt").predict({"text": ["x"]})
    with pytest.raises(ServingError, match=r"has no signature 'serve_txt'"
                                           + (r".*signatures: fill_mask, serve_examples, "
                                              r"serve_text_pair, serve_tokens, serving_default"
                                              if protocol == "rest" else "")):
        _client(servers, "pretrainer", protocol).predict({"text": ["x"]}, "serve_txt")
    with pytest.raises(ServingError, match=r"(?s)refused the request.*input size does not match"):
        _client(servers, "pretrainer", protocol).predict({"txt": ["x"], "text_b": ["y"]})
    with pytest.raises(ServingError, match=r"(?s)refused the request.*max_position_embeddings=64"):
        _client(servers, "pretrainer", protocol).predict(
            {"input_ids": [[2] * 70], "input_mask": [[1] * 70], "segment_ids": [[0] * 70]},
            "serve_tokens")


@pytest.mark.slow
def test_command_line(servers, capsys, sample_vocab):
    port = servers["pretrainer"]["rest"][1]
    assert main(["fill_mask", "--server", f"127.0.0.1:{port}", "--model", "pretrainer",
                 "--text", TEXTS[0]]) == 0
    out = capsys.readouterr().out
    assert out.startswith(TEXTS[0]) and "[MASK] 1:" in out
    port = servers["classifier"]["grpc"][1]
    assert main(["classify", "--server", f"127.0.0.1:{port}", "--protocol", "grpc", "--model",
                 "classifier", "--spm_model_file", sample_vocab, "--text", SST[0]]) == 0
    assert capsys.readouterr().out.startswith(SST[0] + "\tneg:")
    assert main(["classify", "--server", f"127.0.0.1:{port}", "--model", "classifier",
                 "--protocol", "grpc", "--text", SST[0]]) == 0  # raw text, no tokenizer here
    assert capsys.readouterr().out.startswith(SST[0] + "\tneg:")
    port = servers["classifier"]["rest"][1]
    long_text = "a long review that goes on " * 20
    assert main(["predict", "--server", f"127.0.0.1:{port}", "--model", "classifier",
                 "--text", SST[0], "--text", long_text]) == 0
    printed = capsys.readouterr()
    err = printed.err
    assert re.search(r"note: text 2 .* has \d+ tokens; the model saw the first 48\.", err), err
    assert "text 1" not in err
    # serving_default answers the label names given at export beside the ids, REST and gRPC
    answer = json.loads(printed.out)
    assert answer["label_name"] == [["neg", "neutral", "pos"][i] for i in answer["label"]]
    port = servers["classifier"]["grpc"][1]
    assert main(["predict", "--server", f"127.0.0.1:{port}", "--model", "classifier",
                 "--protocol", "grpc", "--text", SST[0], "--text", long_text]) == 0
    assert json.loads(capsys.readouterr().out)["label_name"] == answer["label_name"]


# -------------------------------------------------------------------------------------------------
# A hostile or mistaken server: scripted answers over loopback HTTP / HTTPS (no model needed).

PREDICTION = b'{"predictions": [[1.5, 2.5]]}'


class _Scripted(ThreadingHTTPServer):
    """Answers every request with one scripted reply, over TLS when given a server context, and
    records what came over the wire: each connection's first bytes (before any TLS), the TLS
    version negotiated, the request paths, and the connections that failed."""

    daemon_threads = True
    block_on_close = False

    def __init__(self, reply, tls=None, family=socket.AF_INET, host="127.0.0.1"):
        self.address_family = family
        self.reply = reply
        self.tls = tls
        self.first_bytes, self.tls_versions, self.paths, self.failures = [], [], [], []
        super().__init__((host, 0), _ScriptedHandler)
        self.port = self.server_address[1]
        threading.Thread(target=self.serve_forever, args=(0.05,), daemon=True).start()

    def finish_request(self, request, client_address):
        request.settimeout(20)
        try:
            self.first_bytes.append(request.recv(16, socket.MSG_PEEK))
            if self.tls is not None:
                request = self.tls.wrap_socket(request, server_side=True)
                self.tls_versions.append(request.version())
            super().finish_request(request, client_address)
        except OSError as e:  # the client refused our certificate, or gave up waiting
            self.failures.append(e)
        finally:
            if self.tls is not None:
                request.close()


class _ScriptedHandler(BaseHTTPRequestHandler):
    """reply: status, content type, body, and optionally `drip` ("head": the whole answer, or
    "body": the body after the head, one byte per 0.5 s), `raw` (the body is the whole answer,
    not HTTP) and extra `headers`."""

    def log_message(self, *args):
        pass

    def do_GET(self):  # noqa: N802
        self._answer()

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self._answer()

    def _answer(self):
        self.server.paths.append(self.path)
        reply = self.server.reply
        body = reply["body"]
        head = f"HTTP/1.1 {reply.get('status', 200)} Scripted\r\n"
        if reply.get("type"):
            head += f"Content-Type: {reply['type']}\r\n"
        for name, value in reply.get("headers", {}).items():
            head += f"{name}: {value}\r\n"
        head = (head + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
        answer = body if reply.get("raw") else head + body
        drip = reply.get("drip")
        if drip is None:
            self.wfile.write(answer)
            return
        if drip == "body":
            self.wfile.write(head)
            answer = body
        for i in range(len(answer)):
            self.wfile.write(answer[i:i + 1])
            time.sleep(0.5)


@pytest.fixture
def web():
    started = []

    def start(reply, **kwargs):
        started.append(_Scripted(reply, **kwargs))
        return started[-1]

    yield start
    for server in started:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    """A self-signed certificate for localhost / 127.0.0.1, made with the openssl command:
    (certificate path, key path, a server SSLContext holding them)."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make a self-signed certificate")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "server.pem", folder / "server.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "2", "-subj", "/CN=localhost", "-addext",
                    "subjectAltName=DNS:localhost,IP:127.0.0.1"], check=True,
                   capture_output=True)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return str(cert), str(key), context


def _command(capsys, *args):
    """(exit status, stdout, stderr) of the command in this process; a traceback fails the test
    by escaping main()."""
    status = main(list(args))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def _one_line_error(status, out, err):
    assert status == 1 and out == "", (status, out, err)
    assert err.startswith("error: ") and err.count("\n") == 1 and err.endswith("\n"), err
    return err


def test_https_verifies_the_server_certificate(web, certificate, capsys):
    cert, _, context = certificate
    server = web({"type": "application/json", "body": PREDICTION}, tls=context)
    https = f"https://127.0.0.1:{server.port}"
    # (a) A certificate no trusted CA signed: refused, and the text was never sent.
    err = _one_line_error(*_command(capsys, "predict", "--server", https, "--model", "m",
                                    "--text", "secret text", "--timeout", "5"))
    assert f"The TLS certificate of 127.0.0.1:{server.port} does not verify" in err, err
    assert re.search(r"self.signed certificate", err) and "pass --ca_file" in err, err
    assert server.first_bytes[0][:1] == b"\x16"  # a TLS handshake record, not "POST ..."
    assert server.paths == [] and len(server.tls_versions) == 0
    # (b) With the certificate as the CA: answered, over TLS; a --ca_file alone means https.
    for address in (https, f"127.0.0.1:{server.port}"):
        status, out, err = _command(capsys, "predict", "--server", address, "--model", "m",
                                    "--text", "secret text", "--ca_file", cert)
        assert (status, out, err) == (0, '{"output": [[1.5, 2.5]]}\n', "")
    assert [b[:1] for b in server.first_bytes] == [b"\x16"] * 3
    assert server.tls_versions[-2:] == ["TLSv1.3"] * 2
    assert server.paths == ["/v1/models/m:predict"] * 2
    # (c) http:// stays plain HTTP, and a --ca_file there is a contradiction, not a downgrade.
    plain = web({"type": "application/json", "body": PREDICTION})
    status, out, err = _command(capsys, "predict", "--server", f"http://127.0.0.1:{plain.port}",
                                "--model", "m", "--text", "x")
    assert (status, out, err) == (0, '{"output": [[1.5, 2.5]]}\n', "")
    assert [b[:4] for b in plain.first_bytes] == [b"POST"]  # plain HTTP on the wire
    err = _one_line_error(*_command(capsys, "predict", "--server",
                                    f"http://127.0.0.1:{plain.port}", "--model", "m",
                                    "--text", "x", "--ca_file", cert))
    assert "--ca_file asks for TLS, but --server" in err and "use https://" in err, err
    assert len(plain.paths) == 1


def test_https_refuses_redirects(web, certificate, capsys):
    cert, _, context = certificate
    server = web({"status": 307, "body": b"", "headers": {"Location": "http://127.0.0.1:1/"}},
                 tls=context)
    err = _one_line_error(*_command(capsys, "predict", "--server",
                                    f"https://127.0.0.1:{server.port}", "--model", "m",
                                    "--text", "x", "--ca_file", cert))
    assert "a redirect to http://127.0.0.1:1/" in err and "follows none" in err, err


class _EchoService(prediction_service_pb2_grpc.PredictionServiceServicer):
    """Predict answers its `text` input as `echo`, and records the transport's security; the
    text "slow" waits until the test ends."""

    def __init__(self):
        self.security = []
        self.release = threading.Event()

    def Predict(self, request, context):  # noqa: N802
        self.security.append(context.auth_context().get("transport_security_type"))
        text = tf.make_ndarray(request.inputs["text"])
        if text[0] == b"slow":
            self.release.wait(30)
        response = predict_pb2.PredictResponse()
        response.outputs["echo"].CopyFrom(tf.make_tensor_proto(text))
        return response


@pytest.fixture
def grpc_tls(certificate):
    cert, key, _ = certificate
    service = _EchoService()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(service, server)
    port = server.add_secure_port("127.0.0.1:0", grpc.ssl_server_credentials(
        [(Path(key).read_bytes(), Path(cert).read_bytes())]))
    server.start()
    yield port, service
    service.release.set()
    server.stop(0)


def test_grpc_over_tls_and_its_deadline(grpc_tls, certificate):
    port, service = grpc_tls
    cert = certificate[0]
    for server in (f"https://127.0.0.1:{port}", f"127.0.0.1:{port}"):  # --ca_file: TLS
        client = ServingClient(server, "m", protocol="grpc", timeout=5, ca_file=cert)
        assert client.predict({"text": ["secret"]})["echo"].tolist() == [b"secret"]
    assert service.security == [[b"ssl"], [b"ssl"]]
    with pytest.raises(ServingError, match=rf"TLS certificate of 127.0.0.1:{port} does not "
                                           r"verify.*pass --ca_file"):
        ServingClient(f"https://127.0.0.1:{port}", "m", protocol="grpc",
                      timeout=5).predict({"text": ["x"]})
    with pytest.raises(ServingError, match=rf"Cannot reach TF Serving at 127.0.0.1:{port} "
                                           r"over gRPC.*If it takes TLS, use https://"):
        ServingClient(f"127.0.0.1:{port}", "m", protocol="grpc", timeout=2).predict(
            {"text": ["x"]})
    assert len(service.security) == 2  # neither reached the service
    # The timeout is the whole call's deadline.
    start = time.monotonic()
    with pytest.raises(ServingError, match=rf"TF Serving at 127.0.0.1:{port} did not answer "
                                           r"within --timeout 1 s"):
        ServingClient(f"https://127.0.0.1:{port}", "m", protocol="grpc", timeout=1,
                      ca_file=cert).predict({"text": ["slow"]})
    assert 0.9 < time.monotonic() - start < 2.0


@pytest.mark.parametrize("drip", ["head", "body"])
def test_timeout_bounds_the_whole_request(web, capsys, drip):
    """A server that drips its answer (one byte per 0.5 s, 40 s in all) defeats a per-read
    socket timeout; --timeout bounds the request as a whole."""
    server = web({"type": "application/json", "body": b'{"predictions": [[0.0]]}'.ljust(80),
                  "drip": drip})
    start = time.monotonic()
    err = _one_line_error(*_command(capsys, "predict", "--server", f"127.0.0.1:{server.port}",
                                    "--model", "m", "--text", "x", "--timeout", "2"))
    elapsed = time.monotonic() - start
    assert 1.9 < elapsed < 3.0, elapsed
    assert (f"TF Serving at 127.0.0.1:{server.port} did not answer within --timeout 2 s (it "
            "bounds the whole request") in err, err


NOT_A_SERVER = "not TF Serving's JSON. Is 127.0.0.1:{port} TF Serving's REST port"


def _case(name, command, options, reply, expected):
    return pytest.param(command, options, reply, expected, id=name)


def _json(body, **reply):
    return {"type": "application/json", "body": body, **reply}


@pytest.mark.parametrize("command, options, reply, expected", [
    _case("port-not-a-number", "predict", ["--server", "localhost:notaport"], None,
          "--server 'localhost:notaport': the port 'notaport' is not a number from 1 to 65535"),
    _case("port-too-large", "predict", ["--server", "localhost:70000"], None,
          "the port '70000' is not a number from 1 to 65535"),
    _case("port-empty", "predict", ["--server", "localhost:"], None,
          "the port '' is not a number from 1 to 65535"),
    _case("ipv6-unclosed", "predict", ["--server", "[::1"], None,
          "--server '[::1': the IPv6 address has no closing ']'"),
    _case("ipv6-no-brackets", "predict", ["--server", "::1:8501"], None,
          ("--server '::1:8501': write an IPv6 address in brackets, the port after them: "
           "--server [::1]:8501")),
    _case("brackets-not-ipv6", "predict", ["--server", "[localhost]:8501"], None,
          "'localhost' in brackets is not an IPv6 address"),
    _case("ipv6-junk-after", "predict", ["--server", "[::1]8501"], None,
          "after the IPv6 address comes nothing or ':PORT'"),
    _case("scheme", "predict", ["--server", "ftp://localhost"], None,
          "ftp:// is not supported; use http:// or https://"),
    _case("no-host", "predict", ["--server", "http://"], None, "--server 'http://': no host"),
    _case("host-with-space", "predict", ["--server", "local host:8501"], None,
          "'local host' is not a host name or IP address"),
    _case("query", "predict", ["--server", "h:1/v1?x=1"], None,
          "no user name, query or fragment"),
    _case("user", "predict", ["--server", "user@h:1"], None, "no user name, query or fragment"),
    _case("grpc-path", "predict", ["--server", "h:1/prefix", "--protocol", "grpc"], None,
          "--server 'h:1/prefix': a gRPC server has no URL path"),
    _case("ca-file-missing", "predict", ["--ca_file", "/no/such/ca.pem"], None,
          "--ca_file '/no/such/ca.pem': cannot read it"),
    _case("ca-file-not-pem", "predict", ["--ca_file", __file__], None,
          "holds no PEM certificate"),
    _case("timeout-zero", "predict", ["--timeout", "0"], None,
          "--timeout must be a positive number of seconds, at most 86400 (a day); got 0.0"),
    _case("timeout-nan", "predict", ["--timeout", "nan"], None,
          "--timeout must be a positive number of seconds, at most 86400 (a day); got nan"),
    _case("timeout-huge", "predict", ["--timeout", "1e10"], None,
          "--timeout must be a positive number of seconds, at most 86400 (a day); got 1000000"
          "0000.0"),
    _case("model-path", "predict", ["--model", "../../admin"], None,
          "--model '../../admin' is not a model name"),
    _case("model-query", "predict", ["--model", "a b?x=1#f"], None,
          "--model 'a b?x=1#f' is not a model name"),
    _case("version-huge", "predict", ["--version", "99999999999999999999"], None,
          "--version must be a version number (0 to 2^63 - 1)"),
    _case("html-200", "predict", [],
          {"type": "text/html", "body": b"<!DOCTYPE html>\n<html><body>Sign in</body></html>"},
          ("answered predict with an HTML page ('<!DOCTYPE html> <html><body>Sign in</body>"
           "</html>') (HTTP 200), " + NOT_A_SERVER)),
    _case("text-200", "predict", [], {"type": "text/plain", "body": b"hello\x1b[2J world"},
          ("answered predict with a body that is not JSON ('hello\\x1b[2J world') (HTTP 200), "
           + NOT_A_SERVER)),
    _case("not-utf8", "predict", [], _json(b"\xff\xfe{"), "a body that is not JSON"),
    _case("empty-200", "predict", [], _json(b""),
          "answered predict with an empty body (HTTP 200), " + NOT_A_SERVER),
    _case("json-list", "predict", [], _json(b"[1, 2]"),
          "answered predict with JSON that is not an object ('[1, 2]') (HTTP 200)"),
    _case("no-predictions", "predict", [], _json(b'{"results": [[1]]}'),
          ("answered predict with JSON that has no 'predictions' or 'outputs' (its keys: "
           "results)")),
    _case("predictions-number", "predict", [], _json(b'{"predictions": 5}'),
          ("Unexpected predict answer from TF Serving at 127.0.0.1:{port}: 'predictions' is not "
           "a list: 5")),
    _case("predictions-mixed", "predict", [], _json(b'{"predictions": [{"a": 1}, 2]}'),
          "'predictions' mixes rows of different outputs"),
    _case("outputs-number", "predict", [], _json(b'{"outputs": 3}'),
          "'outputs' is not a list or an object: 3"),
    _case("no-results", "classify", [], _json(PREDICTION),
          "answered classify with JSON that has no 'results' (its keys: predictions)"),
    _case("results-malformed", "classify", [], _json(b'{"results": [[["pos", "high"]]]}'),
          "answered classify with results that are not [[class, score], ...] per example"),
    _case("results-too-few", "classify", [], _json(b'{"results": [[["pos", 0.5]]]}'),
          "answered classify with results for 1 examples, not 2"),
    _case("regress-malformed", "regress", [], _json(b'{"results": {"a": 1}}'),
          "answered regress with results that are not one number per example"),
    _case("fill-mask-partial", "fill_mask", [],
          _json(b'{"predictions": [{"fill_mask_pieces": [["a"]]}]}'),
          "answered fill_mask without mask_positions, fill_mask_probabilities"),
    _case("metadata-malformed", "signatures", [], _json(b'{"metadata": 5}'),
          "answered metadata with no signature_def map"),
    _case("not-http", "signatures", [], {"raw": True, "body": b"SSH-2.0-OpenSSH_9.6\r\n"},
          "answered something that is not HTTP"),
    _case("html-502", "predict", [],
          {"status": 502, "type": "text/html", "body": b"<html>\x1b]0;pwned\x07</html>"},
          "The server refused the request to 'm' (signature 'serving_default'): HTTP 502 Scripted"),
])
def test_bad_input_is_a_one_line_error(web, capsys, command, options, reply, expected):
    server = web(reply) if reply is not None else None
    address = ["--server", f"127.0.0.1:{server.port}"] if server else []
    texts = ["--text", "one", "--text", "two"] if command == "classify" else ["--text", "x"]
    err = _one_line_error(*_command(capsys, command, "--model", "m", "--timeout", "5",
                                    *address, *texts, *options))
    assert expected.format(port=server.port if server else "") in err, err
    assert "\x1b" not in err and "\x07" not in err


def test_ipv6_addresses(web):
    assert ServingClient("[::1]:8501", "m").address == "[::1]:8501"
    assert ServingClient("[::1]", "m", protocol="grpc").address == "[::1]:8500"
    assert ServingClient("https://[::1]/", "m").address == "[::1]:8501"
    assert ServingClient("http://localhost:8501/", "m").address == "localhost:8501"
    assert ServingClient("HTTPS://gateway:443/serving/", "m", version=2)._transport.model_url() == \
        "https://gateway:443/serving/v1/models/m/versions/2"  # REST behind a proxy's path
    try:
        server = web({"type": "application/json", "body": PREDICTION}, family=socket.AF_INET6,
                     host="::1")
    except OSError:
        pytest.skip("no IPv6 loopback here")
    client = ServingClient(f"[::1]:{server.port}", "m", timeout=5)
    assert client.predict({"text": ["x"]}) == {"output": [[1.5, 2.5]]}
    assert server.paths == ["/v1/models/m:predict"]


def test_the_command_prints_one_line_and_exits_1(web):
    """`python -m albert_tf.export.client` itself, against a web page: one line, status 1."""
    server = web({"type": "text/html", "body": b"<html><body>It works!</body></html>"})
    done = subprocess.run([sys.executable, "-m", "albert_tf.export.client", "predict", "--server",
                           f"127.0.0.1:{server.port}", "--model", "m", "--text", "x"],
                          check=False, cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 1 and done.stdout == "", done
    assert done.stderr.startswith(f"error: The server at 127.0.0.1:{server.port} answered "
                                  "predict with an HTML page") and done.stderr.count("\n") == 1, \
        done.stderr
