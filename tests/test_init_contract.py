"""One contract suite over every registry entry (random inits, every source family, every transform,
every OOV rule): shape, finite values, same generator -> same tensor, different seed -> different."""

import pytest
import torch

from embinit.init import INITS, OOV_RULES, SOURCES, TRANSFORMS, build_table, parse_init_spec
from embinit.init import testing as tt
from embinit.vocab import Vocab

torch.set_num_threads(1)
# "zebra" and the specials are missing from every source, so OOV rules always have work to do
VOCAB = Vocab(["<pad>", "<unk>", "the", "cat", "sat", "zebra", "mat", "on", "dog", "a"])
HF_FAMILIES = [name for name in SOURCES if parse_init_spec(name).is_subword]
# transforms as spec tokens: one per registry name, a transform with an argument in each of its forms
ARGUMENTS = {"rescale": ["rescale=0.25x", "rescale=0.05", "rescale=absorption:0.5"]}
TRANSFORM_TOKENS = [t for name in sorted(TRANSFORMS) for t in ARGUMENTS.get(name, [name])]
# a training text for the `focus` rule (every rule gets it; the others ignore it)
CORPUS = [["the", "cat", "sat", "on", "a", "mat"], ["a", "zebra", "sat", "on", "the", "dog"],
          ["the", "dog", "and", "the", "zebra"]] * 4
FILE_FAMILIES = [name for name in SOURCES if name not in HF_FAMILIES]


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    root = tmp_path_factory.mktemp("src")
    vectors = tt.word_vectors(dim=6, seed=2)
    return {"glove": tt.write_text(root / "g.txt.gz", vectors),
            "word2vec": tt.write_word2vec_bin(root / "w.bin", vectors),
            "fasttext": tt.write_text(root / "f.vec", vectors, header=True),
            "npy": tt.write_npy(root / "m.npy", vectors),
            "pretrained": tt.write_text(root / "p.txt", vectors)}


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory):
    return tt.write_tiny_bert(tmp_path_factory.mktemp("bert"), dim=8)


def _check_contract(build, n, dim, random_part=True):
    g1, g2 = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    a, b = build(generator=g1), build(generator=g2)
    assert a.table.shape == (n, dim) and a.table.dtype == torch.float32 and a.dim == dim
    assert torch.isfinite(a.table).all()
    assert torch.equal(a.table, b.table)
    assert torch.equal(a.table, build(seed=7).table)   # seed=s is the same as a generator seeded with s
    if random_part:
        assert not torch.equal(a.table, build(seed=8).table)


@pytest.mark.parametrize("name", sorted(INITS) + ["xavier+rescale=4x", "normal+rescale=absorption:2"])
def test_random_init_contract(name):
    _check_contract(lambda **kw: build_table(name, VOCAB, dim=12, **kw), len(VOCAB), 12)
    assert build_table(name, VOCAB, dim=12).coverage is None


@pytest.mark.parametrize("transform", [None] + TRANSFORM_TOKENS)
@pytest.mark.parametrize("family", FILE_FAMILIES)
def test_file_source_contract(family, transform, sources, tmp_path):
    spec = family + (f"+{transform}" if transform else "")
    _check_contract(lambda **kw: build_table(spec, VOCAB, pretrained=str(sources[family]),
                                             cache_dir=tmp_path, **kw), len(VOCAB), 6)


@pytest.mark.parametrize("rule", sorted(set(OOV_RULES) - {"subword_mean"}))
def test_oov_rule_contract(rule, sources, tmp_path):
    _check_contract(lambda **kw: build_table("glove+standardize", VOCAB, pretrained=str(sources["glove"]),
                                             oov=rule, cache_dir=tmp_path, corpus=CORPUS, **kw),
                    len(VOCAB), 6, random_part=rule in ("xavier", "mean_cov", "focus"))   # mean/zeros: no draws


@pytest.mark.parametrize("rule", sorted(set(OOV_RULES) - {"subword_mean"}))
def test_oov_rule_contract_with_shuffle(rule, sources, tmp_path):
    _check_contract(lambda **kw: build_table("glove+shuffle", VOCAB, pretrained=str(sources["glove"]),
                                             oov=rule, cache_dir=tmp_path, corpus=CORPUS, **kw), len(VOCAB), 6)


@pytest.mark.slow  # imports transformers
@pytest.mark.parametrize("transform", [None] + TRANSFORM_TOKENS)
@pytest.mark.parametrize("family", HF_FAMILIES)
def test_hf_source_contract(family, transform, bert_dir, tmp_path_factory):
    spec = family + (f"+{transform}" if transform else "")
    cache = tmp_path_factory.getbasetemp() / "hf_contract_cache"   # shared: one model load in all
    for rule in ("xavier", "subword_mean"):
        _check_contract(lambda rule=rule, **kw: build_table(spec, VOCAB, pretrained=str(bert_dir), oov=rule,
                                                            cache_dir=cache, **kw), len(VOCAB), 8,
                        random_part=rule == "xavier" or transform in ("match", "shuffle", "shuffle_elements"))


def test_raw_source_without_missing_rows_is_deterministic_regardless_of_seed(sources):
    vocab = Vocab(["the", "cat"])
    a = build_table("glove", vocab, pretrained=str(sources["glove"]), seed=1, cache_dir=False).table
    b = build_table("glove", vocab, pretrained=str(sources["glove"]), seed=2, cache_dir=False).table
    assert torch.equal(a, b)


def test_every_registry_entry_has_a_description():
    from embinit.init import DESCRIPTIONS
    assert set(DESCRIPTIONS["inits"]) == set(INITS)
    assert set(DESCRIPTIONS["sources"]) == set(SOURCES)
    assert set(DESCRIPTIONS["transforms"]) == set(TRANSFORMS)
    assert set(DESCRIPTIONS["oov_rules"]) == set(OOV_RULES)
    assert all(d.strip() for group in DESCRIPTIONS.values() for d in group.values())
