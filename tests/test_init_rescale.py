"""`rescale=TARGET` (issue 23, item 6): any source to a target sigma given absolutely, as a multiple of
Xavier's, or as an absorption ratio; its errors; and the spec axis `sigma` that expands the grid."""

import numpy as np
import pytest
import torch
import yaml

from embinit.config import TrialConfig
from embinit.init import build_table, parse_init_spec, xavier_std
from embinit.init import testing as tt
from embinit.init.registry import InitSpecError
from embinit.spec import ExperimentSpec, SpecError
from embinit.spec.planning import planned_count
from embinit.stats import PETable, embedding_stats
from embinit.tracking.trial_results import key_emb_stats
from embinit.train.trial import run_trial
from embinit.vocab import Vocab

torch.set_num_threads(1)
VOCAB = Vocab(["<pad>", "<unk>"] + [f"w{i}" for i in range(30)] + ["oov1", "oov2"])
FOUND = slice(2, 32)


@pytest.fixture(scope="module")
def glove(tmp_path_factory):
    words = [f"w{i}" for i in range(40)]
    vectors = {w: np.round(v * 3.0 + 0.5, 4) for w, v in tt.word_vectors(words, dim=16, seed=5).items()}
    return str(tt.write_text(tmp_path_factory.mktemp("src") / "g.txt", vectors))


def _found(spec, glove, **kw):
    return build_table(spec, VOCAB, pretrained=glove, cache_dir=False, seed=0, **kw).table[FOUND].double()


@pytest.mark.parametrize("k", [0.25, 1.0, 4.0, 16.0])
def test_multiple_of_xavier_hits_k_times_xaviers_sigma_centered(glove, k):
    rows = _found(f"glove+shuffle+rescale={k}x", glove)
    assert rows.std().item() == pytest.approx(k * xavier_std(len(VOCAB), 16), rel=1e-6)
    assert abs(rows.mean().item()) < 1e-9


def test_absolute_sigma_and_one_x_is_standardize(glove):
    assert _found("glove+rescale=0.05", glove).std().item() == pytest.approx(0.05, rel=1e-6)
    assert torch.equal(_found("glove+rescale=1x", glove), _found("glove+standardize", glove))


def test_absorption_target_is_what_the_logged_statistic_reads(glove):
    # a random init is rescaled as a whole, so the table's absorption is the rescaled rows' absorption
    t = build_table("xavier+rescale=absorption:0.5", VOCAB, dim=16, seed=0).table
    assert embedding_stats(t)["emb/absorption"] == pytest.approx(0.5, rel=1e-6)
    rows = _found("glove+rescale=absorption:2", glove)
    assert embedding_stats(rows)["emb/absorption"] == pytest.approx(2.0, rel=1e-6)


@pytest.mark.parametrize("pe", [PETable(512), PETable(5000, 500.0), PETable(300, 2e4)])
def test_absorption_target_is_met_against_the_pe_table_passed(glove, pe):
    t = build_table("xavier+rescale=absorption:0.5", VOCAB, dim=16, seed=0, pe=pe).table
    assert embedding_stats(t, pe_length=pe.positions, pe_base=pe.base)["emb/absorption"] == pytest.approx(0.5, abs=1e-6)
    rows = _found("glove+rescale=absorption:2", glove, pe=pe)
    assert embedding_stats(rows, *pe)["emb/absorption"] == pytest.approx(2.0, abs=1e-6)
    # the other targets do not depend on the PE table
    assert torch.equal(_found("glove+rescale=4x", glove, pe=pe), _found("glove+rescale=4x", glove))


TRIAL = dict(task="synthetic_translation", epochs=1, max_train_examples=32, threads=1, d_model=16, heads=2,
             ff_dim=16, layers=1, batch_size=16, min_freq=1)


def test_a_trials_logged_absorption_is_the_target_at_its_own_pe_table():
    """A trial whose PE table is not the default one (512 positions, base 1000) logs `init/emb/absorption`
    (and the source table's `emb_src/absorption`) equal to its `rescale=absorption:R` targets."""
    cfg = TrialConfig(**TRIAL, init="xavier+rescale=absorption:0.5", src_init="normal+rescale=absorption:3",
                      pe_positions=512, pe_base=1000.0)
    result = run_trial(cfg, cache_dir=False, resume=False).to_dict()
    assert key_emb_stats(result)["init/emb/absorption"] == pytest.approx(0.5, abs=1e-6)
    assert result["emb_stats_init"]["emb_src/absorption"] == pytest.approx(3.0, abs=1e-6)


def test_only_absorption_targets_off_the_default_pe_table_change_trial_keys():
    """Those trials' tables changed (set against the default PE table before): their keys carry
    `absorption_pe`; every other key is as before, the default table's absorption trials included."""
    def marked(**kw):
        return "absorption_pe" in TrialConfig(**{"task": "synthetic_translation", **kw}).key_fields()

    assert marked(init="xavier+rescale=absorption:0.5", pe_positions=512)
    assert marked(init="glove+rescale=absorption:2", pe_base=500.0)
    assert marked(init="xavier", src_init="normal+rescale=absorption:2", pe_positions=512)
    assert marked(init="xavier+rescale=absorption:2", pe_positions=512, src_init="xavier")
    assert not marked(init="xavier+rescale=absorption:0.5")                  # the default table: unchanged
    assert not marked(init="xavier+rescale=absorption:0.5", pe_positions=5000, pe_base=10000)
    assert not marked(init="xavier+rescale=4x", pe_positions=512)            # no absorption target
    assert not marked(init="glove+rescale=0.05", src_init="xavier+rescale=1x", pe_base=500.0)
    assert not marked(init="xavier+rescale=absorption:", pe_positions=512)    # invalid: refused elsewhere
    # a one-sided task has no source table: its src_init builds nothing
    assert not marked(task="synthetic_lm", init="xavier", src_init="xavier+rescale=absorption:2", pe_positions=512)


def test_oov_rows_follow_the_rescaled_space(glove):
    res = build_table("glove+rescale=16x", VOCAB, pretrained=glove, cache_dir=False, seed=0, oov="mean")
    assert torch.allclose(res.table[-1], res.table[FOUND].mean(0), atol=1e-6)


def test_random_init_rescaled_keeps_its_draw_shape():
    base = build_table("xavier", VOCAB, dim=16, seed=3).table.double()
    big = build_table("xavier+rescale=4x", VOCAB, dim=16, seed=3).table.double()
    assert big.std().item() == pytest.approx(4 * xavier_std(len(VOCAB), 16), rel=1e-6)
    assert torch.allclose((big - big.mean()) / big.std(), (base - base.mean()) / base.std(), atol=1e-5)


def test_labels_and_round_trip():
    spec = parse_init_spec("glove+shuffle+rescale=4x")
    assert spec.label == "GloVe_Shuffled@4x" and str(spec) == "glove+shuffle+rescale=4x"
    assert parse_init_spec({"source": "xavier", "transforms": ["rescale=0.25x"]}).label == "Xavier@0.25x"


@pytest.mark.parametrize("text, message", [
    ("glove+rescale", "needs a target"),
    ("glove+rescale=-1x", "'-1x' is not"),
    ("glove+rescale=abc", "'abc' is not"),
    ("glove+rescale=absorption:0", "'absorption:0' is not"),
    ("glove+shuffle=2", "takes no argument"),
    ("xavier+shuffle", "applies to pretrained sources"),
])
def test_bad_targets_name_the_value(text, message):
    with pytest.raises(InitSpecError, match=message):
        parse_init_spec(text)


SPEC = """
name: dose
tasks: [{task: synthetic_translation, d_model: 16, heads: 2}]
inits: [xavier, {tgt: glove+shuffle, src: xavier}, {tgt: {source: glove, transforms: [standardize]}, src: xavier}]
pretrained: {glove: /nowhere/g.txt}
seeds: 2
"""


def test_sigma_axis_expands_the_grid_on_the_target_table_only():
    spec = ExperimentSpec.model_validate({**yaml.safe_load(SPEC), "axes": {"sigma": ["0.25x", "4x", 0.05]}})
    plan = spec.plan()
    assert len(plan) == planned_count(spec) == 3 * 3 * 2
    inits = {(p.label, p.axes["sigma"]): (p.config["init"], p.config["src_init"]) for p in plan}
    assert inits[("Xavier", "4x")] == ("xavier+rescale=4x", "xavier")
    assert inits[("GloVe_Shuffled", 0.05)] == ("glove+shuffle+rescale=0.05", "xavier")
    assert inits[("GloVe_Xavier", "0.25x")] == ("glove+standardize+rescale=0.25x", "xavier")
    assert len({p.key for p in plan}) == len(plan)


def test_sigma_axis_lists_every_bad_value():
    with pytest.raises(SpecError) as e:
        ExperimentSpec.model_validate({**yaml.safe_load(SPEC), "axes": {"sigma": ["4x", -1, "abc"]}})
    text = str(e.value)
    assert "axes.sigma[1]" in text and "'-1'" in text and "axes.sigma[2]" in text and "'abc'" in text
    assert "axes.sigma[0]" not in text


def test_an_init_that_rescales_itself_under_the_sigma_axis_is_refused():
    # the axis appends rescale=<value>, which replaces the init's own rescale: its label would name a scale
    # no trial trains at
    data = yaml.safe_load(SPEC)
    data["inits"] = data["inits"] + [{"tgt": "glove+rescale=16x", "src": "xavier", "label": "GloVe16"}]
    with pytest.raises(SpecError) as e:
        ExperimentSpec.model_validate({**data, "axes": {"sigma": ["0.25x", "4x"]}})
    text = str(e.value)
    assert "inits[3]" in text and "already has 'rescale=16x'" in text and "the sigma axis" in text
    assert "inits[0]" not in text and "inits[2]" not in text
    ExperimentSpec.model_validate(data)    # without the axis it is a valid init
