"""User-facing errors.

Anything a user can cause (a bad file, an unknown name, an invalid spec) raises `EmbinitError` with a
one-line message that names the problem and the offending value (a `ListedError`: each problem, which the
CLI prints one a line). The CLI prints it without a traceback and exits non-zero; the service turns it
into a 4xx.
"""

from pathlib import Path


class EmbinitError(Exception):
    """A problem with the user's input, reported as one clear line."""

    def listing(self) -> str:
        """The message as the CLI prints it: the one line (`ListedError` lists its problems one a line)."""
        return str(self)


class ListedError(EmbinitError):
    """Several problems under one head (`invalid experiment spec (3 problems):`): `str` joins them on one
    line, as a log or the service keeps it; `listing()` puts each on its own line (`  - path: what`),
    then the notes (what was not checked because of them), where there is more than one problem."""

    def __init__(self, head: str, items: list[str], notes: list[str] | tuple[str, ...] = ()):
        self.head, self.items, self.notes = head, list(items), list(notes)
        super().__init__(f"{head} " + "; ".join(self.items + self.notes))

    def listing(self) -> str:
        if len(self.items) < 2:
            return str(self)
        return "\n".join([self.head, *(f"  - {item}" for item in self.items), *(f"  {n}" for n in self.notes)])


MAX_LISTED = 10   # problems of one file named in its error; the rest are counted


def problems_error(path: Path, problems: list[str], hint: str = "") -> EmbinitError:
    """One error for every problem found in a file (`path:line: what`), the first MAX_LISTED named, then
    `hint` (what to do about them) once (the readers of a task's data files and of pretrained vectors)."""
    more = f" (and {len(problems) - MAX_LISTED} more)" if len(problems) > MAX_LISTED else ""
    head = f"{path}: {len(problems)} problems: " if len(problems) > 1 else ""
    return EmbinitError(head + " | ".join(problems[:MAX_LISTED]) + more + (f"; {hint}" if hint else ""))


def each_read(head: str, reads: list) -> list:
    """The result of each of `reads` (calls without arguments, each reading one input of a command that
    does not depend on the others: a file, a name), or one error for all that fail: a ListedError under
    `head` listing each problem where several do, the one error as it is where one does. A command's
    inputs are then fixed in one round, not one run per mistake."""
    results, failed = [], []
    for read in reads:
        try:
            results.append(read())
        except EmbinitError as e:
            results.append(None)
            failed.append(e)
    if len(failed) == 1:
        raise failed[0]
    if failed:
        items = [item for e in failed for item in (e.items if isinstance(e, ListedError) else [str(e)])]
        raise ListedError(f"{head} ({len(items)} problems):", items)
    return results


def trials_text(names: list[str]) -> str:
    """`trials a, b, c and 2 more`: where a problem of some planned trials lies, as spec checks name them."""
    return "trials " + ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


# difflib's own default, 0.6, offered 'focus' for `--oov bogus` (3 of 5 letters in order: exactly 0.6);
# a swapped pair in 3 letters ('cpm' for 'cmp') is 0.67 and stays a suggestion
CLOSE_ENOUGH = 0.65


def closest(name: str, valid, cutoff: float = CLOSE_ENOUGH) -> str | None:
    """The valid name closest to `name` (difflib, at least `cutoff` alike; case-insensitively where nothing
    is close as written), or None when none is close."""
    import difflib
    names = sorted(str(v) for v in valid)
    close = difflib.get_close_matches(str(name), names, n=1, cutoff=cutoff) or \
        difflib.get_close_matches(str(name).lower(), [v.lower() for v in names], n=1, cutoff=cutoff)
    if close and close[0] not in names:  # matched case-insensitively: show the registered spelling
        close = [next(v for v in names if v.lower() == close[0])]
    return close[0] if close else _part_of(str(name), names)


def _part_of(name: str, names: list[str]) -> str | None:
    """The one valid name that `name` is a clear part of, where difflib finds none alike (a short name
    against a long one): its last '/' part (`acc` for `val/acc`) or its beginning (`early_stop` for
    `early_stopping_patience`); None for a name under 3 characters or a part of several names."""
    if len(name) < 3:
        return None
    low = name.lower()
    for hits in ([v for v in names if v.lower().rsplit("/", 1)[-1] == low],
                 [v for v in names if v.lower().startswith(low)]):
        if len(hits) == 1:
            return hits[0]
    return None


def did_you_mean(name: str, valid) -> str:
    """"; did you mean 'x'?" with the valid name closest to `name` (`closest`), or "" when none is close."""
    close = closest(name, valid)
    return f"; did you mean {close!r}?" if close else ""


def unknown_name(kind: str, name: str, valid) -> EmbinitError:
    """The error for a name that is not in a registry, listing the valid ones and the closest."""
    return EmbinitError(f"{name!r} is not a registered {kind}; choose from {sorted(valid)}{did_you_mean(name, valid)}")


def hf_load_error(name: str, e: Exception) -> EmbinitError:
    """A Hugging Face model that cannot be loaded, with transformers' first line of why."""
    first = (str(e).strip().splitlines() or [type(e).__name__])[0]
    if (why := offline_miss(name)) is not None:
        return EmbinitError(f"cannot load Hugging Face model {name!r}: {why}")
    where = "folder" if Path(name).expanduser().is_dir() else "hub id (needs the network)"
    return EmbinitError(f"cannot load Hugging Face model {name!r} ({where}): {first}")


def offline_miss(name: str, repo_type: str = "model") -> str | None:
    """Why hub id `name` cannot load while Hugging Face is kept offline and its cache lacks the snapshot
    asked for (the revision asked, what the cache holds), else None (a folder, online, or cached: then
    the loader's own error says why). transformers' own words, "couldn't connect to huggingface.co",
    would blame a network it never tried."""
    from embinit.hf_cache import not_cached, offline, path_shaped, snapshot
    flag = offline()
    if flag is None or Path(name).expanduser().exists() or path_shaped(name) \
            or snapshot(name, repo_type) is not None:   # a path, no hub id: not here
        return None
    return f"{not_cached(name, repo_type)}; {flag} is set, so the hub is not asked"


def empty_tokenizer(tok, name: str) -> EmbinitError | None:
    """The error for a tokenizer `transformers` loaded with no vocabulary beyond its special tokens, else
    None. A model folder without its tokenizer files (config.json and weights only) loads as such a
    tokenizer, without an error, and then turns every word into its unknown token."""
    specials = set(getattr(tok, "all_special_tokens", ()))
    vocab = tok.get_vocab()
    if any(t not in specials for t in vocab):
        return None
    return EmbinitError(f"the Hugging Face tokenizer of {name!r} has no vocabulary beyond its {len(vocab)} "
                        f"special token(s) {sorted(vocab)}, so every word would become "
                        f"{getattr(tok, 'unk_token', None)!r}: a model folder needs its tokenizer files "
                        "(tokenizer.json, vocab.txt, a SentencePiece .model, ...) beside config.json")
