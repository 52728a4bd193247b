"""A stand-in for TF Serving's REST and gRPC front ends, for the client tests (loopback only).

It serves one model from a SavedModel loaded in this process and follows TF Serving's wire
formats: REST `POST /v1/models/NAME[/versions/N]:{predict,classify,regress}` (row `instances`
or column `inputs`, `{"b64": ...}` strings; responses `predictions` / `outputs` / `results`;
errors `{"error": ...}` with TF Serving's messages and status codes) and `GET .../metadata`;
gRPC `tensorflow.serving.PredictionService` Predict / Classify / Regress. It is not TF Serving:
the real server's batching, version policy and threading are not reproduced.
"""

from __future__ import annotations

import base64
import json
import re
import threading
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import tensorflow as tf

from albert_tf.records import example_of


def _from_json(value):
    if isinstance(value, dict) and set(value) == {"b64"}:
        return base64.b64decode(value["b64"])
    if isinstance(value, list):
        return [_from_json(v) for v in value]
    if isinstance(value, str):
        return value.encode("utf-8")
    return value


def _to_json(value):
    if isinstance(value, np.ndarray):
        return [_to_json(v) for v in value] if value.dtype == object else value.tolist()
    if isinstance(value, bytes):
        return value.decode("utf-8")
    return value.item() if hasattr(value, "item") else value


def _examples(rows):
    """TF Serving's reading of JSON examples: a string is a bytes feature, a list of numbers an
    int64 list (`albert_tf.records.example_of`)."""
    return [example_of(row) for row in rows]


class StubModel:
    def __init__(self, name, loaded):
        self.name = name
        self.loaded = loaded

    def signature(self, key):
        if key not in self.loaded.signatures:
            raise KeyError(f'Serving signature name: "{key}" not found in signature def')
        return self.loaded.signatures[key]

    def run(self, key, inputs):
        fn = self.signature(key)
        expected = set(fn.structured_input_signature[1])
        if set(inputs) != expected:
            raise ValueError(f"input size does not match signature: {len(inputs)}!="
                             f"{len(expected)} len({sorted(inputs)}) != len({sorted(expected)})")
        tensors = {k: tf.constant(v, dtype=fn.structured_input_signature[1][k].dtype)
                   for k, v in inputs.items()}
        return {k: v.numpy() for k, v in fn(**tensors).items()}


def serve_rest(model: StubModel):
    """Starts the REST stub on 127.0.0.1 (a free port); returns (server, port)."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _reply(self, status, body):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _route(self):
            match = re.fullmatch(r"/v1/models/([^/:]+)(?:/versions/(\d+))?(?::(\w+)|/(metadata))?",
                                 self.path)
            if not match:
                self._reply(404, {"error": "Malformed request: " + self.path})
                return None
            name, version, verb, meta = match.groups()
            if name != model.name or (version is not None and version != "1"):
                what = f"Latest({name})" if version is None else f"Specific({name}, {version})"
                self._reply(404, {"error": f"Servable not found for request: {what}"})
                return None
            return verb or meta

        def do_GET(self):  # noqa: N802
            if self._route() == "metadata":
                defs = {k: {"method_name": "tensorflow/serving/predict"}
                        for k in model.loaded.signatures}
                self._reply(200, {"model_spec": {"name": model.name, "version": "1"},
                                  "metadata": {"signature_def": {"signature_def": defs}}})

        def do_POST(self):  # noqa: N802
            verb = self._route()
            if verb is None:
                return
            try:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            except ValueError as e:
                self._reply(400, {"error": f"JSON Parse error: {e}"})
                return
            key = body.get("signature_name", "serving_default")
            try:
                if verb == "predict":
                    self._reply(200, self._predict(key, body))
                elif verb in ("classify", "regress"):
                    out = model.run(key, {"inputs": _examples(body["examples"])})
                    if verb == "classify":
                        results = [[[c.decode(), float(s)] for c, s in zip(cs, ss)]
                                   for cs, ss in zip(out["classes"], out["scores"])]
                    else:
                        results = out["outputs"].tolist()
                    self._reply(200, {"results": results})
                else:
                    self._reply(400, {"error": f"Unknown method: {verb}"})
            except KeyError as e:
                self._reply(400, {"error": str(e).strip("'\"")})
            except (ValueError, tf.errors.InvalidArgumentError) as e:
                self._reply(400, {"error": getattr(e, "message", str(e))})

        def _predict(self, key, body):
            if "instances" in body:
                instances = body["instances"]
                if instances and isinstance(instances[0], dict):
                    inputs = {k: [_from_json(i[k]) for i in instances] for k in instances[0]}
                else:
                    names = list(model.signature(key).structured_input_signature[1])
                    inputs = {names[0]: _from_json(instances)}
                out = model.run(key, inputs)
                n = len(next(iter(out.values())))
                return {"predictions": [{k: _to_json(v[i]) for k, v in out.items()}
                                        for i in range(n)]}
            if "inputs" in body:
                inputs = {k: _from_json(v) for k, v in body["inputs"].items()}
                out = model.run(key, inputs)
                return {"outputs": {k: _to_json(v) for k, v in out.items()}}
            raise ValueError("Missing 'inputs' or 'instances' key")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, server.server_address[1]


def serve_grpc(model: StubModel):
    """Starts the gRPC stub on 127.0.0.1 (a free port); returns (server, port)."""
    import grpc
    from tensorflow_serving.apis import (classification_pb2, predict_pb2,
                                         prediction_service_pb2_grpc, regression_pb2)

    class Service(prediction_service_pb2_grpc.PredictionServiceServicer):
        def _check(self, request, context):
            if request.model_spec.name != model.name:
                context.abort(grpc.StatusCode.NOT_FOUND,
                              f"Servable not found for request: Latest({request.model_spec.name})")

        def _call(self, context, key, inputs):
            try:
                return model.run(key, inputs)
            except KeyError as e:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e).strip("'\""))
            except (ValueError, tf.errors.InvalidArgumentError) as e:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, getattr(e, "message", str(e)))

        def Predict(self, request, context):  # noqa: N802
            self._check(request, context)
            key = request.model_spec.signature_name or "serving_default"
            out = self._call(context, key, {k: tf.make_ndarray(v)
                                            for k, v in request.inputs.items()})
            response = predict_pb2.PredictResponse()
            for k, v in out.items():
                response.outputs[k].CopyFrom(tf.make_tensor_proto(v))
            return response

        def _call_examples(self, request, context):
            """The outputs of a Classify/Regress request: its tf.Examples, serialized, fed
            to the named signature."""
            self._check(request, context)
            examples = [e.SerializeToString() for e in request.input.example_list.examples]
            return self._call(context, request.model_spec.signature_name, {"inputs": examples})

        def Classify(self, request, context):  # noqa: N802
            out = self._call_examples(request, context)
            response = classification_pb2.ClassificationResponse()
            for classes, scores in zip(out["classes"], out["scores"]):
                row = response.result.classifications.add()
                for c, s in zip(classes, scores):
                    row.classes.add(label=c.decode(), score=float(s))
            return response

        def Regress(self, request, context):  # noqa: N802
            out = self._call_examples(request, context)
            response = regression_pb2.RegressionResponse()
            for value in out["outputs"]:
                response.result.regressions.add(value=float(value))
            return response

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(Service(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, port
