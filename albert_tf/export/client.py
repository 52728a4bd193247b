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
import json
import math
import os
import ssl
import sys

from absl import flags

from albert_tf.commands import flags as albert_flags
from albert_tf.commands.flags import UsageError, own_flags_help, parse_own
from albert_tf.export.transport import (DEFAULT_PORTS, MAX_TIMEOUT_S, MODEL_NAME, GrpcEndpoint,
                                        RestEndpoint, ServingError, decode_rest_response,
                                        encode_rest_request, parse_server, printable)
from albert_tf.packing import pack_ids
from albert_tf.records import example_of
from albert_tf.tokenization import Tokenizer


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
            self._transport = RestEndpoint(*endpoint, path, ssl_context)
        else:
            ca_pem = None
            if ca_file:
                with open(ca_file, "rb") as f:  # readable: _tls_context loaded it
                    ca_pem = f.read()
            self._transport = GrpcEndpoint(*endpoint, ca_pem)

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
                raise self._transport.malformed(
                    "classify", "results that are not [[class, score], ...] per example",
                    results) from None
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
                raise self._transport.malformed(
                    "regress", "results that are not one number per example", results) from None
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
        print(f"error: {printable(str(e))}\nRun `{PROGRAM} --help` for the flags.",
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
                    print(f"  [MASK] {i + 1}: " + ", ".join(f"{printable(str(p))} {q:.3f}"
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
                    print(f"{text}\t" + " ".join(f"{printable(str(c))}:{s:.4f}"
                                            for c, s in row))
            else:
                for text, value in zip(args.text, client.regress(
                        examples, args.signature or "regress")):
                    print(f"{text}\t{value:.4f}")
    except ServingError as e:
        print(f"error: {printable(str(e))}", file=sys.stderr)
        return 1
    except OSError as e:  # a file named by a flag (--spm_model_file) that cannot be read
        what = f"cannot read {e.filename}: {e.strerror}" if e.filename else str(e)
        print(f"error: {printable(what.rstrip('.'))}.", file=sys.stderr)
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
            print(f"note: text {i + 1} ({texts[i][:40]!r}...) has {printable(str(tokens[i]))} "
                  f"tokens; the model saw the first {printable(str(lengths[i]))}.",
                  file=sys.stderr)


def cli():
    """The command (`python -m` and the console script in pyproject.toml)."""
    sys.exit(main())


if __name__ == "__main__":
    cli()
