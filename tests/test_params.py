"""Parameter counts: built models equal the closed formula; preset counts; paper comparison."""

import numpy as np
import pytest

from albert_tf import SHARING_MODES, AlbertBackbone, AlbertConfig, AlbertPretrainer
from albert_tf.params import (backbone_param_count, built_param_count, compare,
                              pretrainer_param_count, render_table, table1_rows, table4_rows,
                              table5_rows)


def _random_configs(n, seed=2020):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        heads = int(rng.integers(1, 5))
        layers = int(rng.integers(1, 7))
        yield dict(vocab_size=int(rng.integers(20, 300)), embedding_size=int(rng.integers(2, 40)),
                   hidden_size=heads * int(rng.integers(1, 9)), num_attention_heads=heads,
                   intermediate_size=int(rng.integers(3, 70)), num_hidden_layers=layers,
                   num_hidden_groups=int(rng.integers(1, layers + 1)),
                   inner_group_num=int(rng.integers(1, 4)),
                   max_position_embeddings=int(rng.integers(8, 80)),
                   type_vocab_size=int(rng.integers(1, 5)))


@pytest.mark.slow
@pytest.mark.parametrize("values", list(_random_configs(6)))
@pytest.mark.parametrize("sharing", SHARING_MODES)
def test_built_models_equal_closed_formula(values, sharing):
    cfg = AlbertConfig(sharing=sharing, **values)
    assert AlbertBackbone(cfg).count_params() == backbone_param_count(cfg)
    assert AlbertPretrainer(cfg).count_params() == pretrainer_param_count(cfg)


def test_albert_base_built_count_is_exact():
    cfg = AlbertConfig.from_preset("albert-base")
    assert built_param_count(cfg) == 11_683_584
    # Heads: H*E + E + 2E + V (MLM, decoder tied) + 2H + 2 (SOP).
    assert pretrainer_param_count(cfg) == 11_683_584 + 98_304 + 128 + 256 + 30_000 + 1_538


def test_table_cells_against_paper():
    counts = {r.label: backbone_param_count(r.config) for r in table5_rows()}
    assert counts == {
        "E=768 all-shared": 31_114_752, "E=768 shared-attention": 83_078_400,
        "E=768 shared-FFN": 57_117_696, "E=768 not-shared": 109_081_344,
        "E=128 all-shared": 11_683_584, "E=128 shared-attention": 63_647_232,
        "E=128 shared-FFN": 37_686_528, "E=128 not-shared": 89_650_176}
    verdicts = {r.label: compare(backbone_param_count(r.config), r.paper_millions)
                for r in table4_rows()}
    assert verdicts == {
        "not-shared E=64": "= (truncated)", "not-shared E=128": "= (truncated)",
        "not-shared E=256": "= (truncated)", "not-shared E=768": "differs by +1.08M",
        "all-shared E=64": "= (rounded)", "all-shared E=128": "= (rounded)",
        "all-shared E=256": "= (rounded)", "all-shared E=768": "= (rounded)"}
    verdicts = {r.label: compare(backbone_param_count(r.config), r.paper_millions)
                for r in table1_rows()}
    assert verdicts["ALBERT base"] == verdicts["ALBERT large"] == "= (rounded)"
    assert verdicts["ALBERT xxlarge"] == "differs by -12.40M"
    # BERT (E = H): no E -> H projection, as official modeling.py.
    counts = {r.label: backbone_param_count(r.config) for r in table1_rows()}
    assert counts["BERT base"] == 109_081_344
    assert counts["BERT large"] == 334_607_360
    assert counts["BERT xlarge"] == 1_275_291_648


def test_render_table_checks_the_formula():
    rows = table1_rows()[3:4]
    text = render_table("T", rows, counter=backbone_param_count)
    assert "| ALBERT base " in text and "11,683,584" in text and "= (rounded)" in text
    with pytest.raises(AssertionError, match="built model has 11,683,585 parameters"):
        render_table("T", rows, counter=lambda c: backbone_param_count(c) + 1)


@pytest.mark.slow
def test_command_counts_without_building_and_builds_on_request(tmp_path):
    """`python -m albert_tf.params` prints the tables from the closed formula (no model built:
    the process stays far below BERT-xlarge's 5.7 GB); `--build` builds the rows up to
    --max_build_params and checks them."""
    import os
    import subprocess
    import sys

    from conftest import ROOT

    def run(*args):
        # VmHWM: this process's own peak (ru_maxrss would carry the parent's over fork/exec).
        code = ("import runpy, sys; sys.argv = ['params', *sys.argv[1:]]\n"
                "try:\n    runpy.run_module('albert_tf.params', run_name='__main__')\n"
                "except SystemExit:\n    pass\n"
                "print('peak_rss_kb', [line.split()[1] for line in open('/proc/self/status')\n"
                "                      if line.startswith('VmHWM:')][0])")
        proc = subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT,
                              env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True,
                              text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-2000:]
        return proc.stdout, int(proc.stdout.split("peak_rss_kb")[1])

    out, rss_kb = run()
    assert "1,275,291,648" in out and "11,683,584" in out  # BERT xlarge, ALBERT base
    assert rss_kb < 1_500_000, rss_kb  # far below 5.7 GB: nothing of that size was built
    out, _ = run("--tables", "1", "--build", "--max_build_params", "20000000")
    summary = [line for line in out.splitlines() if line.startswith("built and checked")]
    assert summary and "BERT xlarge" in summary[0] and "ALBERT base" not in summary[0]
