"""The one progress display (`albert_tf.progress`): plain lines off a terminal (what logs and the
benches read), a tqdm bar on one, messages above the bar, nothing when disabled."""

import io
import re

from albert_tf import progress
from albert_tf.progress import Progress


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
    """The loop's lines (`albert_tf.controller`): `step N/M | figures | ... | ETA`, the job's
    own rate among the figures (what `bench/finetune_throughput.py` reads)."""
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
