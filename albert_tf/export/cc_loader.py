"""Build and run `serving_loader.cc`: our stand-in for TF Serving's model loading.

The TF Serving binary is not installable on our machines; what it does to a SavedModel is
`tensorflow::LoadSavedModel(tag "serve")` into a `SavedModelBundle`, then `Session::Run` with the
tensor names of a signature_def, with tensorflow-text's ops linked in. `serving_loader.cc` does
exactly that, compiled against the headers and libraries of a pip `tensorflow` wheel and loading
tensorflow-text's op libraries with `TF_LoadLibrary`. `compile_loader` builds it for the
TensorFlow of any Python environment (this one, or a TF 2.20 environment to check what the TF
Serving 2.20 release can load:
`python -m albert_tf.export.cc_loader --python /tmp/tf220/bin/python`).
"""

from __future__ import annotations

from albert_tf.paths import atomic_write
from albert_tf.quiet import entry_point  # noqa: E402

entry_point(__name__)  # run as a program: TF's start-up lines filtered (albert_tf.quiet)

import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
from absl import flags

from albert_tf.commands.flags import UsageError, own_flags_help, parse_own  # noqa: E402
from albert_tf.records import example_of  # noqa: E402
from albert_tf.export.client import text_examples  # noqa: E402

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "serving_loader.cc")

_PROBE = """
import glob, json, os, tensorflow as tf, tensorflow_text
ops = os.path.join(os.path.dirname(tensorflow_text.__file__), "python", "ops")
print(json.dumps({"version": tf.__version__, "text_version": tensorflow_text.__version__,
                  "compile": tf.sysconfig.get_compile_flags(), "link": tf.sysconfig.get_link_flags(),
                  "lib_dir": tf.sysconfig.get_lib(),
                  "op_libraries": sorted(glob.glob(os.path.join(ops, "_*.so")))}))
"""


class LoaderError(RuntimeError):
    """The loader could not be built or the model could not be loaded or run."""


def tensorflow_info(python: str = sys.executable) -> dict:
    """Compile/link flags, version and tensorflow-text op libraries of `python`'s TensorFlow."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    out = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, env=env)
    if out.returncode:
        raise LoaderError(f"{python} cannot import tensorflow and tensorflow_text:\n"
                          f"{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def compile_loader(info: dict, output: str) -> str:
    """g++ serving_loader.cc against the wheel described by `info` (about 20 s)."""
    lib_dir = info["lib_dir"]
    cmd = ["g++", "-O1", SOURCE, "-o", output, *info["compile"], *info["link"],
           os.path.join(lib_dir, "libtensorflow_cc.so.2"), f"-Wl,-rpath,{lib_dir}"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode:
        raise LoaderError("compiling the loader failed:\n" + " ".join(cmd) + "\n"
                          + out.stderr[-4000:])
    return output


def _launch(binary: str, saved_model: str, op_libraries, signature: str, inputs: dict | None,
            workdir: str | None, extra=()):
    """Runs the loader with `inputs` written as TensorProto files and `--output_dir` when there
    are inputs; returns (its stdout, {output key: array} of the outputs it wrote)."""
    import numpy as np
    from tensorflow.core.framework import tensor_pb2
    from tensorflow.python.framework import tensor_util

    workdir = workdir or tempfile.mkdtemp(prefix="serving_loader-")
    out_dir = os.path.join(workdir, "out")
    os.makedirs(out_dir, exist_ok=True)
    args = [binary, "--saved_model", saved_model, "--signature", signature, *extra]
    for library in op_libraries:
        args += ["--op_library", library]
    for name, value in (inputs or {}).items():
        path = os.path.join(workdir, f"in-{name}.pb")
        with open(path, "wb") as f:
            f.write(tensor_util.make_tensor_proto(np.asarray(value)).SerializeToString())
        args += ["--input", f"{name}={path}"]
    if inputs:
        args += ["--output_dir", out_dir]
    proc = subprocess.run(args, capture_output=True, text=True,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    if proc.returncode:
        raise LoaderError(f"serving_loader exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    outputs = {}
    for line in proc.stdout.splitlines():
        parts = line.split()
        if inputs and parts[:1] == ["output"]:
            proto = tensor_pb2.TensorProto()
            with open(os.path.join(out_dir, parts[1] + ".pb"), "rb") as f:
                proto.ParseFromString(f.read())
            outputs[parts[1]] = tensor_util.MakeNdarray(proto)
    return proc.stdout, outputs


def _xla_flag(enabled: bool) -> list:
    return ["--xla_cpu_compilation_enabled", "true"] if enabled else []  # off by default


def run_loader(binary: str, saved_model: str, op_libraries, signature: str = "serving_default",
               inputs: dict | None = None, workdir: str | None = None,
               xla: bool = False) -> dict:
    """Loads `saved_model` and runs `signature` on `inputs` ({name: numpy array}); `xla` as TF
    Serving's `--xla_cpu_compilation_enabled` (off: a jit_compile export fails as it does there).

    Returns {"stdout": ..., "signature": {"method", "inputs", "outputs"}, "outputs": {key: array}}.
    """
    stdout, outputs = _launch(binary, saved_model, op_libraries, signature, inputs, workdir,
                              _xla_flag(xla))
    sig = {"method": None, "inputs": {}, "outputs": {}}
    for line in stdout.splitlines():
        parts = line.split()
        if parts[:1] == ["signature"]:
            sig["method"] = parts[3]
        elif parts[:1] in (["input"], ["output"]):
            sig[parts[0] + "s"][parts[1]] = {"tensor": parts[2], "dtype": parts[3]}
    return {"stdout": stdout, "signature": sig, "outputs": outputs}


def run_load(binary: str, saved_model: str, op_libraries, inputs: dict, clients: int,
             seconds: float, warmup: int = 3, batching: dict | None = None,
             signature: str = "serving_default", workdir: str | None = None,
             xla: bool = False) -> dict:
    """`inputs` as one request sent by `clients` threads at once for `seconds` (the loader's load
    mode, `serving_loader.cc`), directly or through TF Serving's batching as `batching` configures
    it ({"max_batch_size", "batch_timeout_micros", "num_batch_threads", optional
    "allowed_batch_sizes": [..]}, the batching_parameters fields).

    Returns {"requests", "rows_per_request", "elapsed_s", "latencies_ms" (numpy), with batching
    "batches", "batched_rows", "padded_rows" (warm-up runs included), and "outputs": the answer
    of one more request sent the same way}."""
    import numpy as np

    extra = ["--load_clients", str(clients), "--load_seconds", str(seconds), "--load_warmup",
             str(warmup), *_xla_flag(xla)]
    if batching:
        extra += ["--batch_max_size", str(batching["max_batch_size"]), "--batch_timeout_micros",
                  str(batching["batch_timeout_micros"]), "--num_batch_threads",
                  str(batching["num_batch_threads"])]
        if batching.get("allowed_batch_sizes"):
            extra += ["--allowed_batch_sizes",
                      ",".join(map(str, batching["allowed_batch_sizes"]))]
    stdout, outputs = _launch(binary, saved_model, op_libraries, signature, inputs,
                              workdir or tempfile.mkdtemp(prefix="serving_load-"), extra)
    lines = stdout.splitlines()
    fields = next(line for line in lines if line.startswith("load ")).split()[1:]
    result = {fields[i]: float(fields[i + 1]) for i in range(0, len(fields), 2)}
    for key in ("clients", "requests", "rows_per_request", "batches", "batched_rows",
                "padded_rows"):
        if key in result:
            result[key] = int(result[key])
    result["latencies_ms"] = np.array([int(x) for x in next(
        line for line in lines if line.startswith("latencies_us")).split()[1:]]) / 1000
    result["outputs"] = outputs
    return result


def run_in_python(saved_model: str, signature: str = "serving_default",
                  inputs: dict | None = None) -> dict:
    """`run_loader`'s result from TensorFlow in this process (`tf.saved_model.load`, tensorflow-text
    imported first): the fallback where no C++ compiler is installed."""
    import numpy as np
    import tensorflow as tf
    import tensorflow_text  # noqa: F401 - the SentencePiece ops the export uses

    fn = tf.saved_model.load(saved_model).signatures[signature]
    outputs = {}
    if inputs:
        result = fn(**{name: tf.constant(value) for name, value in inputs.items()})
        outputs = {key: np.asarray(value) for key, value in result.items()}
    return {"stdout": "", "outputs": outputs,
            "signature": {"method": None, "inputs": {k: {} for k in fn.structured_input_signature[1]},
                          "outputs": {k: {} for k in fn.structured_outputs}}}


# The signatures of one string input of serialized tf.Examples: --text goes in as raw-text
# examples (bytes feature `text`, `albert_tf.export.client.text_examples`), which the export
# tokenizes.
EXAMPLE_INPUTS = ("inputs", "input", "examples")


def signature_inputs(saved_model: str) -> dict:
    """{signature name: sorted input names} of the SavedModel in `saved_model` (its
    saved_model.pb, read without loading the model)."""
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel()
    with open(os.path.join(saved_model, "saved_model.pb"), "rb") as f:
        proto.ParseFromString(f.read())
    return {name: sorted(sig.inputs) for name, sig in proto.meta_graphs[0].signature_def.items()
            if not name.startswith("__")}


def text_inputs(saved_model: str, signature: str, texts) -> dict:
    """The inputs that carry `texts` to `signature`: a `text` input takes them as they are; a
    signature of serialized tf.Examples (`classify`, `regress`, `official_serving_default`,
    `serve_examples`) takes raw-text tf.Examples built as `albert_tf.export.client` builds them
    for TF Serving. Any other signature is refused by name, with the ones `--text` can run."""
    signatures = signature_inputs(saved_model)
    if signature not in signatures:
        raise LoaderError(f"{saved_model} has no signature {signature!r}; it has "
                          f"{', '.join(sorted(signatures))}.")
    names = signatures[signature]
    if names == ["text"]:
        return {"text": np.array([t.encode() for t in texts], dtype=object)}
    if len(names) == 1 and names[0] in EXAMPLE_INPUTS:
        return {names[0]: np.array([example_of(e) for e in text_examples(texts)], dtype=object)}
    callable_ = sorted(name for name, inputs in signatures.items()
                       if inputs == ["text"] or (len(inputs) == 1 and inputs[0] in EXAMPLE_INPUTS))
    raise LoaderError(f"--text cannot run signature {signature!r} (its inputs: "
                      f"{', '.join(names)}); of this export's signatures, --text runs "
                      f"{', '.join(callable_) or 'none'}.")


def _shown(value):
    """An output as printed: strings decoded, small arrays as lists, others by shape."""
    import numpy as np

    value = np.asarray(value)
    if value.size > 20:
        return value.shape
    return _jsonable(value)


def _jsonable(value):
    import numpy as np

    value = np.asarray(value)
    if value.dtype == object:
        return np.vectorize(lambda b: b.decode("utf-8", "replace") if isinstance(b, bytes)
                            else b, otypes=[object])(value).tolist()
    return value.tolist()


PROGRAM = "python -m albert_tf.export.cc_loader"


def define_flags(flag_values: flags.FlagValues) -> None:
    """The command's flags (absl, its own set: `albert_tf.commands.flags.parse_own`)."""
    own = {"flag_values": flag_values}
    flags.DEFINE_string("saved_model", None, "A version directory (required).", **own)
    flags.DEFINE_string("python", sys.executable, "Python whose tensorflow wheel to build "
                        "against (e.g. a TF 2.20 env).", **own)
    flags.DEFINE_multi_string("text", None, "Run --signature on these texts (repeatable): a "
                              "text signature takes them as they are; classify, regress, "
                              "official_serving_default and serve_examples as raw-text "
                              "tf.Examples (bytes feature text), as albert_tf.export.client sends "
                              "them.", **own)
    flags.DEFINE_string("signature", "serving_default", "The signature to run.", **own)
    flags.DEFINE_string("loader_binary", None, "Where the compiled loader is kept: built there "
                        "when missing, reused when present (default: a new temporary "
                        "directory).", **own)
    flags.DEFINE_enum("runtime", "cpp", ["auto", "cpp", "python"], "cpp: the C++ loader "
                      "(LoadSavedModel + Session::Run, as TF Serving; needs g++); python: "
                      "tf.saved_model.load in this process; auto: cpp when g++ is installed, "
                      "else python.", **own)
    flags.DEFINE_bool("xla_cpu_compilation_enabled", False, "As TF Serving's flag of that name: "
                      "needed by an export made with --jit_compile (the C++ loader only).", **own)
    flags.DEFINE_string("output_json", None, "Also write {runtime, signature, outputs} here.",
                        **own)


def parse(argv) -> flags.FlagValues:
    """The parsed flags of a command line (without the program), or UsageError."""
    words, flag_values = parse_own(define_flags, argv, PROGRAM)
    if flag_values.help:
        return flag_values
    if words:
        raise UsageError(f"unexpected argument(s) {' '.join(words)}: this command takes flags "
                         "only; a value goes with its flag (--text 'two words').")
    if not flag_values.saved_model:
        raise UsageError("--saved_model is required: a version directory of an export "
                         "(EXPORT_DIR/NAME/VERSION).")
    return flag_values


def main(argv=None) -> int:
    """The command: `argv` without the program (default: sys.argv[1:]); the exit status."""
    try:
        args = parse(sys.argv[1:] if argv is None else list(argv))
    except UsageError as e:
        print(f"error: {e}\nRun `{PROGRAM} --help` for the flags.", file=sys.stderr)
        return 1
    if args.help:
        print(f"{__doc__.strip()}\n\nFlags:\n{own_flags_help(args)}")
        return 0
    runtime = args.runtime
    if runtime == "auto":
        runtime = "cpp" if shutil.which("g++") else "python"
        if runtime == "python":
            print("g++ not found: loading with tf.saved_model.load in Python instead of the C++ "
                  "loader")
    inputs = None
    work = tempfile.mkdtemp(prefix="serving_loader-")
    try:
        if args.text:
            inputs = text_inputs(os.path.abspath(args.saved_model), args.signature, args.text)
        if runtime == "cpp":
            info = tensorflow_info(args.python)
            binary = args.loader_binary or os.path.join(work, "serving_loader")
            if not os.path.exists(binary):
                os.makedirs(os.path.dirname(os.path.abspath(binary)), exist_ok=True)
                compile_loader(info, binary + ".tmp")
                os.replace(binary + ".tmp", binary)
            print(f"C++ loader built against TensorFlow {info['version']}, tensorflow-text "
                  f"{info['text_version']}")
            result = run_loader(binary, os.path.abspath(args.saved_model), info["op_libraries"],
                                args.signature, inputs, work, args.xla_cpu_compilation_enabled)
        else:
            result = run_in_python(os.path.abspath(args.saved_model), args.signature, inputs)
    except (LoaderError, OSError, KeyError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(result["stdout"], end="")
    for key, value in sorted(result["outputs"].items()):
        print(f"{key}: {_shown(value)}")
    if args.output_json:
        os.makedirs(os.path.dirname(os.path.abspath(args.output_json)), exist_ok=True)
        with atomic_write(args.output_json) as f:
            json.dump({"runtime": runtime, "saved_model": os.path.abspath(args.saved_model),
                       "signature": args.signature, "inputs": args.text,
                       "outputs": {k: _jsonable(v) for k, v in result["outputs"].items()}},
                      f, indent=1, ensure_ascii=False)
    return 0


def cli():
    """The command (`python -m` and the console script in pyproject.toml)."""
    sys.exit(main())


if __name__ == "__main__":
    cli()
