"""Damaged checkpoints (issue 58 item 7): every reader of a checkpoint (convert, the exports,
`--init_checkpoint`) names the damaged `.data` or `.index` file in one line instead of
TensorFlow's `IndexError: Read less bytes than requested`, and a resume whose latest checkpoint
is damaged continues from the newest intact one, saying which."""

import glob
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf
from conftest import PRETRAINING_MODEL, pretraining_config, run_cli, tiny_config

from albert_tf import AlbertClassifier, AlbertConfig
from albert_tf.checkpoints import (CheckpointError, initialize_backbone, save_albert_tf,
                                   write_hf_folder)
from albert_tf.checkpoints.conversion import read_source
from albert_tf.training.train_lib import PretrainingRun

DATA = ".data-00000-of-00001"
TRUNCATED = "is damaged (truncated: it ends before the tensors its index lists)"


def _truncate(path):
    os.truncate(path, os.path.getsize(path) // 2)


def _arrays(prefix):
    reader = tf.train.load_checkpoint(prefix)
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
            if not name.startswith("_CHECKPOINTABLE") and "save_counter" not in name}


def _small_run(generated_data, directory, steps: int, **settings):
    """The tiny pretraining run of these tests: a checkpoint every 2 steps, seeded."""
    return pretraining_config(generated_data["files"], directory,
                              albert_config=AlbertConfig(**PRETRAINING_MODEL),
                              train_batch_size=8, num_train_steps=steps, num_warmup_steps=1,
                              learning_rate=1e-2, save_checkpoints_steps=2,
                              iterations_per_loop=2, seed=11, shuffle_window=64, verbose=True,
                              **settings)


def _assert_same_arrays(prefix, expected):
    """The checkpoint `prefix` holds `expected` (`_arrays`), bit for bit."""
    got = _arrays(prefix)
    assert got.keys() == expected.keys()
    for name, value in expected.items():
        np.testing.assert_array_equal(got[name], value, err_msg=name)


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """A classifier's training run (ckpt-1) and its conversion to an official TF1 checkpoint,
    each with half of its data file cut off."""
    tmp = tmp_path_factory.mktemp("damaged")
    classifier = AlbertClassifier(tiny_config(), num_labels=3)
    run = tmp / "run"
    run.mkdir()
    classifier.config.to_json_file(str(run / "albert_config.json"))
    (run / "train_settings.json").write_text('{"kind": "classifier", "num_labels": 3}')
    tf.train.Checkpoint(model=classifier).save(str(run / "ckpt"))
    assert run_cli("albert_tf.convert", "--input", str(run), "--target", "tf1",
                   "--output", str(tmp / "tf1")) == 0
    for prefix in (run / "ckpt-1", tmp / "tf1" / "model.ckpt"):
        _truncate(f"{prefix}{DATA}")
    return {"run": str(run), "tf1": str(tmp / "tf1"), "tmp": tmp}


@pytest.mark.parametrize("name", ["run", "tf1"])
def test_convert_and_init_checkpoint_name_the_truncated_data_file(sources, name, capsys):
    """convert (exit 1, one line, nothing written), the exports' reader (`read_source`) and
    `--init_checkpoint` (`initialize_backbone`) name the data file and say it is truncated."""
    prefix = os.path.join(sources[name], "ckpt-1" if name == "run" else "model.ckpt")
    expected = (f"{prefix}{DATA} {TRUNCATED}: the checkpoint {prefix} cannot be read. Copy "
                "the checkpoint again from where it came from, or use another checkpoint (of "
                "a run: RUN/ckpt-N).")
    out = sources["tmp"] / f"converted_{name}"
    assert run_cli("albert_tf.convert", "--input", sources[name], "--output", str(out)) == 1
    assert capsys.readouterr().err == f"error: {expected}\n"
    assert not out.exists()
    for read in (read_source,
                 lambda p: initialize_backbone(AlbertClassifier(tiny_config(),
                                                                num_labels=3).backbone, p)):
        with pytest.raises(CheckpointError) as raised:
            read(sources[name])
        assert str(raised.value) == expected


def test_a_damaged_index_is_named(sources, tmp_path):
    """An index cut short is named as the damaged file (it was "Cannot read the TF1
    checkpoint ...: not an sstable (bad magic number)", naming no file)."""
    shutil.copytree(sources["tf1"], tmp_path / "tf1")
    prefix = str(tmp_path / "tf1" / "model.ckpt")
    _truncate(prefix + ".index")
    with pytest.raises(CheckpointError) as raised:
        read_source(str(tmp_path / "tf1"))
    assert str(raised.value).startswith(f"{prefix}.index is damaged (truncated or corrupt): the "
                                        f"checkpoint {prefix} cannot be read.")


@pytest.mark.slow
def test_a_resume_passes_over_a_truncated_latest_checkpoint(generated_data, tmp_path, capsys):
    """A run with checkpoints at steps 2 and 4, the latest's data file cut in half: the rerun
    says on one line that ckpt-4's data file is damaged and that it resumes from ckpt-2, and
    steps 3-4 give the uninterrupted run's ckpt-4 again, bit for bit (it was
    `IndexError: Read less bytes than requested`)."""
    cfg = _small_run(generated_data, tmp_path / "run", 4)
    PretrainingRun(cfg).run()
    latest = str(tmp_path / "run" / "ckpt-4")
    uninterrupted = _arrays(latest)
    _truncate(latest + DATA)
    capsys.readouterr()
    summary = PretrainingRun(cfg).run()
    assert summary["start"] == "resumed" and summary["status"] == "completed"
    notes = [line for line in capsys.readouterr().out.splitlines() if "damaged" in line]
    assert notes == [f"Note: {latest}{DATA} {TRUNCATED}; resuming from "
                     f"{tmp_path / 'run' / 'ckpt-2'}, the newest intact checkpoint."]
    _assert_same_arrays(latest, uninterrupted)


def test_our_directory_and_a_hugging_face_folder_name_their_damaged_weights(tmp_path, capsys):
    """A truncated model.weights.h5 (it was h5py's message, read as an output the command
    could not write) and a truncated model.safetensors (SafetensorError, no file named)."""
    model = AlbertClassifier(tiny_config(), num_labels=3)
    for target, write, name in (("ours", save_albert_tf, "model.weights.h5"),
                                ("hf", write_hf_folder, "model.safetensors")):
        folder = tmp_path / target
        write(model, str(folder))
        weights = folder / name
        _truncate(weights)
        assert run_cli("albert_tf.convert", "--input", str(folder), "--output",
                       str(tmp_path / f"{target}_out")) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"error: {weights} is damaged (truncated or corrupt: ") \
            and err.endswith("): copy it again from where it came from.\n") \
            and err.count("\n") == 1, err


@pytest.mark.slow
def test_a_run_killed_while_writing_its_first_checkpoint_reruns_from_step_0(generated_data,
                                                                            tmp_path, capsys):
    """Killed while writing its first checkpoint (its .index cut short, no `checkpoint` state
    file yet): the rerun removes it, starts from step 0, says why, and writes the uninterrupted
    run's ckpt-2 bit for bit (it refused: "no intact checkpoint to resume", a clean-clone CI
    failure of the main job's kill-and-resume test). An evaluation alone of that directory is
    refused: it holds no checkpoint."""
    cfg = _small_run(generated_data, tmp_path / "run", 2)
    PretrainingRun(cfg).run()
    first = str(tmp_path / "run" / "ckpt-2")
    uninterrupted = _arrays(first)
    os.remove(tmp_path / "run" / "checkpoint")
    _truncate(first + ".index")
    # an evaluation alone of that directory: the cut-short save removed, then refused (it
    # evaluated a random model and kept it as best/)
    shutil.copytree(tmp_path / "run", tmp_path / "eval_only")
    evaluation = _small_run(generated_data, tmp_path / "eval_only", 2, do_train=False,
                            do_eval=True, eval_input_file=generated_data["files"][0],
                            eval_batch_size=8, max_eval_steps=1)
    with pytest.raises(CheckpointError, match=r"^--do_eval without --do_train evaluates a "
                                              r"checkpoint of --output_dir .*, and it holds none"):
        PretrainingRun(evaluation).run()
    assert not os.path.exists(tmp_path / "eval_only" / "best")
    assert not os.path.exists(tmp_path / "eval_only" / "ckpt-2.index")
    assert not glob.glob(str(tmp_path / "eval_only" / "eval_results_step_*"))  # none written
    capsys.readouterr()
    summary = PretrainingRun(cfg).run()
    assert summary["start"] == "fresh" and summary["status"] == "completed"
    notes = [line for line in capsys.readouterr().out.splitlines() if "cut short" in line]
    assert notes == [f"Note: {first}.index is cut short and no `checkpoint` state file records "
                     "it: a save the stopped run did not finish, removed (the run saves that "
                     "step again)."]
    _assert_same_arrays(first, uninterrupted)
