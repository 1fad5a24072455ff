"""Small generated tasks that a 1-layer transformer learns in seconds: for tests, demos and benchmarks.

They are made of real words (German-looking source, English target), so spaCy/whitespace tokenization and
word-vector inits such as GloVe apply to them as to the real tasks. Everything is generated from `seed`
with its own `random.Random`, so the same seed gives the same data in any process.
"""

from __future__ import annotations

import random

from embinit.errors import EmbinitError
from embinit.tasks.raw import RawData

# A fixed word-for-word lexicon (uninflected, so every source word has exactly one translation).
DETS = {"ein": "a", "der": "the", "jeder": "every", "dieser": "this"}
ADJS = {"rot": "red", "blau": "blue", "grün": "green", "groß": "big", "klein": "small", "alt": "old",
        "jung": "young", "schnell": "fast", "glücklich": "happy", "müde": "tired"}
NOUNS = {"hund": "dog", "katze": "cat", "mann": "man", "frau": "woman", "kind": "child", "junge": "boy",
         "mädchen": "girl", "pferd": "horse", "vogel": "bird", "haus": "house", "baum": "tree",
         "auto": "car", "ball": "ball", "straße": "street", "park": "park", "see": "lake",
         "strand": "beach", "garten": "garden", "tisch": "table", "boot": "boat"}
VERBS = {"läuft": "runs", "spielt": "plays", "sitzt": "sits", "springt": "jumps", "schwimmt": "swims",
         "wartet": "waits", "steht": "stands", "schläft": "sleeps"}
PREPS = {"in": "in", "auf": "on", "unter": "under", "neben": "near", "hinter": "behind", "vor": "before"}
LEXICON = {**DETS, **ADJS, **NOUNS, **VERBS, **PREPS, ".": "."}

POSITIVE = ("great", "wonderful", "excellent", "superb", "delightful")
NEGATIVE = ("awful", "terrible", "boring", "dreadful", "tedious")
NEUTRAL = ("the", "film", "movie", "story", "plot", "actor", "scene", "was", "is", "a", "and", "with",
           "of", "music", "ending", "director", "cast", "it", "very", "quite", "script", "camera")

SIZES = {"train": 2000, "val": 200, "test": 200}


def _noun_phrase(rng: random.Random) -> list[str]:
    words = [rng.choice(list(DETS))]
    if rng.random() < 0.5:
        words.append(rng.choice(list(ADJS)))
    return words + [rng.choice(list(NOUNS))]


def _german_sentence(rng: random.Random) -> list[str]:
    """det [adj] noun verb [prep det [adj] noun] ."""
    words = _noun_phrase(rng) + [rng.choice(list(VERBS))]
    if rng.random() < 0.7:
        words += [rng.choice(list(PREPS))] + _noun_phrase(rng)
    return words + ["."]


def _noisy(word: str, rng: random.Random, noise: float, targets: list[str]) -> str:
    return rng.choice(targets) if word != "." and rng.random() < noise else word


def translation(seed: int, noise: float = 0.0) -> RawData:
    """Source: generated German-word sentences; target: their word-for-word English translation.

    noise: the chance that a training target word is replaced by a random English word of the lexicon
    (validation and test stay clean). With it the task is no longer noiseless: validation loss bottoms out
    once the model starts fitting the noise, as on real data. The replacements come from their own random
    stream, so the sentences are the same at any noise level."""
    rng = random.Random(f"synthetic_translation:{seed}")
    flip = random.Random(f"synthetic_translation:{seed}:noise")
    targets = sorted(set(LEXICON.values()) - {"."})
    splits = {}
    for split, n in SIZES.items():
        pairs = []
        for _ in range(n):
            src = _german_sentence(rng)
            tgt = [LEXICON[w] for w in src]
            if split == "train" and noise > 0:
                tgt = [_noisy(w, flip, noise, targets) for w in tgt]
            pairs.append((" ".join(src), " ".join(tgt)))
        splits[split] = pairs
    source = f"generated(seed={seed}, noise={noise})" if noise else f"generated(seed={seed})"
    return RawData("translation", splits, ["val", "test"], source)


def classification(seed: int) -> RawData:
    """Review-like word sequences with exactly one sentiment keyword; the label says which kind."""
    rng = random.Random(f"synthetic_classification:{seed}")
    splits = {}
    for split, n in (("train", SIZES["train"]), ("dev", SIZES["val"])):
        rows = []
        for _ in range(n):
            label = rng.randrange(2)
            words = [rng.choice(NEUTRAL) for _ in range(rng.randint(4, 10))]
            words.insert(rng.randrange(len(words) + 1), rng.choice(POSITIVE if label else NEGATIVE))
            rows.append((" ".join(words) + " .", label))
        splits[split] = rows
    return RawData("classification", splits, ["dev"], f"generated(seed={seed})",
                   label_names=["negative", "positive"])


def lm(seed: int, splits: dict[str, str] | None = None) -> RawData:
    """Lines cycling through a few fixed English sentences in a seed-dependent order: after the first
    word of a line, the rest of it is predictable, so perplexity falls far below the vocabulary size."""
    rng = random.Random(f"synthetic_lm:{seed}")
    patterns = [" ".join(LEXICON[w] for w in _german_sentence(rng)) for _ in range(8)]
    order = list(range(len(patterns)))
    rng.shuffle(order)
    sizes = {"train": SIZES["train"], "valid": SIZES["val"], "test": SIZES["test"]}
    source = {}
    for split, n in sizes.items():
        # Mostly the fixed cycle, sometimes a random pattern: predictable but not trivially periodic.
        source[split] = [patterns[order[i % len(order)]] if rng.random() < 0.8 else rng.choice(patterns)
                         for i in range(n)]
    splits = splits or {"train": "train", "valid": "valid", "test": "test"}
    out = {ours: source[src] for ours, src in splits.items()}
    return RawData("lm", out, [s for s in ("valid", "test") if s in out], f"generated(seed={seed})")


def check_noise(task: str, noise) -> None:
    """noise is a synthetic_translation option: a number in [0, 1)."""
    if isinstance(noise, bool) or not isinstance(noise, (int, float)) or not 0 <= noise < 1:
        raise EmbinitError(f"noise must be a number in [0, 1), got {noise!r}")
    if noise and task != "synthetic_translation":
        raise EmbinitError(f"noise is an option of synthetic_translation only, not of {task!r}")


def generate(task: str, seed: int, splits: dict[str, str] | None = None, noise: float = 0.0) -> RawData:
    if task == "synthetic_translation":
        return translation(seed, noise)
    if task == "synthetic_classification":
        return classification(seed)
    return lm(seed, splits)
