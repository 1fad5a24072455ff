"""Beam search against exhaustive search: on toy models whose next-token distribution is a lookup (every
hypothesis up to the cap enumerated) and on a tiny encoder-decoder; a case where ranking finished
hypotheses by raw score among the live ones pruned the best one; batching (padding, per-row caps); the
vectorised search against the row-by-row one it replaced (tests/helpers/beam_reference.py), hypothesis
for hypothesis, ties included; greedy decoding that drops ended rows against the one that kept them."""

from __future__ import annotations

import functools

import math
from types import SimpleNamespace

import pytest
import torch

from embinit.models import ModelConfig, build_model
from embinit.train import decoding
from embinit.train.decoding import BOS_ID, EOS_ID, PAD_ID, beam_search, greedy, length_penalty, translate

torch.set_num_threads(1)
ALPHA = 0.6


class LookupModel:
    """The decoding interface of `EncoderDecoder` (encode, start_state, decode_step, reorder_state) over a
    next-token distribution `logits(source, prefix)`: no network, so exhaustive search is cheap."""

    def __init__(self, logits, vocab: int, max_positions: int):
        self.logits, self.vocab = logits, vocab
        self.cfg = SimpleNamespace(max_positions=max_positions)

    def eval(self):
        return self

    def encode(self, src):
        return src, None

    def start_state(self, memory, mask):
        return {"rows": [(tuple(r), ()) for r in memory.tolist()]}

    def reorder_state(self, state, index, memory=True):
        state["rows"] = [state["rows"][i] for i in index.tolist()]

    def decode_step(self, tokens, state):
        rows = [(src, prefix + (t,)) for (src, prefix), t in zip(state["rows"], tokens[:, 0].tolist())]
        state["rows"] = rows
        # the prefix fed starts with bos, which is not part of the hypothesis
        return torch.stack([self.logits(src, prefix[1:]) for src, prefix in rows])


def logprobs(logits: torch.Tensor) -> torch.Tensor:
    logits = logits.clone().float()
    logits[PAD_ID] = logits[BOS_ID] = float("-inf")
    return torch.log_softmax(logits, -1)


def exhaustive(score_next, vocab: int, cap: int) -> tuple[float, list[int]]:
    """The best (normalised score, tokens) over every hypothesis: ending in eos within `cap` tokens, or `cap`
    tokens without one. `score_next(prefix)` gives the next token's log-probabilities."""
    best = (float("-inf"), [])
    stack = [((), 0.0)]
    while stack:
        prefix, s = stack.pop()
        lp = score_next(prefix).tolist()
        for tok in range(vocab):
            if lp[tok] == float("-inf"):
                continue
            seq, total = prefix + (tok,), s + lp[tok]
            if tok == EOS_ID:
                best = max(best, (total / length_penalty(len(seq), ALPHA), list(prefix)))
            elif len(seq) == cap:
                best = max(best, (total / length_penalty(len(seq), ALPHA), list(seq)))
            else:
                stack.append((seq, total))
    return best


def hypothesis_score(score_next, tokens: list[int], cap: int) -> float:
    seq = list(tokens) + ([] if len(tokens) == cap else [EOS_ID])
    total = sum(float(score_next(tuple(seq[:i]))[t]) for i, t in enumerate(seq))
    return total / length_penalty(len(seq), ALPHA)


def model_scorer(m, src_row: torch.Tensor):
    """`score_next` of an encoder-decoder for one source row [1, S], by the whole (uncached) decoder."""
    memory, mask = m.encode(src_row)

    def score_next(prefix):
        tgt = torch.tensor([[BOS_ID, *prefix]])
        return logprobs(m.output(m.decode(tgt, memory, mask))[0, -1])
    return score_next


def random_lookup(seed: int, vocab: int):
    def logits(src, prefix):
        g = torch.Generator().manual_seed(hash((seed, src, prefix)) % 2 ** 31)
        return 2.0 * torch.randn(vocab, generator=g)
    return logits


@pytest.fixture
def caps_by_source(monkeypatch):
    """Each row's cap = its source length (eos counted) + 1, so rows batched together have other caps and
    exhaustive search stays small."""
    monkeypatch.setattr(decoding, "max_decode_len", lambda n, limit: min(limit - 1, n + 1))


@pytest.mark.parametrize("seed", range(6))
def test_with_a_beam_wide_enough_for_everything_beam_search_finds_the_exhaustive_best(seed, caps_by_source):
    """Every row of a padded batch, each at its own cap (3, 4 or 2 tokens), gets the hypothesis exhaustive
    search finds: the bookkeeping of finished hypotheses, the penalty, the caps and the stopping rule."""
    vocab = 6   # 4 specials, 2 words: 3 tokens other than eos per step
    m = LookupModel(random_lookup(seed, vocab), vocab, max_positions=64)
    sources = [[4, 5], [5, 4, 4], [4]]
    src = decoding.pad([s + [EOS_ID] for s in sources])
    got = beam_search(m, src, beam=128)   # >= 4 * 3^(cap - 1) candidates at the last step: no pruning
    for row, hyp in zip(src.tolist(), got):
        cap = sum(t != PAD_ID for t in row) + 1
        score_next = (lambda key: lambda prefix: logprobs(m.logits(key, prefix)))(tuple(row))
        best_score, best = exhaustive(score_next, vocab, cap)
        assert hyp == best
        assert hypothesis_score(score_next, hyp, cap) == pytest.approx(best_score, abs=1e-9)


def test_beam_search_of_a_tiny_encoder_decoder_finds_the_exhaustive_best():
    cfg = ModelConfig(d_model=16, heads=4, layers=2, ff_dim=32, max_positions=4)   # cap: 3 tokens
    g = torch.Generator().manual_seed(0)
    m = build_model("translation", {"src": torch.randn(8, 16, generator=g), "tgt": torch.randn(6, 16, generator=g)},
                    cfg, num_labels=2, generator=torch.Generator().manual_seed(1)).eval()
    src = torch.tensor([[4, 5, EOS_ID], [6, 7, EOS_ID], [7, EOS_ID, PAD_ID]])
    with torch.no_grad():
        got = beam_search(m, src, beam=64)
        for r, hyp in enumerate(got):
            score_next = model_scorer(m, src[r:r + 1])
            best_score, best = exhaustive(score_next, 6, cap=3)
            assert hypothesis_score(score_next, hyp, 3) == pytest.approx(best_score, abs=1e-5)
            assert hyp == best


def crafted_logits(src, prefix):
    """`eos` and `a eos` are likely; `b c c c c eos` is less likely but longer, and its normalised score
    is the best: -1.30 / 1.439 = -0.90 against -1.0 (`eos`) and -1.15 / 1.097 = -1.05 (`a eos`)."""
    unk, a, b, c = 1, 4, 5, 6
    p = {(): {EOS_ID: .368, a: .333, b: .287, unk: .010, c: .002}, (a,): {EOS_ID: .95}}
    for k in range(1, 5):
        p[(b,) + (c,) * (k - 1)] = {c: .99}
    p[(b, c, c, c, c)] = {EOS_ID: .99}
    probs = p.get(prefix, {EOS_ID: .2})
    rest = (1.0 - sum(probs.values())) / max(5 - len(probs), 1)
    out = torch.full((7,), float("-inf"))
    for t in (unk, EOS_ID, a, b, c):
        out[t] = math.log(probs.get(t, rest))
    return out


def test_finished_hypotheses_do_not_take_live_slots_so_a_better_long_one_survives():
    """With beam 2, `eos` finishes at step 1 and `a` and `b` stay live; the old search kept `eos` in one of
    the two slots (extended by padding at no cost), pruned `b` at once and returned the empty output."""
    m = LookupModel(crafted_logits, 7, max_positions=8)   # cap 7
    src = torch.tensor([[4, EOS_ID]])
    best_score, best = exhaustive(lambda prefix: logprobs(crafted_logits((), prefix)), 7, cap=7)
    assert best == [5, 6, 6, 6, 6]
    assert beam_search(m, src, beam=2) == [best]


def tiny_model(seed=0):
    cfg = ModelConfig(d_model=16, heads=4, layers=2, ff_dim=32, max_positions=64)
    g = torch.Generator().manual_seed(seed)
    tables = {"src": torch.randn(20, 16, generator=g), "tgt": torch.randn(12, 16, generator=g)}
    init = torch.Generator().manual_seed(seed + 1)
    return build_model("translation", tables, cfg, num_labels=2, generator=init).eval()


def test_beam_of_one_scores_at_least_as_well_as_greedy():
    """Greedy's hypothesis is always among those a beam of one finishes (its path is the live one until it
    takes eos), and the search stops only when nothing live can beat the best finished one."""
    m = tiny_model()
    src = torch.randint(4, 20, (6, 5), generator=torch.Generator().manual_seed(3))
    src[:, -1] = EOS_ID
    with torch.no_grad():
        caps = decoding.row_caps(src, m.cfg.max_positions).tolist()
        for r, (g, b1) in enumerate(zip(greedy(m, src), beam_search(m, src, beam=1))):
            score_next = model_scorer(m, src[r:r + 1])
            assert hypothesis_score(score_next, b1, caps[r]) >= hypothesis_score(score_next, g, caps[r]) - 1e-5


def test_a_sentence_translates_the_same_alone_or_in_a_padded_batch_with_finished_rows():
    m = tiny_model(seed=4)
    gen = torch.Generator().manual_seed(5)
    sources = [torch.randint(4, 20, (n,), generator=gen).tolist() for n in (2, 9, 4, 13, 1, 6)]
    alone = translate(m, sources, beam_size=4, batch_size=1)
    together = translate(m, sources, beam_size=4, batch_size=len(sources))
    assert together == alone
    assert all(not {EOS_ID, PAD_ID, BOS_ID} & set(h) for h in together)


def test_only_beam_search_trials_have_new_keys():
    """Trials decoded by beam search score other BLEU now: their keys say so, so stored runs of the old
    search are not reused; greedy trials (the default) keep their keys."""
    from embinit.config import TrialConfig
    assert TrialConfig(task="multi30k", init="xavier", seed=0, beam_size=4).key_fields()["beam_search"] == \
        "finished_aside"
    for cfg in (TrialConfig(task="multi30k", init="xavier", seed=0), TrialConfig(task="sst2", init="xavier", seed=0)):
        assert "beam_search" not in cfg.key_fields()


def rounded_lookup(seed: int, vocab: int, eos_bias: float):
    """Logits on a coarse grid (many exact ties between hypotheses' scores), eos favoured by `eos_bias`."""
    def logits(src, prefix):
        g = torch.Generator().manual_seed(hash((seed, src, prefix)) % 2 ** 31)
        out = torch.randint(-3, 3, (vocab,), generator=g).float()
        out[EOS_ID] += eos_bias
        return out
    return logits


def random_batch(gen: torch.Generator, rows: int, words: range) -> torch.Tensor:
    """A padded source batch of `rows` sentences of 1..6 words from `words`, each ended by eos."""
    lengths = torch.randint(1, 7, (rows,), generator=gen).tolist()
    return decoding.pad([torch.randint(words.start, words.stop, (n,), generator=gen).tolist() + [EOS_ID]
                         for n in lengths])


@pytest.mark.parametrize("seed", range(40))
def test_vectorised_search_returns_the_row_by_row_reference_hypotheses_on_lookup_models(seed, monkeypatch):
    """Padded batches, beams 1..5, caps from 1 to 9 tokens per row, eos likely or unlikely, and ties
    everywhere (logits on an integer grid): the same hypothesis as the search it replaced, row for row."""
    from helpers.beam_keep_rows_reference import beam_search as keep_rows_reference
    from helpers.beam_reference import beam_search as reference
    from helpers.greedy_reference import greedy as greedy_reference
    gen = torch.Generator().manual_seed(seed)
    extra = int(torch.randint(0, 4, (), generator=gen))
    monkeypatch.setattr(decoding, "max_decode_len", lambda n, limit: min(limit - 1, max(1, n - 3 + extra)))
    vocab = int(torch.randint(5, 9, (), generator=gen))
    make = rounded_lookup if seed % 2 else random_lookup
    logits = make(seed, vocab, eos_bias=float(seed % 3)) if make is rounded_lookup else make(seed, vocab)
    m = LookupModel(logits, vocab, max_positions=int(torch.randint(3, 12, (), generator=gen)))
    src = random_batch(gen, rows=int(torch.randint(1, 9, (), generator=gen)), words=range(4, 9))
    for beam in range(1, 6):
        want = reference(m, src, beam)
        assert beam_search(m, src, beam) == want == keep_rows_reference(m, src, beam), beam
        assert beam_search(m, src, beam, check_every=3) == want, beam   # an accelerator's cadence
    assert greedy(m, src) == greedy_reference(m, src)   # ended rows dropped: the tokens of the old greedy


@pytest.mark.parametrize("seed", range(6))
def test_vectorised_search_returns_the_row_by_row_reference_hypotheses_on_tiny_encoder_decoders(seed):
    """The real model (cached decoder state reordered each step), its own caps (1.5 x source + 10), rows of
    a padded batch finishing at different steps."""
    from helpers.beam_keep_rows_reference import beam_search as keep_rows_reference
    from helpers.beam_reference import beam_search as reference
    from helpers.greedy_reference import greedy as greedy_reference
    m = tiny_model(seed)
    src = random_batch(torch.Generator().manual_seed(100 + seed), rows=7, words=range(4, 20))
    with torch.no_grad():
        for beam in range(1, 6):
            want = reference(m, src, beam)
            assert beam_search(m, src, beam) == want == keep_rows_reference(m, src, beam), beam
            assert beam_search(m, src, beam, check_every=3) == want, beam
        m.output.bias[EOS_ID] += 1.0   # rows that end at different steps
        assert greedy(m, src) == greedy_reference(m, src)


def test_the_length_penalty_is_the_trials_and_zero_ranks_by_log_probability_alone():
    """alpha = 0: `eos` (-1.0) beats `a eos` (-1.15) and `b c c c c eos` (-1.30); the default 0.6 prefers
    the long one."""
    m = LookupModel(crafted_logits, 7, max_positions=8)
    assert translate(m, [[4]], beam_size=2, alpha=0.0) == [[]]
    assert translate(m, [[4]], beam_size=2) == translate(m, [[4]], beam_size=2, alpha=0.6) == [[5, 6, 6, 6, 6]]


# computed on commit 5dafea0, before `length_penalty` existed: those trials' keys must still be reached
KEYS_BEFORE = {(1, 4, None): "4a32d7cd06ecaf97", (0, 5, 64): "e6f1ae8cdb0bc855", (2, 1, None): "545e2a4fdbf2e1ca"}


def test_trial_keys_at_the_default_length_penalty_are_unchanged_and_others_get_their_own(version_of_the_pins):
    from embinit.config import TrialConfig
    for (seed, beam, batch), key in KEYS_BEFORE.items():
        cfg = TrialConfig(task="multi30k", init="xavier", seed=seed, beam_size=beam, batch_size=batch)
        assert cfg.key() == key
        d = cfg.to_dict()
        d.pop("length_penalty")                         # a config recorded before the field
        assert TrialConfig.from_dict(d).key() == key
    other = TrialConfig(task="multi30k", init="xavier", seed=1, beam_size=4, length_penalty=1.0)
    assert other.key() != KEYS_BEFORE[(1, 4, None)] and other.key_fields()["length_penalty"] == 1.0


def test_a_greedy_trials_key_ignores_the_length_penalty_it_cannot_use(version_of_the_pins):
    """Greedy decoding ranks no hypotheses: a greedy trial that sets `length_penalty` computes what the
    default does, and is the same trial (reused, not trained again)."""
    from embinit.config import TrialConfig
    greedy_other = TrialConfig(task="multi30k", init="xavier", seed=2, beam_size=1, length_penalty=1.0)
    assert greedy_other.key() == KEYS_BEFORE[(2, 1, None)]
    assert "length_penalty" not in greedy_other.key_fields()


def test_a_spec_records_a_length_penalty_only_when_it_sets_one():
    """A sweep is known by its spec's hash: specs that leave `length_penalty` unset keep the hash they had
    before the field (tests/test_data_revision.py pins one); one that sets it, in a task or the defaults,
    is another sweep."""
    from embinit.spec import load_spec
    base = {"name": "h", "tasks": [{"task": "multi30k", "beam_size": 4}], "inits": ["xavier"], "seeds": 1}
    plain = load_spec(base)
    assert "length_penalty" not in str(plain.canonical())
    in_task = load_spec({**base, "tasks": [{"task": "multi30k", "beam_size": 4, "length_penalty": 1.0}]})
    in_defaults = load_spec({**base, "defaults": {"length_penalty": 1.0}})
    assert len({plain.spec_hash(), in_task.spec_hash(), in_defaults.spec_hash()}) == 3


def ends_after_first_token(src, prefix):
    """A lookup whose rows end after as many tokens as their source's first token says, minus 3."""
    out = torch.zeros(7)
    out[EOS_ID if len(prefix) >= src[0] - 3 else 5] = 5.0
    return out


@pytest.mark.parametrize("decode, sizes_every_step, sizes_every_3", [
    (greedy, [4, 4, 3, 2, 2, 1, 1], [4, 4, 4, 2, 2, 2, 1, 1, 1]),
    (functools.partial(beam_search, beam=2), [8, 8, 6, 4, 4, 2, 2], [8, 8, 8, 4, 4, 4, 2, 2, 2])],
    ids=["greedy", "beam2"])
def test_a_row_leaves_the_batch_once_its_search_has_stopped(decode, sizes_every_step, sizes_every_3):
    """Rows ending after 6, 2, 1 and 4 tokens (7, 3, 2 and 5 steps with the eos; for beam search nothing
    live can beat them then): each step decodes only the rows (beam slots) still going, and each row's
    output is the one it gets decoded alone. The searches that kept every row decoded all at every step.
    On an accelerator's cadence (a check every 3 steps) stopped rows stay until the check: the last row
    stops at step 7 and is seen at the check after 9."""
    class Recording(LookupModel):
        def decode_step(self, tokens, state):
            sizes.append(tokens.shape[0])
            return super().decode_step(tokens, state)

    sizes: list[int] = []
    m = Recording(ends_after_first_token, 7, max_positions=64)
    src = torch.tensor([[9, EOS_ID], [5, EOS_ID], [4, EOS_ID], [7, EOS_ID]])
    out = decode(m, src)
    assert out == [[5] * 6, [5, 5], [5], [5] * 4]
    assert sizes == sizes_every_step
    assert [decode(m, src[r:r + 1])[0] for r in range(4)] == out
    sizes.clear()
    assert decode(m, src, check_every=3) == out
    assert sizes == sizes_every_3


def test_uncached_greedy_drops_ended_rows_too_and_gives_what_cached_greedy_gives():
    m = tiny_model(seed=8)
    with torch.no_grad():
        m.output.bias[EOS_ID] += 1.0   # rows end at different steps, some at their caps
    src = torch.randint(4, 20, (8, 7), generator=torch.Generator().manual_seed(7))
    src[:, -1] = EOS_ID
    src[2, 3:] = PAD_ID
    rows_decoded = []
    decode = m.decode
    m.decode = lambda tgt, memory, mask: rows_decoded.append(tgt.shape[0]) or decode(tgt, memory, mask)
    with torch.no_grad():
        uncached, cached = greedy(m, src, cached=False), greedy(m, src, cached=True)
    assert uncached == cached
    caps = decoding.row_caps(src, m.cfg.max_positions).tolist()
    # each row's steps: its tokens and its eos, or as many tokens as its cap
    lengths = sorted(len(h) + (len(h) < cap) for h, cap in zip(cached, caps))
    assert len(set(lengths)) > 2
    assert rows_decoded == [sum(n > i for n in lengths) for i in range(lengths[-1])]
    assert rows_decoded[-1] < rows_decoded[0]


def test_beam_search_of_an_encoder_decoder_decodes_only_the_rows_still_going():
    """The real model (cached keys/values, encoder memory and its padding mask dropped with a row): the
    slots decoded at each step are the beam times the rows whose search alone runs that long, and every
    row's hypothesis is its own alone."""
    m = tiny_model(seed=9)
    with torch.no_grad():
        m.output.bias[EOS_ID] += 1.5   # rows stop at different steps
    src = random_batch(torch.Generator().manual_seed(11), rows=6, words=range(4, 20))
    sizes: list[int] = []
    decode_step = m.decode_step
    m.decode_step = lambda tokens, state: sizes.append(tokens.shape[0]) or decode_step(tokens, state)
    with torch.no_grad():
        alone, steps = [], []
        for r in range(src.shape[0]):
            row = src[r:r + 1, :int((src[r] != PAD_ID).sum())]
            sizes.clear()
            alone += beam_search(m, row, beam=3)
            steps.append(len(sizes))
        sizes.clear()
        assert beam_search(m, src, beam=3) == alone
    assert len(set(steps)) > 2
    assert sizes == [3 * sum(n > i for n in steps) for i in range(max(steps))]
