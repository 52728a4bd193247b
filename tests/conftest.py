"""Shared test setup: quiet TensorFlow, Keras on TensorFlow, transformers without its TF classes,
and the tiny configurations whose dimensions all differ (so a transposed or swapped tensor
cannot pass by having the right shape)."""

import contextlib
import fcntl
import gc
import importlib
import io
import os
import shutil
import socket
import subprocess
import sys

# The repository's root, for `bench` (not an installed package) when pytest runs from elsewhere
# (`pytest /path/to/clone/tests`); `python -m pytest` in the root has it already.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("USE_TF", "0")  # transformers: do not import its Keras-2 TF classes
os.environ.setdefault("TF_DETERMINISTIC_OPS", "1")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402
from absl import app, flags  # noqa: E402
from tensorflow.python.eager import context as tf_context  # noqa: E402

from albert_tf import AlbertConfig  # noqa: E402
from albert_tf.training.train_lib import PretrainingConfig  # noqa: E402

# Where the suite's time goes (--time-shares=FILE) and its budget on CI (tests/timing_plugin.py).
pytest_plugins = ["timing_plugin"]

SHARED_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..",
                          "shared")
# What ../shared holds for the tests that need it (`@pytest.mark.needs_shared(PART, ...)`):
# Google's unmodified scripts, run as a judge, and the public data sets too large to bundle. A
# clone has no ../shared: those tests skip there, naming what is missing; CI sets
# REQUIRE_SHARED=1 (.ci/run), which makes the same absence a failure, so CI runs every test.
SHARED_PARTS = {
    "official_albert": "Google's google-research/albert scripts, the judge",
    "data/glue": "GLUE's CoLA, RTE, SST-2 and STS-B",
    "data/squad": "the SQuAD v1.1 and v2.0 dev sets",
}
REQUIRE_SHARED = "ALBERT_TF_REQUIRE_SHARED"


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "needs_shared(*parts): reads ../shared/PART (tests/conftest.py: SHARED_PARTS);"
        " skipped where it is missing, a failure when ALBERT_TF_REQUIRE_SHARED=1 (CI)")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """A test marked `needs_shared` skips (before its fixtures are built) when a part of
    ../shared it names is missing, or fails when REQUIRE_SHARED is set."""
    for marker in item.iter_markers("needs_shared"):
        unknown = set(marker.args) - set(SHARED_PARTS)
        if unknown or not marker.args:
            pytest.fail(f"needs_shared names {sorted(unknown) or 'nothing'}: name parts of "
                        f"SHARED_PARTS ({', '.join(SHARED_PARTS)})", pytrace=False)
        missing = [p for p in marker.args if not os.path.isdir(os.path.join(SHARED_DIR, p))]
        if not missing:
            continue
        what = "; ".join(f"../shared/{p} ({SHARED_PARTS[p]})" for p in missing)
        if os.environ.get(REQUIRE_SHARED) == "1":
            pytest.fail(f"{what} missing beside the repository and {REQUIRE_SHARED}=1 (CI "
                        "runs every test)", pytrace=False)
        pytest.skip(f"needs {what}, kept beside the repository for its CI, not in a clone")


@contextlib.contextmanager
def flags_alone():
    """For the block, the global absl FLAGS holds absl's own flags only, so a command's `cli()`
    defines its flags (their defaults, validators and required marks) as in a process of its
    own; afterwards every definition and value is as before. Commands run in-process
    (`run_cli`) need it: a flag another command defined earlier in this worker keeps that
    command's validators (export_tfhub marks --export_dir required)."""
    app.define_help_flags()  # once per process: before the snapshot, so it stays defined
    state = vars(flags.FLAGS)
    saved = dict(state)
    absl_flags = {name: flag for module, module_flags in saved["__flags_by_module"].items()
                  if module.startswith("absl.") for flag in module_flags
                  for name in (flag.name, flag.short_name) if name}
    kept = set(map(id, absl_flags.values()))
    state.update({
        "__flags": dict(absl_flags), "__hiddenflags": set(), "__flags_parsed": False,
        **{key: {module: [f for f in module_flags if id(f) in kept]
                 for module, module_flags in saved[key].items()}
           for key in ("__flags_by_module", "__flags_by_module_id", "__key_flags_by_module")}})
    try:
        yield
    finally:
        state.clear()
        state.update(saved)


_FLAGS_AT_IMPORT = set()  # command modules that define their flags at import, not in cli()


def run_cli(module, *args) -> int:
    """`python -m module ARGS` in this process (its `cli`, with the flags `flags_alone`): the
    exit status."""
    argv = sys.argv
    sys.argv = [module, *args]
    defined_before = bool(flags.FLAGS.flags_by_module_dict().get(module))
    try:
        with flags_alone():
            if module in sys.modules and (defined_before or module in _FLAGS_AT_IMPORT):
                # its flags are defined when it is imported: again, inside this block
                command = importlib.reload(sys.modules[module])
            else:
                command = importlib.import_module(module)
            if flags.FLAGS.flags_by_module_dict().get(module):
                _FLAGS_AT_IMPORT.add(module)
            command.cli()
    except SystemExit as e:
        return e.code
    finally:
        sys.argv = argv
    return 0


def tiny_config(**changes) -> AlbertConfig:
    """V=97, E=10, H=24, heads=4 (head 6), I=37, L=5, G=2, inner=2, positions 40, types 3."""
    values = dict(vocab_size=97, embedding_size=10, hidden_size=24, num_attention_heads=4,
                  intermediate_size=37, num_hidden_layers=5, num_hidden_groups=2,
                  inner_group_num=2, max_position_embeddings=40, type_vocab_size=3)
    values.update(changes)
    return AlbertConfig(**values)


def random_batch(config: AlbertConfig, batch=3, seq=11, predictions=7, seed=0) -> dict:
    """Int32 features with right padding of different lengths, both segment ids, positions
    inside the real tokens, and SOP/MLM labels."""
    rng = np.random.default_rng(seed)
    lengths = np.linspace(seq, max(4, seq // 2), batch).astype(int)
    input_ids = np.zeros((batch, seq), np.int32)
    input_mask = np.zeros((batch, seq), np.int32)
    segment_ids = np.zeros((batch, seq), np.int32)
    positions = np.zeros((batch, predictions), np.int32)
    weights = np.zeros((batch, predictions), np.float32)
    for b, n in enumerate(lengths):
        input_ids[b, :n] = rng.integers(5, config.vocab_size, n)
        input_mask[b, :n] = 1
        segment_ids[b, n // 2:n] = 1
        k = min(predictions, n - 1) - b  # rows have different numbers of real predictions
        positions[b, :k] = np.sort(rng.choice(np.arange(1, n), k, replace=False))
        weights[b, :k] = 1.0
    return {
        "input_ids": input_ids, "input_mask": input_mask, "segment_ids": segment_ids,
        "masked_lm_positions": positions,
        "masked_lm_ids": rng.integers(0, config.vocab_size, (batch, predictions)).astype(np.int32),
        "masked_lm_weights": weights,
        "next_sentence_labels": rng.integers(0, 2, (batch, 1)).astype(np.int32),
    }


# Grappler, TensorFlow's graph optimizer, is off in the test processes: it optimizes each graph
# function the first time it runs, seconds for a model's signature or step, and most tests run
# each function once or a few times (test_serving_requests.py alone: 181 s with it, 110 s
# without; docs/development.md). Its rewrites are meant to keep a graph's meaning, but they
# change float results in the last bits (arithmetic reassociation, fused kernels), so a parity
# test in this process compares graphs as TensorFlow runs them unoptimized. The programs the
# tests start as processes (the commands, the demo, the training workers, the C++ loader that
# loads a SavedModel as TF Serving does) run with it, as users run them, and so do the tests
# marked `grappler` (TensorFlow's default options). ALBERT_TF_TEST_GRAPPLER=1 runs every test
# with it.
GRAPPLER = os.environ.get("ALBERT_TF_TEST_GRAPPLER") == "1"
OPTIMIZER_OPTIONS = {} if GRAPPLER else {"disable_meta_optimizer": True}


def _set_optimizer_options(options):
    """Grappler's options exactly `options` ({}: TensorFlow's defaults). TensorFlow's own setter
    only adds keys (a test that turns one rewrite off and "restores" leaves it set), so the
    context's dict is replaced; the cached call options are dropped as the setter drops them."""
    ctx = tf_context.context()
    ctx._optimizer_experimental_options = dict(options)
    ctx._thread_local_data.function_call_options = None


_set_optimizer_options(OPTIMIZER_OPTIONS)


@pytest.fixture(autouse=True)
def _fresh_keras_state(request):
    if request.node.get_closest_marker("grappler") is not None:
        _set_optimizer_options({})
    keras.mixed_precision.set_global_policy("float32")
    keras.utils.set_random_seed(1234)
    try:
        yield
    finally:
        _set_optimizer_options(OPTIMIZER_OPTIONS)
        keras.mixed_precision.set_global_policy("float32")
        keras.backend.clear_session(free_memory=False)  # collected after the teardown, below


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """After the test's fixtures are torn down (inside its teardown, so its time and CPU count
    it): the values it read released, what it left collected, and what is still alive frozen
    (gc.freeze), so the next test's collections do not scan it again. After a module's last
    test everything is unfrozen and collected once (its module fixtures are gone by then).

    A full collection scans every live object, and its cost grows with them: late in a worker
    (loaded SavedModels, models and datasets kept by fixtures) one took 0.3 to 1 s. Keras runs
    one whenever a layer's variable is deleted (`Layer.__delattr__`: 27 in a quantize() call),
    so tests slowed with what their worker kept alive: the quantized-model refusal took 0.5 s
    alone, 11 s beside 3,000 live traced functions, 0.8 s with them frozen. Keras'
    clear_session(free_memory=True) after every test, a full collection each, cost 1,382 s of
    the suite before."""
    yield
    if item.funcargs:
        item.funcargs.clear()  # pytest drops them after the teardown; they are done with
    if nextitem is None or getattr(nextitem, "module", None) is not getattr(item, "module", 0):
        gc.unfreeze()
    gc.collect()
    gc.freeze()


# The objects of the imports (~380,000: TensorFlow, Keras, ours) are out of reach from the start.
gc.freeze()


# ---------------------------------------------------------------------------------------------
# Data fixtures: the bundled sample corpus, prepared once, and a vocabulary trained on it.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE_DIR = os.path.join(ROOT, "albert_tf", "sample_data", "pretrain_text")
GUTENBERG = os.path.join(SAMPLE_DIR, "gutenberg", "*-0.txt")
WIKITEXT = os.path.join(SAMPLE_DIR, "wikitext-2-raw", "wiki.test.raw")
WIKI_FLAGS = dict(paragraphs="lines", document_marker_regex=r"^ = [^=].* = $",
                  drop_line_regex=r"^ (= )+.*( =)+ $")


def run_command(module, *args, process=False, cwd=None, env=None):
    """`python -m module args...`: the finished command, its output captured as text
    (`.returncode`, `.stdout`, `.stderr`). In this process by default (its `cli()` through
    `run_cli`, sys.stdout and sys.stderr captured): a process start costs TensorFlow's import
    and a new graph, seconds each (docs/development.md). `process=True` starts the real program
    from the repository root, its packages importable (at most 10 minutes), for a test about
    the process itself (its exit, its start-up output, a signal; one such test per command
    keeps its `python -m` start tested), or one that must not share this process's state
    (`env`: variables set for it). `cwd`: the directory it runs in (the repository root when
    not given, as a process)."""
    if process:
        return subprocess.run([sys.executable, "-m", module, *args], cwd=cwd or ROOT,
                              env=dict(os.environ, PYTHONPATH=ROOT, **(env or {})),
                              capture_output=True, text=True, timeout=600)
    assert env is None, "env= is for a command run as its own process (process=True)"
    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(cwd or ROOT), contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(err):
        code = run_cli(module, *args)
    if isinstance(code, str):  # sys.exit("message"): what the interpreter prints, status 1
        err.write(code + "\n")
        code = 1
    return subprocess.CompletedProcess([module, *args], code or 0, out.getvalue(),
                                       err.getvalue())


@pytest.fixture(scope="session")
def prepared_corpus(tmp_path_factory):
    """{"books": path, "wiki": path} in the official one-sentence-per-line format."""
    from albert_tf.data.prepare_corpus import prepare_corpus

    directory = tmp_path_factory.mktemp("corpus")
    books, wiki = str(directory / "books.txt"), str(directory / "wiki.txt")
    prepare_corpus(GUTENBERG, books)
    prepare_corpus(WIKITEXT, wiki, **WIKI_FLAGS)
    return {"books": books, "wiki": wiki}


@pytest.fixture(scope="session")
def sample_vocab(tmp_path_factory, prepared_corpus):
    """An 8,000-piece lowercased vocabulary trained on the prepared sample corpus."""
    from albert_tf.data.train_vocab import train_vocab

    def build(directory):
        train_vocab([prepared_corpus["books"], prepared_corpus["wiki"]],
                    str(directory / "sample8k"), vocab_size=8000, do_lower_case=True,
                    num_threads=2)

    return str(once_per_run(tmp_path_factory, "vocab", build) / "sample8k.model")


# Pieces ending in digit + comma, as Google's 30k-clean vocabulary has ("▁1,", "000,", ...):
# with and without "▁", where the official and the Hugging Face re-split differ (the latter).
DIGIT_COMMA_PIECES = ("▁1,", "▁2,", "▁3,", "▁10,", "▁19,", "▁20,", "▁1,000,", "▁1990,",
                      "0,", "5,", "9,", "00,", "000,", "99,", "500,", "1,", "8,")


@pytest.fixture(scope="session")
def digit_comma_vocab(sample_vocab, tmp_path_factory):
    """The sample vocabulary with its rarest pieces replaced by `DIGIT_COMMA_PIECES`, scored as
    its best ordinary piece (so SentencePiece picks them where the text has them)."""
    from albert_tf.tokenization.model_file import _model_proto_messages

    def build(directory):
        proto = _model_proto_messages()["ModelProto"]()
        with open(sample_vocab, "rb") as f:
            proto.ParseFromString(f.read())
        best = max(p.score for p in proto.pieces[5:])
        for i, piece in enumerate(DIGIT_COMMA_PIECES):
            proto.pieces[-1 - i].piece = piece
            proto.pieces[-1 - i].score = best
        (directory / "digits8k.model").write_bytes(proto.SerializeToString())

    return str(once_per_run(tmp_path_factory, "digit_comma_vocab", build) / "digits8k.model")


def once_per_run(tmp_path_factory, name, build):
    """The directory `name` after `build(directory)` ran in it once for the whole run: the
    xdist workers of one run share their base temp's parent, so the first to get there builds
    (under a lock) and the other waits and reads the same files (a session fixture costs the
    run once, not once per worker). In one process, its own directory."""
    if not tmp_path_factory.getbasetemp().name.startswith("popen-"):  # not an xdist worker
        directory = tmp_path_factory.mktemp(name)
        build(directory)
        return directory
    root = tmp_path_factory.getbasetemp().parent  # this run's, made fresh by the controller
    directory, done = root / name, root / f"{name}.done"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(directory, ignore_errors=True)
            directory.mkdir()
            build(directory)
            done.touch()
    return directory


# ---------------------------------------------------------------------------------------------
_HANDED_OUT = set()  # ports given to a worker by this process's tests: never given twice


def free_port() -> int:
    """A port nothing listens on, below the kernel's ephemeral range: a port the kernel hands
    out (bind to 0) can be taken as the client side of another connection - one of the other
    worker's, or another test's - before the worker that should listen on it starts. Never one
    this test process handed out before (clusters started together would otherwise draw the
    same free port, and one worker fail with "Could not start gRPC server"), and each xdist
    worker draws from its own part of the range (the other's draws are not bound yet)."""
    low = 32768
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        pass
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    count = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    start = max(1024, low - 12000)
    part = (low - start) // count
    start += part * (index % count)
    rng = np.random.default_rng()
    for _ in range(100):
        port = int(rng.integers(start, start + part))
        if port in _HANDED_OUT:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            _HANDED_OUT.add(port)
            return port
    raise RuntimeError("no free port below the ephemeral range")


GENERATION_KW = dict(max_seq_length=64, max_predictions_per_seq=10, dupe_factor=2,
                     random_seed=17, tokens_per_unit=40_000)

# A model for a few pretraining steps on `generated_data` (the sample vocabulary's 8,000 ids).
PRETRAINING_MODEL = dict(vocab_size=8000, embedding_size=16, hidden_size=32, num_hidden_layers=3,
                         num_attention_heads=4, intermediate_size=40, max_position_embeddings=64)


def pretraining_config(input_file, output_dir, **settings) -> PretrainingConfig:
    """A quiet `PretrainingConfig` on records shaped as `generated_data` writes them
    (GENERATION_KW's sequence length and predictions); `settings` give the model
    (`albert_config`) and the rest, and may override these."""
    values = dict(input_file=input_file, output_dir=str(output_dir),
                  max_seq_length=GENERATION_KW["max_seq_length"],
                  max_predictions_per_seq=GENERATION_KW["max_predictions_per_seq"],
                  verbose=False)
    values.update(settings)
    return PretrainingConfig(**values)


@pytest.fixture(scope="session")
def generated_data(tmp_path_factory, prepared_corpus, sample_vocab):
    """3 TFRecord shards (seq 64, 10 predictions) generated from the prepared WikiText with
    2 workers: {"files": [...], "summary": ..., "job": GenerationJob}."""
    from albert_tf.data.generator import generate, make_job

    out = tmp_path_factory.mktemp("generated")
    job = make_job(prepared_corpus["wiki"], str(out / "wiki"), sample_vocab,
                   num_output_shards=3, **GENERATION_KW)
    summary = generate(job, num_workers=2, progress=False)
    return {"files": list(job.output_files), "summary": summary, "job": job}


@pytest.fixture(scope="session")
def serving_loader(tmp_path_factory):
    """(binary, tensorflow_info) of the C++ loader that stands in for TF Serving, compiled once
    for the session (about 25 s)."""
    from albert_tf.export.cc_loader import compile_loader, tensorflow_info

    info = tensorflow_info()
    directory = once_per_run(tmp_path_factory, "loader",
                             lambda d: compile_loader(info, str(d / "serving_loader")))
    return str(directory / "serving_loader"), info


# ---------------------------------------------------------------------------------------------
# SavedModel exports (tests/test_export.py, tests/test_client.py).
EXPORT_MAX_SEQ = 48


def export_config(**changes):
    # Every dimension distinct; the vocabulary is the sample SentencePiece model's. Weights are
    # drawn with std 0.2 (about 1/sqrt(H) at H=24; `randomize`): at 0.02, sized for H=768, the
    # heads' outputs of this tiny model differ by 1e-4 between inputs, too little for a 1e-5
    # parity test to mean anything.
    return tiny_config(**dict(dict(vocab_size=8000, max_position_embeddings=64,
                                   initializer_range=0.2), **changes))


@pytest.fixture(scope="session")
def exported(tmp_path_factory, sample_vocab):
    """{kind: (keras model, version dir, loaded SavedModel)} for a pretrainer, a 3-class
    classifier and a regression head. Exported once per run (`once_per_run`: read-only to the
    tests); each worker builds the same models (seeded weights) beside the loaded exports."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401 - the SentencePiece ops of the SavedModels

    from albert_tf import AlbertClassifier, AlbertPretrainer
    from albert_tf.export.saved_model import export_saved_model

    models = {"pretrainer": AlbertPretrainer(export_config()),
              "classifier": AlbertClassifier(export_config(), num_labels=3),
              "regressor": AlbertClassifier(export_config(), num_labels=1)}
    for kind, model in models.items():
        randomize(model, seed=len(kind))

    def export_all(directory):
        for kind, model in models.items():
            export_saved_model(model, str(directory / kind), sample_vocab,
                               max_seq_length=EXPORT_MAX_SEQ, top_k=4,
                               labels=["neg", "neutral", "pos"] if kind == "classifier"
                               else None)

    base = once_per_run(tmp_path_factory, "exports", export_all)
    out = {}
    for kind, model in models.items():
        path = str(base / kind / "1")  # the first version of each name
        out[kind] = (model, path, tf.saved_model.load(path))
    return out


def assert_serves_tokens(loaded, texts, texts_b, tokens):
    """An export's text signature on `texts` (serving_default), or on the pairs (`texts`,
    `texts_b`) (serve_text_pair), packs them into `tokens` ({input name: array}); returns the
    signature's outputs."""
    if texts_b is None:
        got = loaded.signatures["serving_default"](text=tf.constant(texts))
    else:
        got = loaded.signatures["serve_text_pair"](text=tf.constant(texts),
                                                   text_b=tf.constant(texts_b))
    for name, value in tokens.items():
        np.testing.assert_array_equal(got[name].numpy(), np.asarray(value), err_msg=name)
    return got


def randomize(model, seed):
    """Every weight redrawn as a model's own could be, so no weight hides as 0 or 1 and the
    outputs still depend on the input: kernels, embeddings and biases from N(0, the config's
    initializer_range), LayerNorm gammas near 1 (1 + N(0, 0.1)), betas near 0 (N(0, 0.1)).
    (Weights of N(0, 0.3) everywhere saturate the network: outputs hardly depend on the input
    and a wrong token id or mask still passes a parity test; `assert_spread` checks.)"""
    rng = np.random.default_rng(seed)
    std = model.config.initializer_range
    for v in model.weights:
        if "LayerNorm" in v.path or "layer_norm" in v.path:
            value = rng.normal(1.0 if v.path.endswith("gamma") else 0.0, 0.1, v.shape)
        else:
            value = rng.normal(0, std, v.shape)
        v.assign(value.astype(np.float32))


def assert_spread(outputs_a, outputs_b, tolerance):
    """Different inputs give outputs that differ by far more than a parity `tolerance` (100x),
    so a parity test at that tolerance could fail: the model is not saturated and the compared
    values carry the input. Returns the largest difference."""
    spread = float(np.abs(np.asarray(outputs_a) - np.asarray(outputs_b)).max())
    assert spread > 100 * tolerance, f"outputs barely depend on the input: {spread:.2e}"
    return spread
