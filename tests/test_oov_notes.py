"""The dry run's note on an `oov` axis over a sub-word init cut by its own tokenizer (embinit.cli.oov_notes):
with a token for each of embinit's specials the table has no row for a rule, and each rule's trials are one
computation under another key (seen: MiniLM oov=zeros and oov=mean gave bit-identical SST-2 results)."""

from __future__ import annotations

import json

import pytest

from embinit.cli import dry_run
from embinit.cli.oov_notes import own_tokenizer_lines, tokenizer_specials
from embinit.spec import load_spec

BERT = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
        "mask_token": "[MASK]"}
T5 = {"eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"}   # no cls or bos token


def folder(tmp_path, name, special_map=None, config=None):
    out = tmp_path / name
    out.mkdir()
    if special_map is not None:
        (out / "special_tokens_map.json").write_text(json.dumps(special_map))
    if config is not None:
        (out / "tokenizer_config.json").write_text(json.dumps(config))
    return out


def test_which_specials_a_tokenizer_gives(tmp_path):
    assert tokenizer_specials(str(folder(tmp_path, "bert", BERT))) == {"<pad>", "<unk>", "<bos>", "<eos>"}
    assert tokenizer_specials(str(folder(tmp_path, "t5", T5))) == {"<pad>", "<unk>", "<eos>"}
    # the newer layout: tokens in tokenizer_config.json only, as {content: ...} objects; a null is no token
    cfg = {"bos_token": {"content": "<s>"}, "eos_token": "</s>", "pad_token": None, "unk_token": "<unk>"}
    assert tokenizer_specials(str(folder(tmp_path, "gpt", config=cfg))) == {"<bos>", "<eos>", "<unk>"}
    assert tokenizer_specials(str(folder(tmp_path, "bare"))) is None          # nothing to read: no claim
    assert tokenizer_specials("no-such-org/no-such-model") is None            # not in the hub cache


def spec(tmp_path, specials, *, axis=("zeros", "mean"), source="bert", **task):
    tmp_path.mkdir(exist_ok=True)
    tok = folder(tmp_path, "model", specials)
    data = {"name": "t", "tasks": [{"task": "sst2", **task}], "inits": ["xavier", {"source": source, "name": "M"}],
            "pretrained": {source: str(tok)}, "seeds": 2}
    if axis:
        data["axes"] = {"oov": list(axis)}
    return load_spec(data)


def test_the_note_names_the_init_whose_rules_train_one_computation(tmp_path):
    s = spec(tmp_path, BERT)
    (line,) = own_tokenizer_lines(s.plan())
    assert line.startswith("note: sst2 x M trains once per oov value (mean, zeros), but its data is cut by its "
                           f"source's own tokenizer ({tmp_path / 'model'})")
    assert "none is left for an OOV rule" in line and "Run it in a spec without the oov axis" in line
    # the tokenizer named as the task's, the same folder: the same note; the dry run prints it
    named = spec(tmp_path / "named", BERT, tokenizer=str(tmp_path / "named" / "model"))
    assert own_tokenizer_lines(named.plan()) == [line.replace(str(tmp_path), str(tmp_path / "named"))]
    assert line in dry_run.dry_run(s, tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")


@pytest.mark.parametrize("case", ["t5", "no axis", "one value", "other tokenizer"])
def test_no_note_where_a_rule_can_fill_a_row(tmp_path, case):
    if case == "t5":   # its <bos> row is the rule's: the rules' trials differ
        s = spec(tmp_path, T5, source="t5")
    elif case == "no axis":
        s = spec(tmp_path, BERT, axis=())
    elif case == "one value":
        s = spec(tmp_path, BERT, axis=("zeros",))
    else:   # the data cut by spaCy words: many words have no row of the source
        s = spec(tmp_path, BERT, tokenizer="spacy")
    assert own_tokenizer_lines(s.plan()) == []
