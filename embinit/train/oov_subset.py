"""Metrics on the sentences an OOV rule touches (issue 23): the validation and test loss and BLEU of
the best checkpoint, restricted to the pairs whose *target* contains a word the target table's pretrained
source lacks (a row the OOV rule filled; the specials `<pad> <unk> <bos> <eos>` do not count).

The OOV rules differ only in those rows, so whole-split metrics dilute their effect by the share of
sentences without such a word; these do not. Keys (in `TrialResult.test`, logged as MLflow metrics):
`oov/val_loss`, `oov/val_bleu`, `oov/val_sentences` and the same for `test`; only for translation trials
whose target table comes from a pretrained source with an OOV rule (`BuildResult.oov_rows`).
The subset is scored by the task's own loss and BLEU code on a view of the task holding only those
pairs and their references, so BLEU options (tokenizer, casing, `<unk>` handling) are the split's.
"""

from __future__ import annotations

import copy

from embinit.train.loop import mean_loss
from embinit.vocab import SPECIALS


def oov_target_ids(tables) -> set[int] | None:
    """Target-table vocabulary ids an OOV rule filled, specials excluded; None without such a table."""
    table = tables.get("tgt")
    rows = getattr(table, "oov_rows", None)
    if rows is None:
        return None
    return {int(i) for i in rows.tolist()} - set(range(len(SPECIALS)))


def oov_pairs(pairs, oov_ids: set[int]) -> list[int]:
    """Indices of the (src, tgt) pairs whose target holds one of `oov_ids`."""
    return [i for i, (_, tgt) in enumerate(pairs) if oov_ids.intersection(tgt)]


def subset_view(task, split: str, idx: list[int]):
    """A shallow copy of a TranslationTask whose `split` holds only the pairs `idx` (and references)."""
    data = copy.copy(task.data)
    data.splits = {**data.splits, split: [data.splits[split][i] for i in idx]}
    data.references = {**data.references, split: [data.references[split][i] for i in idx]}
    view = copy.copy(task)
    view.data, view._eval_batches, view._scorers, view._scored = data, {}, {}, {}   # its own batches, scorers, outputs
    return view


def oov_metrics(task, model) -> dict[str, float]:
    """The `oov/*` metrics of `model` (see the module docstring); {} when the task has no OOV rows."""
    oov_ids = getattr(task, "oov_ids", None)
    if not oov_ids:   # only a task that set them (TranslationTask.from_setup) has any
        return {}
    out: dict[str, float] = {}
    for name, split in (("val", task.val_split), ("test", task.test_split)):
        if split is None:
            continue
        idx = oov_pairs(task.data.splits[split], oov_ids)
        out[f"oov/{name}_sentences"] = float(len(idx))
        if idx:
            view = subset_view(task, split, idx)
            out[f"oov/{name}_loss"] = mean_loss(model, view.eval_batches(split), view, view.autocast)
            out[f"oov/{name}_bleu"] = float(view.bleu(model, split)[0])
    return out
