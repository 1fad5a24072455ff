"""Tokenizers: word-level detokenization, GPT-2 BPE from encoder.json + vocab.bpe, Hugging Face folders."""

import json
import pickle
from pathlib import Path

import pytest

from embinit.errors import EmbinitError
from embinit.tasks import load_task, tokenization, tokenizer_backends
from embinit.tasks.tokenization import resolve_tokenizer
from embinit.tasks.tokenizer_backends import WordDetokenizer, detokenizer, load_backend
from embinit.vocab import SPECIALS, Vocab
from helpers.files import write

REAL_GPT2 = Path("/work/shared/data/gpt2_tokenizer")   # optional, developer machines only


@pytest.mark.parametrize("tokens, text", [
    (["a", "man", "'s", "t", "-", "shirt", "."], "a man's t-shirt."),
    (["two", "dogs", ",", "one", "cat", "!"], "two dogs, one cat!"),
    (["he", "said", '"', "hi", '"', "(", "twice", ")", "."], 'he said "hi" (twice).'),
    (["<bos>", "do", "n't", "stop", "<eos>", "<pad>"], "don't stop"),
    (["a", "<unk>", "-", "<unk>"], "a <unk> - <unk>"),
])
def test_word_detokenizer(tokens, text):
    assert WordDetokenizer()(tokens) == text


def test_ids_to_text_stops_at_eos(tmp_path):
    data = load_task("synthetic_translation", tokenizer="whitespace", cache_dir=False)
    src, tgt = data.splits["val"][0]
    ids = [data.vocab.index("<bos>")] + tgt + [data.vocab.index("<eos>"), data.vocab.index("a")]
    assert data.ids_to_text(ids) == data.detokenize(data.vocab.decode(tgt))
    assert data.ids_to_text(ids).endswith(".") and " ." not in data.ids_to_text(ids)


def tiny_gpt2(folder):
    """A real byte-level BPE in OpenAI's file format: the 256-symbol byte alphabet plus six merges."""
    from tokenizers.pre_tokenizers import ByteLevel
    merges = [("h", "e"), ("t", "he"), ("c", "a"), ("ca", "t"), ("Ġ", "cat"), ("Ġ", "the")]
    tokens = sorted(ByteLevel.alphabet()) + [a + b for a, b in merges]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "encoder.json").write_text(json.dumps({t: i for i, t in enumerate(tokens)}), encoding="utf-8")
    write(folder / "vocab.bpe", ["#version: 0.2"] + [f"{a} {b}" for a, b in merges])
    return tokens


def test_gpt2_from_local_files_in_the_task_folder(tmp_path):
    folder = tmp_path / "wt"
    gpt2_tokens = tiny_gpt2(folder)
    write(folder / "wiki.train.tokens", ["the cat the", "The Cat"])
    write(folder / "wiki.valid.tokens", ["the cat"])
    write(folder / "wiki.test.tokens", ["cat"])
    data = load_task("wikitext2", data_dir=folder, tokenizer="gpt2", min_freq=5, cache_dir=False)
    # LM + GPT-2: the whole tokenizer vocabulary after the specials, in GPT-2's id order, no min_freq.
    assert data.vocab.tokens == list(SPECIALS) + gpt2_tokens
    first_line = data.vocab.decode(data.splits["train"][:4])
    assert first_line == ["the", "Ġcat", "Ġthe", "<eos>"]
    assert data.detokenize(first_line) == "the cat the"
    # Cased (never lowercased): no merge applies to "T" or "Cat".
    assert data.vocab.decode(data.splits["train"][4:10]) == ["T", "he", "Ġ", "C", "a", "t"]
    assert data.info["tokenizer_source"] == str(folder) and "full vocabulary" in data.info["vocab_rule"]
    assert data.info["lowercase"] is False
    detok = pickle.loads(pickle.dumps(data.detokenize))     # picklable for Ray workers
    assert detok(["Ġcat", "Ġthe"]) == "cat the"


def test_gpt2_from_env_dir_for_classification_uses_min_freq(tmp_path, monkeypatch):
    tiny_gpt2(tmp_path / "gpt2")
    monkeypatch.setenv("EMBINIT_GPT2_DIR", str(tmp_path / "gpt2"))
    write(tmp_path / "s" / "train.tsv", ["sentence\tlabel", "the cat\t1", "the the\t0"])
    write(tmp_path / "s" / "dev.tsv", ["sentence\tlabel", "cat\t1"])
    data = load_task("sst2", data_dir=tmp_path / "s", tokenizer="gpt2", min_freq=2, cache_dir=False)
    assert data.vocab.tokens == list(SPECIALS) + ["the"]     # "Ġcat"/"Ġthe" seen once each


def test_gpt2_env_dir_missing_files(tmp_path, monkeypatch):
    (tmp_path / "gpt2").mkdir()
    (tmp_path / "gpt2" / "encoder.json").write_text("{}")
    monkeypatch.setenv("EMBINIT_GPT2_DIR", str(tmp_path / "gpt2"))
    with pytest.raises(EmbinitError, match=r"GPT2_DIR=.* lacks the GPT-2 tokenizer files \['vocab.bpe"):
        load_task("synthetic_lm", tokenizer="gpt2", cache_dir=False)


def test_gpt2_without_files_falls_back_to_the_hub_with_a_clear_error(monkeypatch):
    asked = []

    def offline(source):
        asked.append(source)
        raise OSError("We couldn't connect to 'https://huggingface.co'")

    monkeypatch.setattr(tokenizer_backends, "_from_pretrained", offline)
    with pytest.raises(EmbinitError) as e:
        load_task("synthetic_lm", tokenizer="gpt2", cache_dir=False)
    assert asked == ["gpt2"]
    assert "encoder.json and vocab.bpe" in str(e.value) and "EMBINIT_GPT2_DIR" in str(e.value)


@pytest.mark.skipif(not (REAL_GPT2 / "encoder.json").is_file(), reason="real GPT-2 files not present")
def test_real_gpt2_files(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBINIT_GPT2_DIR", str(REAL_GPT2))
    write(tmp_path / "wt" / "wiki.valid.tokens", ["Hello world"])
    write(tmp_path / "wt" / "wiki.test.tokens", [" The lobster's claws"])
    data = load_task("wikitext2", data_dir=tmp_path / "wt", tokenizer="gpt2", cache_dir=False,
                     train_split="valid", eval_split="test")
    assert len(data.vocab) == 50257 + 4
    # OpenAI's ids for "Hello", " world" are 15496, 995; embinit's rows are shifted by the 4 specials.
    assert data.splits["train"] == [15496 + 4, 995 + 4, data.vocab.index("<eos>")]
    assert data.vocab.decode(data.splits["valid"][:-1]) == ["The", "Ġlobster", "'s", "Ġclaws"]


def _wordpiece(folder, words: list[str]):
    """A tiny uncased WordPiece tokenizer over `words`, saved as a Hugging Face tokenizer folder."""
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, decoders
    tok = Tokenizer(models.WordPiece({t: i for i, t in enumerate(words)}, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()   # splits punctuation off, as BERT's does
    tok.decoder = decoders.WordPiece()
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]").save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory):
    return _wordpiece(tmp_path_factory.mktemp("hf"), ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "the", "cat", "sat",
                                                      "s", "##at", "##s", "m", "."])


@pytest.mark.slow   # imports transformers (~5-10 s here)
def test_hf_tokenizer_folder_vocab_from_training_strings(hf_folder, tmp_path):
    write(tmp_path / "s" / "train.tsv", ["sentence\tlabel", "The cats sat.\t1", "the mats\t0"])
    write(tmp_path / "s" / "dev.tsv", ["sentence\tlabel", "THE CAT\t1"])
    data = load_task("sst2", data_dir=tmp_path / "s", tokenizer=str(hf_folder), min_freq=1, cache_dir=False)
    assert data.vocab.decode(data.splits["train"][0][0]) == ["the", "cat", "##s", "sat", "."]
    assert data.vocab.decode(data.splits["train"][1][0]) == ["the", "m", "##at", "##s"]
    assert set(data.vocab.tokens[4:]) == {"the", "cat", "##s", "sat", ".", "m", "##at"}  # seen strings only
    assert data.detokenize(["the", "m", "##at", "##s"]) == "the mats"
    assert data.info["lowercase"] is True          # detected from the tokenizer, not the flag
    resolved = resolve_tokenizer(str(hf_folder))
    assert resolved.kind == "hf" and resolved.source == str(hf_folder.resolve())
    backend = load_backend(resolved)       # the batched fast path gives exactly tokenize()'s strings
    texts = ["The cats sat.", "THE MATS", "", "cat ?"]
    assert backend.tokenize_batch(texts) == [backend.tok.tokenize(t) for t in texts]


@pytest.mark.slow   # imports transformers and writes a tiny BERT
def test_a_model_folder_without_tokenizer_files_is_refused_not_read_as_all_unk(tmp_path):
    """transformers loads a folder holding only config.json and weights as a BERT tokenizer of its 5
    special tokens, without an error: every word became [UNK] and the trial trained on nothing. The
    task's tokenizer and the `hf` init's both refuse it, naming the folder."""
    from embinit.init import build_table
    from embinit.init.testing import write_tiny_bert
    folder = write_tiny_bert(tmp_path / "bert")
    for name in ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        (folder / name).unlink(missing_ok=True)
    write(tmp_path / "s" / "train.tsv", ["sentence\tlabel", "the cat sat\t1", "the dog ran\t0"])
    write(tmp_path / "s" / "dev.tsv", ["sentence\tlabel", "the cat\t1"])
    with pytest.raises(EmbinitError, match=r"tokenizer of '.*bert' has no vocabulary beyond its 5 special"):
        load_task("sst2", data_dir=tmp_path / "s", tokenizer=str(folder), min_freq=1, cache_dir=False)
    with pytest.raises(EmbinitError, match=r"tokenizer files \(tokenizer.json, vocab.txt"):
        build_table("hf", Vocab(list(SPECIALS) + ["the", "cat"]), pretrained=str(folder), cache_dir=False)


@pytest.mark.slow   # imports spaCy and builds two blank pipelines (~5 s here)
def test_spacy_tokenization_lowercase_and_whitespace_tokens(tmp_path):
    de = ["Zwei junge weiße Männer sind im Freien in der Nähe vieler Büsche.",
          "Ein  Mann\u00a0schläft."]
    en = ["Two young, White males are outside near many bushes.", "A man's sleeping."]
    for stem in ("train", "val", "test_2016_flickr"):
        write(tmp_path / "m" / f"{stem}.de", de)
        write(tmp_path / "m" / f"{stem}.en", en)
    data = load_task("multi30k", data_dir=tmp_path / "m", tokenizer="spacy", min_freq=1, cache_dir=False)
    src, tgt = data.splits["train"][0]
    assert data.src_vocab.decode(src)[-3:] == ["vieler", "büsche", "."]
    assert data.vocab.decode(tgt)[:4] == ["two", "young", ",", "white"]
    # Double spaces and U+00A0 are spaCy whitespace tokens: dropped, not vocabulary entries.
    assert data.src_vocab.decode(data.splits["train"][1][0]) == ["ein", "mann", "schläft", "."]
    assert data.vocab.decode(data.splits["train"][1][1]) == ["a", "man", "'s", "sleeping", "."]
    assert data.ids_to_text(data.splits["test"][1][1]) == "a man's sleeping."
    assert data.info["src_lang"] == "de" and data.info["tgt_lang"] == "en"
    cased = load_task("multi30k", data_dir=tmp_path / "m", tokenizer="spacy", min_freq=1, cache_dir=False,
                      lowercase=False)
    assert "White" in cased.vocab and "white" not in cased.vocab and "Büsche" in cased.src_vocab
    assert cased.references["val"] == en and cased.info["lowercase"] is False


@pytest.fixture(scope="module")
def wordpiece_folder(tmp_path_factory):
    return _wordpiece(tmp_path_factory.mktemp("wordpiece"), ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "a", "man", "'",
                                                              "s", "t", "-", "shirt", "is", "red", ".", "dog", "runs"])


@pytest.mark.slow   # imports transformers and sacrebleu
def test_subword_bleu_references_are_written_back_so_a_perfect_output_scores_100(wordpiece_folder, tmp_path):
    """WordPiece writes "man's" back as "man ' s": scored against the raw text, the model's exact
    reproduction of every reference lost BLEU (97.8 on Multi30k's test set)."""
    from embinit.train.bleu import corpus_bleu, detokenize_all
    en = ["A man's T-shirt is red.", "A dog runs."]
    for stem in ("train", "val", "test_2016_flickr"):
        write(tmp_path / "m" / f"{stem}.de", ["x y", "z"])
        write(tmp_path / "m" / f"{stem}.en", en)
    data = load_task("multi30k", data_dir=tmp_path / "m", tokenizer=str(wordpiece_folder), min_freq=1,
                     cache_dir=False)
    assert data.references["test"] == ["a man ' s t - shirt is red.", "a dog runs."]
    assert data.info["references"] == "round_trip"
    perfect = detokenize_all([data.vocab.decode(tgt) for _, tgt in data.splits["test"]], data.detokenize)
    assert corpus_bleu(perfect, data.references["test"], True)[0] == pytest.approx(100.0)
    raw = [t.lower() for t in en]   # what the references were before
    assert corpus_bleu(perfect, raw, True)[0] < 80.0
    words = load_task("multi30k", data_dir=tmp_path / "m", tokenizer="whitespace", min_freq=1, cache_dir=False)
    assert words.references["test"] == raw and words.info["references"] == "raw"   # word level: the text


def test_only_subword_translation_keys_change_with_the_references(monkeypatch):
    from embinit import config
    from embinit.config import TrialConfig
    monkeypatch.setattr(config, "CODE_VERSION", "1")   # the pinned keys were made under code version 1
    pinned = {"da435dcf7592c46e": TrialConfig(task="multi30k", init="xavier", seed=0),   # keys from before
              "b6817938a5aa8d9c": TrialConfig(task="sst2", init="bert", seed=0)}
    assert {c.key(): c for c in pinned.values()}.keys() == pinned.keys()
    before = {"24484f2ae5bd7c02": TrialConfig(task="multi30k", init="mbert", seed=0),
              "f45f86eff98149c7": TrialConfig(task="multi30k", init="xavier", tokenizer="bert-base-uncased", seed=0)}
    assert not {c.key() for c in before.values()} & before.keys()   # scored the old way: not reused
    assert TrialConfig(task="multi30k", init="mbert", seed=0)._subword_bleu_references()
    assert not TrialConfig(task="multi30k", init="glove", seed=0)._subword_bleu_references()
    assert not TrialConfig(task="multi30k", init="mbert", tokenizer="spacy", seed=0)._subword_bleu_references()


# ---- The registry's contract, once for every registered tokenizer (`TOKENIZERS`) -----------------------
# Each runs offline here: spaCy builds a blank pipeline (no trained model), GPT-2 reads the tiny BPE files
# above through $EMBINIT_GPT2_DIR. A tokenizer added to the registry is tested here with no setup; one that
# needs files to run offline adds its setup to OFFLINE. The Hugging Face folder backend (any tokenizer that
# is no registered name) meets the same contract, as the "hf folder" case.

CONTRACT_TEXTS = ["Two young, White males are outside near many bushes.", "A man's T-shirt is red.",
                  'He said "hi" (twice).', "the cat sat"]


def _gpt2_files(tmp_path, monkeypatch):
    tiny_gpt2(tmp_path / "gpt2")
    monkeypatch.setenv("EMBINIT_GPT2_DIR", str(tmp_path / "gpt2"))
    return "gpt2"


OFFLINE = {"gpt2": _gpt2_files}


@pytest.fixture(scope="module")
def contract_wordpiece(tmp_path_factory):
    """An uncased WordPiece that covers CONTRACT_TEXTS, "bushes" and "males" as two pieces each."""
    words = ["two", "young", ",", "white", "male", "##s", "are", "outside", "near", "many", "bush", "##es", ".",
             "a", "man", "'", "s", "t", "-", "shirt", "is", "red", "he", "said", '"', "hi", "(", "twice", ")",
             "the", "cat", "sat"]
    return _wordpiece(tmp_path_factory.mktemp("contract"), ["[UNK]", "[CLS]", "[SEP]", "[PAD]", *words])
SLOW = {"spacy"}   # imports spaCy (~2 s)


@pytest.fixture(params=[pytest.param(name, marks=[pytest.mark.slow] if name in SLOW else [])
                        for name in tokenization.TOKENIZERS] + [pytest.param("hf folder", marks=pytest.mark.slow)])
def tokenizer_name(request, tmp_path, monkeypatch):
    """A tokenizer value that resolves and loads offline: every registered name, and an HF folder."""
    if request.param == "hf folder":
        return str(request.getfixturevalue("contract_wordpiece"))
    setup = OFFLINE.get(request.param)
    return setup(tmp_path, monkeypatch) if setup else request.param


def test_the_registry_names_are_the_ones_config_and_the_service_use():
    from embinit import config
    from service import paths
    assert set(tokenization.WORD_LEVEL) <= set(tokenization.TOKENIZERS)
    assert config.WORD_LEVEL is tokenization.WORD_LEVEL
    assert paths.TOKENIZER_NAMES == ("auto", *tokenization.TOKENIZERS)   # "auto": TrialConfig's own


def test_contract_resolves_without_loading_and_says_what_it_is(tokenizer_name):
    spec = resolve_tokenizer(tokenizer_name, lang="en", lowercase=True)
    assert spec.name == tokenizer_name
    assert resolve_tokenizer(tokenizer_name, lang="en", lowercase=True) == spec    # a stable cache identity
    assert json.loads(json.dumps(spec.identity, default=str)) is not None
    assert spec.word_level == (tokenizer_name in tokenization.WORD_LEVEL)
    if not spec.word_level:   # sub-word tokenizers keep their own casing, whatever `lowercase` says
        assert spec.lowercase is False
    assert pickle.loads(pickle.dumps(spec)) == spec     # shipped to Ray workers


def test_contract_same_text_same_tokens(tokenizer_name):
    spec = resolve_tokenizer(tokenizer_name)
    first, second = load_backend(spec), load_backend(spec)
    tokens = first.tokenize_batch(CONTRACT_TEXTS)
    assert tokens == first.tokenize_batch(CONTRACT_TEXTS) == second.tokenize_batch(CONTRACT_TEXTS)
    assert tokens == [first.tokenize_batch([t])[0] for t in CONTRACT_TEXTS]   # batching changes nothing
    assert all(toks and all(isinstance(t, str) and t and not t.isspace() for t in toks) for toks in tokens)
    if first.lowercases:
        assert all(t == t.lower() for toks in tokens for t in toks)


def test_contract_a_perfect_output_writes_back_to_the_bleu_references(tokenizer_name):
    """What BLEU relies on (embinit.train.bleu): the target tokens of a sentence, written back by the
    tokenizer's detokenizer as the hypotheses are, are its reference (`Backend.references`), and the
    reference tokenizes to the same tokens."""
    spec = resolve_tokenizer(tokenizer_name)
    backend, detokenize = load_backend(spec), pickle.loads(pickle.dumps(detokenizer(spec)))
    tokens = backend.tokenize_batch(CONTRACT_TEXTS)
    references = backend.references(CONTRACT_TEXTS)
    assert [detokenize(["<bos>", *toks, "<eos>"]) for toks in tokens] == references
    assert backend.tokenize_batch(references) == tokens
    if backend.round_trips:
        assert references == [backend.to_string(toks).strip() for toks in tokens]
    else:
        assert references == [t.lower() if backend.lowercases else t for t in CONTRACT_TEXTS]


def test_contract_full_vocabulary_when_the_backend_has_one(tokenizer_name):
    spec = resolve_tokenizer(tokenizer_name)
    backend = load_backend(spec)
    vocab = backend.full_vocab()
    if vocab is None:   # word level: the vocabulary is what the training text holds
        assert spec.word_level
        return
    assert vocab and len(set(vocab)) == len(vocab)
    assert {t for toks in backend.tokenize_batch(CONTRACT_TEXTS) for t in toks} <= set(vocab)
    ids = backend.tok.get_vocab()   # in the tokenizer's id order
    assert [ids[t] for t in vocab] == sorted(ids.values())


# ---- Names that are no registered tokenizer ----------------------------------------------------------------

def test_a_missing_folder_names_the_registered_tokenizers(tmp_path):
    with pytest.raises(EmbinitError) as e:
        resolve_tokenizer(str(tmp_path / "nope"))
    assert "does not exist" in str(e.value) and str(list(tokenization.TOKENIZERS)) in str(e.value)


def test_a_misspelled_name_that_loads_as_no_hub_id_names_the_closest(monkeypatch):
    """'spacey' has a hub id's shape, so it is tried as one (a hub id such as 'gpt2-xl' is close to
    'gpt2' too); when that fails, the error says it is no registered name either."""
    def offline(source):
        raise OSError("We couldn't connect to 'https://huggingface.co'")

    monkeypatch.setattr(tokenizer_backends, "_from_pretrained", offline)
    spec = resolve_tokenizer("spacey")
    assert spec.kind == "hf"
    with pytest.raises(EmbinitError) as e:
        load_backend(spec)
    assert "cannot load tokenizer 'spacey'" in str(e.value)
    assert (f"'spacey' is not a registered tokenizer; choose from {sorted(tokenization.TOKENIZERS)}; "
            f"did you mean 'spacy'?") in str(e.value)


def test_reading_the_registry_loads_no_tokenizer_library_nor_the_task_pipeline():
    import subprocess
    import sys
    code = ("import sys, embinit.config, service.paths; "
            "print(sorted(m for m in ('torch', 'spacy', 'tokenizers', 'transformers', 'embinit.tasks.load') "
            "if m in sys.modules))")
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120,
                         env={**__import__("os").environ, "PYTHONPATH": str(root)})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


def test_a_folder_in_openai_s_gpt2_format_is_read_as_it_is(tmp_path):
    """Review C7: a tokenizer folder holding OpenAI's encoder.json + vocab.bpe (no tokenizer.json or
    vocab.json + merges.txt) failed in AutoTokenizer with "Couldn't instantiate the backend tokenizer from
    one of: ". Given as a path, it now tokenizes as the registered `gpt2` does from the same files."""
    folder = tmp_path / "gpt2_tokenizer"
    gpt2_tokens = tiny_gpt2(folder)
    (folder / "SOURCES.md").write_text("where the files came from\\n")
    spec = resolve_tokenizer(str(folder))
    assert spec.kind == "gpt2_files" and not spec.word_level and spec.source == str(folder.resolve())
    backend = load_backend(spec)
    assert backend.full_vocab() == gpt2_tokens
    assert backend.tokenize_batch(["the cat the"]) == [["the", "Ġcat", "Ġthe"]]
    write(tmp_path / "wt" / "wiki.train.tokens", ["the cat the", "The Cat"])
    write(tmp_path / "wt" / "wiki.valid.tokens", ["the cat"])
    write(tmp_path / "wt" / "wiki.test.tokens", ["cat"])
    data = load_task("wikitext2", data_dir=tmp_path / "wt", tokenizer=str(folder), min_freq=1, cache_dir=False)
    assert data.vocab.decode(data.splits["train"][:4]) == ["the", "Ġcat", "Ġthe", "<eos>"]


@pytest.mark.slow   # imports transformers
def test_a_folder_transformers_cannot_read_says_which_files_a_tokenizer_needs(tmp_path):
    """Review C7: the error named no file a tokenizer folder needs, and asked "offline?" of a local
    folder. It lists the folder's files and the formats read, OpenAI's GPT-2 files among them."""
    folder = tmp_path / "half"
    folder.mkdir()
    (folder / "encoder.json").write_text("{}")   # vocab.bpe missing: not OpenAI's format either
    (folder / "SOURCES.md").write_text("where the files came from\n")
    with pytest.raises(EmbinitError) as e:
        load_backend(resolve_tokenizer(str(folder)))
    text = str(e.value)
    assert "the folder holds ['SOURCES.md', 'encoder.json']" in text, text
    assert "tokenizer.json, or vocab.json + merges.txt" in text and "encoder.json + vocab.bpe alone" in text
    assert "offline?" not in text


def _latin1_wordpiece(folder):
    folder.mkdir()
    (folder / "vocab.txt").write_bytes(b"[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\ncaf\xe9\n")
    (folder / "tokenizer_config.json").write_text('{"tokenizer_class": "BertTokenizer"}')
    return folder


def test_a_tokenizer_folder_whose_vocab_is_not_utf8_is_a_spec_problem_naming_the_line(tmp_path):
    """A Latin-1 vocab.txt passed the spec check; each trial then failed with "stream did not contain valid
    UTF-8", and the hint listed vocab.txt among the files the folder lacked."""
    from embinit.tasks.tokenization import local_tokenizer_problem
    folder = _latin1_wordpiece(tmp_path / "tok")
    assert local_tokenizer_problem(str(folder)) == (f"{folder}/vocab.txt:7: not UTF-8: byte 0xe9 at column 4 in "
                                                    "'caf\\xe9'; re-encode the file as UTF-8 (e.g. iconv -f latin1 "
                                                    "-t utf-8)")


@pytest.mark.slow   # imports transformers
def test_loading_a_tokenizer_folder_whose_vocab_is_not_utf8_names_the_line(tmp_path):
    folder = _latin1_wordpiece(tmp_path / "tok")
    with pytest.raises(EmbinitError) as e:
        load_backend(resolve_tokenizer(str(folder)))
    text = str(e.value)
    assert f"{folder}/vocab.txt:7: not UTF-8" in text and "iconv" in text and "needs" not in text, text
