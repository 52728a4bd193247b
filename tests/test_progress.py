"""The one progress display (`albert_tf.training.progress`): plain lines off a terminal (what logs
and the benches read), a tqdm bar on one, messages above the bar, nothing when disabled."""

import io
import re
from types import SimpleNamespace

import numpy as np

from albert_tf import AlbertConfig
from albert_tf.training import progress
from albert_tf.training.controller import Controller
from albert_tf.training.progress import Progress
from albert_tf.tasks.classification import ClassificationTask
from albert_tf.tasks.race import RaceTask
from albert_tf.tasks.tagging import TaggingTask


def test_off_a_terminal_one_whole_line_per_update_and_no_redraws():
    out = io.StringIO()
    bar = Progress("examples", 4, items="examples", every=0, file=out, tty=False)
    bar.update(1, 30)
    bar.update(2, 50)
    bar.close()  # nothing new since the last line: no repeat
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue() and len(lines) == 2
    assert re.fullmatch(r"\[examples\] 1/4 \| 30 examples \| [\d,.]+ examples/s \| elapsed "
                        r"0h00m0\ds \| ETA 0h00m\d\ds", lines[0]), lines[0]
    assert lines[1].startswith("[examples] 3/4 | 80 examples | ")


def test_off_a_terminal_lines_are_throttled_and_the_last_one_is_shown():
    out = io.StringIO()
    bar = Progress("tokenize", 10, items="tokens", every=3600, file=out, tty=False)
    for _ in range(10):
        bar.update(1, 7)
    assert out.getvalue().count("\n") == 1  # the first; the rest within the hour
    bar.close()
    assert out.getvalue().splitlines()[-1].startswith("[tokenize] 10/10 | 70 tokens | ")


def test_training_lines_keep_their_form():
    """The loop's lines (`albert_tf.training.controller`): `step N/M | figures | ... | ETA`, the
    job's own rate among the figures (what `bench/finetune_throughput.py` reads)."""
    out = io.StringIO()
    bar = Progress("train", 8, every=0, start=4, file=out, tty=False, label="step", rate=False)
    bar.update(2, figures="loss 1.2345 | lr 1.000e-02 | 123.4 examples/s")
    line = out.getvalue().strip()
    assert re.fullmatch(r"step 6/8 \| loss 1\.2345 \| lr 1\.000e-02 \| 123\.4 examples/s \| "
                        r"elapsed 0h00m00s \| ETA 0h00m0\ds", line), line
    assert re.findall(r"\| ([\d,.]+) examples/s", line) == ["123.4"]


def test_on_a_terminal_a_bar_with_the_figures_and_messages_above_it():
    out = io.StringIO()
    bar = Progress("train", 8, every=0, file=out, tty=True, label="step", rate=False)
    bar.update(4, figures="loss 2.5000")
    progress.echo("saved ckpt-4")
    bar.update(4, figures="loss 1.0000")
    bar.close()
    text = out.getvalue()
    assert "\r" in text and "train" in text and "8/8" in text and "loss 1.0000" in text
    assert "saved ckpt-4\n" in text
    assert not progress._ACTIVE  # closed: later messages print plainly


def test_disabled_shows_nothing(capsys):
    out = io.StringIO()
    for tty in (True, False):
        bar = Progress("write", 3, enabled=False, every=0, file=out, tty=tty)
        bar.update(3)
        bar.close()
    assert out.getvalue() == ""
    progress.echo("plain")
    assert capsys.readouterr().out == "plain\n"


def _training_line(task, sums) -> str:
    """`Controller.figures` of a loop's record, as `Controller.record` builds it."""
    record = dict(step=20, loss=0.6513, grad_norm=1.25, learning_rate=1.5e-4,
                  examples_per_second=123.4, **task.metrics(sums))
    return Controller.figures(SimpleNamespace(trainer=SimpleNamespace(progress=task.progress)),
                              record)


def test_training_lines_name_each_figure_once_and_only_figures_computed_in_training():
    """A fine-tuning progress line named the loop's step and loss again and the learning rate
    twice (`loss 0.6513 | step 20.0000 | loss 0.6513 | ... learning_rate 0.0001 ... lr`), and a
    tagging line showed `entity_f1 0.0000` at every loop (entity scores are computed in
    evaluation only)."""
    config = AlbertConfig(vocab_size=50, hidden_size=8, num_attention_heads=2,
                          intermediate_size=16, embedding_size=4)
    lines = {
        "classification": _training_line(ClassificationTask("sst-2", config, 16), {
            "loss_sum": 13.0, "count": 20.0, "correct_sum": 11.0}),
        "tagging": _training_line(TaggingTask(config, ["B-PER", "I-PER", "O"], 16), {
            "loss_sum": 30.0, "token_count": 60.0, "correct_sum": 45.0}),
        "race": _training_line(RaceTask(config, 16), {
            "loss_sum": 26.0, "count": 20.0, "correct_sum": 9.0}),
    }
    assert lines == {
        "classification": "loss 0.6513 | accuracy 0.5500 | lr 1.500e-04 | gnorm 1.250 | "
                          "123.4 examples/s",
        "tagging": "loss 0.6513 | token_accuracy 0.7500 | lr 1.500e-04 | gnorm 1.250 | "
                   "123.4 examples/s",
        "race": "loss 0.6513 | accuracy 0.4500 | lr 1.500e-04 | gnorm 1.250 | "
                "123.4 examples/s"}
    # evaluation still gets the entity scores
    task = TaggingTask(config, ["B-PER", "I-PER", "O"], 16)
    collected = {"real": np.ones(1), "label": np.array([[0, 1, 2]]),
                 "prediction": np.array([[0, 1, 2]]), "window_index": np.zeros(1, int),
                 "labelled": np.ones((1, 3), int)}
    metrics = task.metrics({"loss_sum": 1.0, "token_count": 3.0, "correct_sum": 3.0}, collected)
    assert metrics["entity_f1"] == 1.0 and metrics["token_accuracy"] == 1.0


def test_training_figures_show_the_loss_scale_under_float16():
    """A loop's progress figures, each once; under float16 the loss scale and the steps it
    skipped too (they were only in the records and TensorBoard)."""
    task = SimpleNamespace(progress=lambda t: f"mlm {t['masked_lm_loss']:.4f}")
    loop = SimpleNamespace(trainer=SimpleNamespace(progress=task.progress))
    record = dict(step=5, loss=1.5, grad_norm=0.25, learning_rate=1e-3,
                  examples_per_second=1234.5, masked_lm_loss=1.25)
    assert Controller.figures(loop, record) == (
        "loss 1.5000 | mlm 1.2500 | lr 1.000e-03 | gnorm 0.250 | 1,234.5 examples/s")
    record.update(loss_scale=16384.0, skipped_steps=1)
    assert Controller.figures(loop, record) == (
        "loss 1.5000 | mlm 1.2500 | lr 1.000e-03 | gnorm 0.250 | loss scale 16,384 (steps "
        "skipped in all: 1) | 1,234.5 examples/s")
    record.update(loss_scale=2.0 ** 20)
    assert "| loss scale 1,048,576 (steps skipped in all: 1) |" in Controller.figures(loop,
                                                                                     record)
