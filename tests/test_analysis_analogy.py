import math

import pytest
import torch

from embinit.analysis.analogy import evaluate_analogies, load_questions, parse_questions
from embinit.analysis.table4 import (EXTRA_ROWS, TABLE4_ROWS, apply_chain, chain_label, chain_ratio, parse_steps,
                                     ratio_sweep, run_table4)
from embinit.errors import EmbinitError
from embinit.init import xavier_std
from embinit.posenc import sinusoidal
from helpers.analogy import QUESTIONS, VECS

torch.set_num_threads(1)


def space(vecs=VECS):
    tokens = list(vecs)
    return torch.tensor([vecs[t] for t in tokens], dtype=torch.float32), tokens


def brute_force(matrix, tokens, questions):
    """Per question, loops only: cosine to b - a + c over unit rows, a/b/c excluded, lower row wins."""
    w = matrix / matrix.norm(dim=1, keepdim=True)
    index = {}
    for i, t in enumerate(tokens):
        index.setdefault(t.upper(), i)
    correct = total = 0
    for _, qs in questions.sections:
        for q in qs:
            ids = [index.get(x.upper()) for x in q]
            if None in ids:
                continue
            total += 1
            query = w[ids[1]] - w[ids[0]] + w[ids[2]]
            best, best_i = -math.inf, None
            for i in range(len(tokens)):
                if i in ids[:3]:
                    continue
                s = float(w[i] @ query)
                if s > best:
                    best, best_i = s, i
            correct += best_i == ids[3]
    return correct, total


def test_parse_questions_sections_and_invalid_lines():
    qs = parse_questions(QUESTIONS.splitlines())
    assert [name for name, _ in qs.sections] == ["capital-common-countries", "family",
                                                 "gram1-adjective-to-adverb"]
    assert qs.count == 7 and qs.invalid == 1
    assert qs.sections[1][1][0] == ("man", "woman", "king", "queen")


def test_known_answers_oov_and_groups():
    m, tokens = space()
    res = evaluate_analogies(m, tokens, parse_questions(QUESTIONS.splitlines()))
    d = res.to_dict()
    # spain/madrid are out of the vocabulary: that question does not count
    assert res.oov == 1 and res.total == 6
    assert d["sections"]["capital-common-countries"] == {"correct": 2, "total": 2, "oov": 1,
                                                         "accuracy": 100.0}
    assert d["sections"]["family"]["correct"] == 3          # queen, girl and woman
    assert d["sections"]["gram1-adjective-to-adverb"]["correct"] == 1
    assert d["semantic"] == {"correct": 5, "total": 5, "accuracy": 100.0}
    assert d["syntactic"] == {"correct": 1, "total": 1, "accuracy": 100.0}
    assert res.summary_line() == "6/6 (100.0)"
    assert res.to_metrics()["analogy/acc"] == 100.0


def test_question_words_are_excluded():
    # without the exclusion the answer to "man woman king ?" would be `woman` (b itself) here
    vecs = {"man": [1, 0, 0], "woman": [0, 1, 0], "king": [1, 0, 0.05], "queen": [0, 1, 0.05]}
    m, tokens = space(vecs)
    q = parse_questions(["man woman king queen"])
    assert evaluate_analogies(m, tokens, q).correct == 1


def test_ties_go_to_the_lower_row():
    vecs = dict(VECS)
    vecs = {"queen2": VECS["queen"], **vecs}  # an identical row *before* queen
    m, tokens = space(vecs)
    q = parse_questions(["man woman king queen", "man woman king queen2"])
    res = evaluate_analogies(m, tokens, q)
    assert res.correct == 1   # queen2 (row 0) wins the tie, so only the second question is right
    # and the reverse order flips which question is right
    vecs2 = {**VECS, "queen2": VECS["queen"]}
    m2, tokens2 = space(vecs2)
    res2 = evaluate_analogies(m2, tokens2, parse_questions(["man woman king queen"]))
    assert res2.correct == 1


def test_case_insensitive_lookup_with_duplicate_keys():
    vecs = {**VECS, "Queen": [0, 1, 1.05, 0, 0, 0], "Woman": [0.1, 1, 0.2, 0, 0, 0]}
    m, tokens = space(vecs)
    q = parse_questions(["MAN Woman KING queen"])
    assert evaluate_analogies(m, tokens, q).correct == 1
    # case-sensitive: 'MAN' and 'KING' are unknown
    res = evaluate_analogies(m, tokens, q, case_insensitive=False)
    assert res.total == 0 and res.oov == 1 and res.accuracy is None


def test_case_variants_of_question_words_are_excluded():
    # 'Woman' is a second row for the key WOMAN, nearest to the query: it must not be the answer
    vecs = {"man": [1, 0, 0], "woman": [0, 1, 0], "king": [1, 0, 0.05], "queen": [0, 1, 0.05],
            "Woman": [0, 1, 0.049]}
    m, tokens = space(vecs)
    assert evaluate_analogies(m, tokens, parse_questions(["man woman king queen"])).correct == 1


def test_matches_brute_force_on_random_space():
    g = torch.Generator().manual_seed(0)
    words = [f"w{i}" for i in range(60)]
    m = torch.randn(60, 5, generator=g)
    idx = torch.randint(0, 60, (300, 4), generator=g)
    lines = [": random"] + [" ".join(words[i] for i in row) for row in idx.tolist()]
    lines += ["w1 w2 w3 missing"]
    qs = parse_questions(lines)
    res = evaluate_analogies(m, words, qs)
    assert (res.correct, res.total) == brute_force(m, words, qs)
    assert res.correct > 0 and res.oov == 1


def test_restrictions():
    m, tokens = space()
    qs = parse_questions(QUESTIONS.splitlines())
    # only the first 4 rows: man woman king queen
    top4 = evaluate_analogies(m, tokens, qs, restrict=4)
    assert top4.total == 2 and top4.vocab_size == 4
    listed = evaluate_analogies(m, tokens, qs, vocab=["France", "paris", "italy", "rome"])
    assert listed.total == 2 and listed.correct == 2 and listed.vocab_size == 4
    with pytest.raises(EmbinitError, match="leaves no words"):
        evaluate_analogies(m, tokens, qs, vocab=["nothing"])


def test_load_questions_errors(tmp_path):
    with pytest.raises(EmbinitError, match="not found"):
        load_questions(tmp_path / "none.txt")
    p = tmp_path / "q.txt"
    p.write_text(": only header\n")
    with pytest.raises(EmbinitError, match="0 lines are not four words and 0 are"):
        load_questions(p)
    # another file given by mistake (a GLUE tsv): refused, not one accidental "question" scored
    p.write_text("sentence\tlabel\nit 's a charming and often affecting journey .\t1\na b c d\n")
    with pytest.raises(EmbinitError, match="2 lines are not four words and 1 are; is it an analogy questions"):
        load_questions(p)
    p.write_text(QUESTIONS)
    base = load_questions(p)
    p.write_text(QUESTIONS + "a malformed line\n")
    assert load_questions(p).count == base.count == 7 and load_questions(p).invalid == base.invalid + 1


def test_a_questions_file_that_is_not_utf8_names_its_line_and_the_fix(tmp_path):
    """It gave Python's codec message ("'utf-8' codec can't decode byte 0xe9 in position 12")."""
    p = tmp_path / "q.txt"
    p.write_bytes(b": capital\nparis france caf\xe9 italy\n")
    with pytest.raises(EmbinitError, match=r"q.txt:2: not UTF-8: byte 0xe9 at column 17 .*iconv -f latin1"):
        load_questions(p)


def test_chain_steps():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(40, 8, generator=g) * 3 + 1
    assert torch.allclose(apply_chain(x, ["scale"]), x * math.sqrt(8))
    st = apply_chain(x, ["standardize"]).double()
    assert st.mean().item() == pytest.approx(0.0, abs=1e-7)
    assert st.std().item() == pytest.approx(xavier_std(40, 8), rel=1e-6)
    assert apply_chain(x, ["standardize"], n_total=100).double().std().item() == \
        pytest.approx(xavier_std(100, 8), rel=1e-6)
    pe = sinusoidal(16, 8, dtype=torch.float64)
    added = apply_chain(x, ["pe"], seed=3, max_len=16).double() - x.double()
    # every row got exactly one position's encoding, positions spread over the table
    match = (added.unsqueeze(1) - pe.unsqueeze(0)).abs().amax(dim=2) < 1e-5
    assert torch.all(match.sum(dim=1) == 1) and len(set(match.float().argmax(1).tolist())) > 5
    assert torch.equal(apply_chain(x, ["pe"], seed=3, max_len=16), apply_chain(x, ["pe"], seed=3, max_len=16))
    other_seed = apply_chain(x, ["pe"], seed=4, max_len=16)
    assert not torch.equal(apply_chain(x, ["pe"], seed=3, max_len=16), other_seed)
    scaled = apply_chain(x, ["pe_scaled"], seed=3, max_len=16).double() - x.double()
    ratio = x.double().std().item() / xavier_std(40, 8)
    assert torch.allclose(scaled, added * ratio, atol=1e-4)


def test_chain_names_and_errors():
    assert chain_label(("standardize", "pe")) == "GloVe & Xavier-Std. & Pos. Enc."
    assert chain_label((), "T5") == "T5"
    assert parse_steps("scale, standardize,pe") == ("scale", "standardize", "pe")
    assert parse_steps("") == ()
    with pytest.raises(EmbinitError, match=r"'scal' is not a registered analogy transform; choose from"):
        parse_steps("scal")
    with pytest.raises(EmbinitError, match="max_len"):
        apply_chain(torch.ones(3, 2), ["pe"], max_len=0)


def test_table4_rows_on_hand_made_space():
    m, tokens = space()
    qs = parse_questions(QUESTIONS.splitlines())
    rows = run_table4(m, tokens, qs, max_len=50)
    assert [r[0] for r in rows] == [chain_label(steps) for steps, _ in TABLE4_ROWS]
    by = {label: res for label, _, res in rows}
    # cosine ignores scale: scaling alone cannot change any answer
    assert by["GloVe & Scaled"].correct == by["GloVe"].correct == 6
    # unit-scale vectors plus unit-scale encodings: the structure is damaged
    assert by["GloVe & Pos. Enc."].correct < 6


def test_chain_ratio_is_words_std_over_the_added_encodings_std():
    """Table 4 evidence: σ(words)/σ(PE) at the step where a chain adds encodings."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(40, 8, generator=g) * 3 + 1
    pe = apply_chain(x, ["pe"], seed=3, max_len=16).double() - x.double()
    assert chain_ratio(x, ["pe"], seed=3, max_len=16) == pytest.approx(x.double().std().item() / pe.std().item(),
                                                                        rel=1e-5)
    xs = xavier_std(40, 8)
    assert chain_ratio(x, ["standardize", "scale", "pe"], seed=3, max_len=16) == \
        pytest.approx(xs * math.sqrt(8) / pe.std().item(), rel=1e-5)
    # pe then standardize: the ratio is taken at the addition, on the raw rows
    assert chain_ratio(x, ["pe", "standardize"], seed=3, max_len=16) == \
        pytest.approx(chain_ratio(x, ["pe"], seed=3, max_len=16))
    # encodings scaled by σp/σx: the ratio is σx/σ(PE), the same as standardizing first
    assert chain_ratio(x, ["pe_scaled"], seed=3, max_len=16) == pytest.approx(xs / pe.std().item(), rel=1e-5)
    assert chain_ratio(x, ["standardize", "scale"]) is None
    labels = [chain_label(steps) for steps, _ in EXTRA_ROWS]
    assert "GloVe & Xavier-Std. & Scaled & Pos. Enc." in labels and "GloVe & Pos. Enc. & Xavier-Std." in labels


def test_ratio_sweep_accuracy_rises_with_the_ratio():
    """Generated vectors with known analogies: far above the encodings' spread every analogy survives,
    far below almost none does; the sweep is deterministic for a seed."""
    m, tokens = space()
    qs = parse_questions(QUESTIONS.splitlines())
    raw = evaluate_analogies(m, tokens, qs).correct
    rows = ratio_sweep(m, tokens, qs, ratios=(0.01, 1.0, 100.0), seed=0, max_len=50)
    assert [r["ratio"] for r in rows] == [0.01, 1.0, 100.0]
    assert rows[-1]["correct"] == raw and rows[0]["correct"] < raw
    assert rows[0]["correct"] <= rows[1]["correct"] <= rows[2]["correct"]
    assert rows == ratio_sweep(m, tokens, qs, ratios=(0.01, 1.0, 100.0), seed=0, max_len=50)
    with pytest.raises(EmbinitError, match="ratios must be positive"):
        ratio_sweep(m, tokens, qs, ratios=(0.0,))


def test_the_third_word_is_never_the_answer():
    """man : woman :: king : ?  The nearest word to king − man + woman is king itself; excluded (with a
    and b), the answer is queen."""
    vecs = {"man": [1.0, 0.0, 0.0], "woman": [0.9, 0.1, 0.0], "king": [0.0, 1.0, 0.0], "queen": [0.0, 0.6, 0.8]}
    m = torch.tensor(list(vecs.values()))
    assert evaluate_analogies(m, list(vecs), parse_questions(["man woman king queen"])).correct == 1


def _cased_space(n_words=400, dim=6, seed=7):
    """Lowercase words, then capitalized and upper-case variants of the first 150 near their lowercase row
    (as in a cased source such as GloVe 840B): keys repeat, and a variant is often a query's nearest row."""
    g = torch.Generator().manual_seed(seed)
    words = [f"w{i}" for i in range(n_words)]
    base = torch.randn(n_words, dim, generator=g)
    variants = [w.capitalize() for w in words[:150]] + [w.upper() for w in words[:150]]
    rows = torch.cat([base, base[:150] + 0.05 * torch.randn(150, dim, generator=g),
                      base[:150] + 0.05 * torch.randn(150, dim, generator=g)])
    idx = torch.randint(0, n_words, (500, 4), generator=g)
    lines = [": cased"] + [" ".join(words[i] for i in q) for q in idx.tolist()]
    return rows, words + variants, parse_questions(lines)


def brute_force_cased(matrix, tokens, questions):
    """Loops only: the best row whose key (upper case) is none of a, b, c; lower row wins ties."""
    w = matrix / matrix.norm(dim=1, keepdim=True)
    keys = [t.upper() for t in tokens]
    first = {}
    for i, k in enumerate(keys):
        first.setdefault(k, i)
    correct = total = 0
    for _, qs in questions.sections:
        for q in qs:
            q = [x.upper() for x in q]
            if any(x not in first for x in q):
                continue
            total += 1
            query = w[first[q[1]]] - w[first[q[0]]] + w[first[q[2]]]
            scores = (w @ query).tolist()
            best = max((i for i in range(len(tokens)) if keys[i] not in q[:3]), key=lambda i: (scores[i], -i))
            correct += keys[best] == q[3]
    return correct, total


def test_repeated_keys_are_scored_in_vocabulary_chunks(monkeypatch):
    """With repeated keys (a cased source) scores still go through vocabulary chunks: a [questions x V]
    block is 9 GB at GloVe 840B's 2.2M rows and 1,024 questions. The answers are those of brute force."""
    import embinit.analysis.analogy as analogy

    m, tokens, qs = _cased_space()
    widths = []
    mm, matmul = torch.mm, torch.Tensor.__matmul__

    def spy_mm(a, b, *args, **kw):
        widths.append(b.shape[-1])
        return mm(a, b, *args, **kw)

    def spy_matmul(a, b):
        widths.append(b.shape[-1])
        return matmul(a, b)

    monkeypatch.setattr(analogy, "VOCAB_CHUNK", 64)
    monkeypatch.setattr(torch, "mm", spy_mm)
    monkeypatch.setattr(torch.Tensor, "__matmul__", spy_matmul)
    res = evaluate_analogies(m, tokens, qs)
    monkeypatch.undo()
    assert widths and max(widths) <= 64
    assert (res.correct, res.total) == brute_force_cased(m, tokens, qs)
    assert 0 < res.correct < res.total == 500


@pytest.mark.parametrize("tokens", [["man", "woman", "king"], ["man", "woman", "king", "Man", "KING"]])
def test_a_question_with_no_candidate_left_is_wrong(tokens):
    """Every row belongs to a question word: nothing can answer (gensim predicts nothing), so even
    'man woman king man' is not counted correct by a default row."""
    m = torch.randn(len(tokens), 4, generator=torch.Generator().manual_seed(0))
    res = evaluate_analogies(m, tokens, parse_questions(["man woman king man"]))
    assert (res.correct, res.total) == (0, 1)


@pytest.mark.parametrize("scale", [1e20, 1e-25])
def test_rows_beyond_float32_norms_keep_their_answers(scale):
    """3CosAdd reads unit rows, so a row's length changes no answer, also where its float32 norm
    overflows (beyond ~1e19, as in a diverging trial's still-finite table: the row became 0) or
    underflows (below ~1e-19: the row was left unnormalized)."""
    g = torch.Generator().manual_seed(0)
    words = [f"w{i}" for i in range(80)]
    m = torch.randn(80, 6, generator=g)
    unit = m / m.norm(dim=1, keepdim=True)
    lines = [": planted"]
    for i in range(0, 60, 4):   # d = b - a + c exactly: every planted question has its answer
        m[i + 3] = unit[i + 1] - unit[i] + unit[i + 2]
        lines.append(" ".join(words[i:i + 4]))
    qs = parse_questions(lines)
    assert evaluate_analogies(m, words, qs).correct == 15
    scaled = m.clone()
    scaled[1::2] *= scale
    assert evaluate_analogies(scaled, words, qs).correct == 15
