"""Pretrained source files without loading them (no torch): where a spec's source is
(`resolve_source`), which format a file has, and its dimension D (`source_dim`: from a header, the first
line, a .npy shape or a model config). The loaders (`vectors`, `hf`) read the rows; a sweep and the
service check D against the model's at plan time (`embinit.model_dims`) with these."""

from __future__ import annotations

import codecs

import gzip
import json
import zipfile
from pathlib import Path

import numpy as np

from embinit.errors import EmbinitError, hf_load_error, problems_error
from embinit.hf_cache import revision_problem, split_revision
from embinit.init.registry import SOURCE_FAMILIES, InitSpec, parse_init_spec
from embinit.text_files import UTF8_HINT   # the one wording of the fix (vectors import it from here)

# config keys that hold the input-embedding width, most specific first (ALBERT factorizes embeddings)
DIM_KEYS = ("embedding_size", "d_model", "n_embd", "dim", "hidden_size")


def check_file(path: str | Path) -> Path:
    path = Path(path).expanduser()
    if not path.exists():
        raise EmbinitError(f"pretrained file not found: {path}")
    if not path.is_file():
        raise EmbinitError(f"pretrained source is not a file: {path}")
    return path


def open_binary(path: Path):
    """`path` opened for binary reading, gunzipped when it ends in .gz; a zip archive's one file read from it
    (GloVe's and fastText's English vectors are published as `glove.840B.300d.zip`, `crawl-300d-2M.vec.zip`)."""
    try:
        if path.suffix == ".gz":
            return gzip.open(path, "rb")
        with open(path, "rb") as f:
            zipped = f.read(4) == b"PK\x03\x04"
        return _zip_member(path) if zipped else open(path, "rb")
    except (OSError, zipfile.BadZipFile) as e:
        raise EmbinitError(f"cannot read pretrained file {path}: {getattr(e, 'strerror', None) or e}") from None


def _zip_member(path: Path):
    """The one file of the zip archive `path`, opened for reading; an archive of several (glove.6B.zip holds
    the 50d, 100d, 200d and 300d files) is an error naming them."""
    with zipfile.ZipFile(path) as archive:
        names = [i.filename for i in archive.infolist() if not i.is_dir()]
        if len(names) != 1:
            raise EmbinitError(f"{path} is a zip archive of {len(names)} files {names[:8]}; a vector file is read "
                               f"from an archive that holds it alone: unzip it (unzip {path} -d DIR) and give the "
                               f"file to read")
        return archive.open(names[0])   # it keeps the archive's file open after the archive is closed


def count_header(line: bytes) -> tuple[int, int] | None:
    """`N D` (two integers) on the first line means a word2vec/fastText header."""
    parts = line.split()
    if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
        return int(parts[0]), int(parts[1])
    return None


def first_line(path: Path) -> bytes:
    """The first line of a vector file (an error when the file is empty)."""
    with open_binary(path) as f:
        try:
            line = f.readline()
        except (OSError, EOFError) as e:
            raise EmbinitError(f"cannot read pretrained file {path}: {e}") from None
    if not line.strip():
        raise EmbinitError(f"pretrained file is empty: {path}")
    if line.startswith(FASTTEXT_MAGIC):
        raise EmbinitError(f"{path} is a fastText model (the .bin that `fasttext` saves: subword buckets and all), not "
                           f"a file of word vectors; give the .vec text file published beside it (cc.de.300.vec.gz "
                           f"for cc.de.300.bin.gz), or write one from the model (fasttext's print-word-vectors, or "
                           f"gensim's load_facebook_vectors(...).save_word2vec_format(...))")
    return line


FASTTEXT_MAGIC = (793712314).to_bytes(4, "little")   # the first 4 bytes of a fastText .bin model


def _npy_vocab_candidates(path: Path) -> list[Path]:
    return [path.with_suffix(".vocab.txt"), path.with_suffix(".vocab"), path.parent / "vocab.txt"]


def find_npy_vocab(path: Path) -> Path | None:
    """The vocabulary file of the .npy matrix `path` (see `embinit.init.vectors`), None without one."""
    return next((p for p in _npy_vocab_candidates(path) if p.is_file()), None)


def npy_vocab_path(path: Path) -> Path:
    found = find_npy_vocab(path)
    if found is None:
        raise EmbinitError(f"no vocabulary file for {path}; expected one of "
                           f"{[str(p) for p in _npy_vocab_candidates(path)]}")
    return found




def not_utf8(word: bytes, path: Path, where: str) -> str | None:
    """`path:where: not UTF-8 ...` for a word that is not UTF-8, naming the file and `where` (a line, an
    entry), else None. Callers check `isascii()` first: the common case stays cheap."""
    try:
        word.decode("utf-8")
    except UnicodeDecodeError as e:
        return (f"{path}:{where}: not UTF-8: the word '{word[:80].decode('utf-8', 'backslashreplace')}' has byte "
                f"0x{word[e.start]:02x} at position {e.start}")
    return None


def read_npy_vocab(path: Path, n_rows: int) -> list[str]:
    """The token of each of the `n_rows` rows of the .npy matrix `path`, from its vocabulary file: one
    token per line, split on "\\n" only (a token may hold any other character, "\\x85" or "\\u2028"
    included), a trailing "\\r" dropped. The one reader of that file (init's loader and the analyses)."""
    vpath = npy_vocab_path(path)
    try:
        data = vpath.read_bytes()
    except OSError as e:
        raise EmbinitError(f"cannot read vocabulary file {vpath}: {e}") from None
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    try:
        names = [t.rstrip("\r") for t in data.decode("utf-8").split("\n")][:len(lines)]
        problems = []
    except UnicodeDecodeError:   # every line that is not UTF-8, named as the text loaders name it
        names = []
        problems = [p for i, line in enumerate(lines, 1) if not line.isascii()
                    and (p := not_utf8(line.rstrip(b"\r"), vpath, str(i)))]
    if len(lines) != n_rows:
        problems.append(f"{vpath} has {len(lines)} tokens but {path} has {n_rows} rows")
    if problems:
        raise problems_error(vpath, problems, UTF8_HINT if any("not UTF-8" in p for p in problems) else "")
    return names


def load_npy_matrix(path: Path) -> np.ndarray:
    """A .npy file as a memory-mapped 2-D numeric matrix."""
    try:
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as e:
        raise EmbinitError(f"cannot read .npy matrix {path}: {e}") from None
    if arr.ndim != 2 or not np.issubdtype(arr.dtype, np.number):
        raise EmbinitError(f"{path}: expected a 2-D numeric matrix, got shape {arr.shape} {arr.dtype}")
    return arr


def file_dim(path: str | Path, fmt: str) -> int:
    """D of a word-vector file, from its header, first line or .npy shape (cheap)."""
    path = check_file(path)
    if fmt == "npy":
        return int(load_npy_matrix(path).shape[1])
    if fmt == "text":   # a first line without values (a binary file's bytes) is no D of 0
        return text_layout(path)[0]
    line = first_line(path)
    head = count_header(line)
    if head:
        return head[1]
    return len(line.split()) - 1


def text_layout(path: Path) -> tuple[int, int | None]:
    """(D, the N of an `N D` header or None without one) of a text vector file. A byte-order mark is
    refused: read as part of the first word ('\\ufeffthe'), it made that word's row an OOV row, silently."""
    first = first_line(path)
    if first.startswith(b"\xef\xbb\xbf"):
        raise EmbinitError(f"{path}:1: the file starts with a UTF-8 byte-order mark (bytes EF BB BF), which would "
                           f"be read as part of its first word; remove it (e.g. sed -i '1s/^\\xEF\\xBB\\xBF//' "
                           f"{path})")
    head = count_header(first)
    dim = head[1] if head else len(first.split()) - 1
    if dim < 1:
        raise EmbinitError(f"{path}:1: expected `word v1 ... vD` or an `N D` header, got {first[:80]!r}")
    return dim, head[0] if head else None


def detect_format(path: str | Path) -> str:
    """'hf' (a folder with config.json), 'npy' (.npy), else 'word2vec_bin' or 'text' by the file's content
    (`is_word2vec_binary`), gzipped or not: a name says little (word2vec text is often saved as .bin, and
    GoogleNews' binary is .bin.gz)."""
    p = Path(path).expanduser()
    if p.is_dir():
        if (p / "config.json").is_file():
            return "hf"
        raise EmbinitError(f"folder {p} is not a Hugging Face model (no config.json)")
    if p.suffix == ".npy":
        return "npy"
    return "word2vec_bin" if is_word2vec_binary(p) else "text"


_TEXT_WINDOW = 256   # bytes after the first word that `is_word2vec_binary` reads as text or not


def _is_text(data: bytes) -> bool:
    """Whether `data` reads as the text of a vector file: UTF-8 (a character cut at its end aside) with
    no control character but tab and line ends."""
    try:
        text = codecs.getincrementaldecoder("utf-8")().decode(data, final=False)
    except UnicodeDecodeError:
        return False
    return not any(ord(c) < 32 and c not in "\t\n\r" for c in text)


def _numbers_line(line: bytes, dim: int) -> bool:
    """Whether `line` is a text entry: a word and `dim` numbers written out."""
    fields = line.split()
    if len(fields) != dim + 1:
        return False
    try:
        [float(x) for x in fields[1:]]
    except ValueError:
        return False
    return True


def _whole_binary(body: bytes, n: int, dim: int) -> bool:
    """Whether `body` (all of a file after its header) is exactly `n` binary entries of `dim` floats."""
    pos = 0
    for _ in range(n):
        while pos < len(body) and body[pos:pos + 1] in (b"\n", b" "):
            pos += 1
        space = body.find(b" ", pos)
        if space < 0 or space + 1 + 4 * dim > len(body):
            return False
        pos = space + 1 + 4 * dim
    return not body[pos:].strip(b"\n")


def is_word2vec_binary(path: Path) -> bool:
    """Whether a vector file (optionally .gz) is word2vec's binary format: an `N D` header, then per word
    `word<space>` and D raw float32 values (4*D bytes). Told by the bytes after the first word:
    - not UTF-8 text without control characters: raw floats, binary (none of 20,000 random first vectors
      at D=4, σ 0.1 or 1, reads as text; a negative value alone puts a byte there that starts no character);
    - text whose first line is the word and D numbers: text;
    - otherwise, a file within the 4 KB read that is exactly N binary entries is binary (a tiny table
      whose few float bytes happen to be printable); anything else is text, so a broken text line is
      named by the text reader rather than read as floats. (A text file that small whose first line is
      broken and whose bytes happen to split into N entries of 4*D bytes would be read as binary.)"""
    with open_binary(path) as f:
        try:
            head = count_header(f.readline())
            want = 4096 + 4 * head[1] if head else 0
            chunk = f.read(want) if head else b""
        except (OSError, EOFError) as e:
            raise EmbinitError(f"cannot read pretrained file {path}: {e}") from None
    if not head:   # word2vec binary always has the header
        return False
    n, dim = head
    body = chunk.lstrip(b"\n")
    space = body.find(b" ")
    if space < 0:   # no word and value in the first 4 KB: no binary entry, a text line the reader names
        return False
    if not _is_text(body[space + 1: space + 1 + max(4 * dim, _TEXT_WINDOW)]):
        return True
    end = body.find(b"\n")
    if _numbers_line(body[: len(body) if end < 0 else end], dim):
        return False
    return len(chunk) < want and _whole_binary(body, n, dim)


def hf_dim(name: str) -> int | None:
    """D from the model config (no weights are loaded)."""
    p = Path(name).expanduser()
    try:
        if (p / "config.json").is_file():
            cfg = json.loads((p / "config.json").read_text(encoding="utf-8"))
        else:
            from transformers import AutoConfig
            repo, revision = split_revision(name)
            cfg = AutoConfig.from_pretrained(repo, revision=revision).to_dict()
    except Exception as e:  # transformers raises many kinds; all mean "cannot load"
        raise hf_load_error(name, e) from None
    for key in DIM_KEYS:
        if isinstance(cfg.get(key), int):
            return cfg[key]
    return None


def source_location(spec: InitSpec, pretrained: str | None = None) -> str | None:
    """Where a pretrained spec's source is: the given path or hub id, else the spec's own, else its
    family's default (a hub id for BERT/T5, None for file formats)."""
    location = pretrained or spec.pretrained or SOURCE_FAMILIES[spec.source].default
    return str(location) if location else None


def hub_ids(init: str | None, pretrained: str | None, src_init: str | None = None,
            src_pretrained: str | None = None, tokenizer: str | None = None) -> dict[str, str]:
    """{"pretrained": id, "src_pretrained": id, "tokenizer": id} for each side of a trial (a `TrialConfig`'s
    fields; the source side defaults to the target's) whose sub-word rows come from a hub id, given or
    its family's default, not from a local folder (the source side only where its id differs), and for
    a Hugging Face tokenizer named by a hub id."""
    out: dict[str, str] = {}
    for field, init_spec, location in (("pretrained", init, pretrained),
                                       ("src_pretrained", src_init or init, src_pretrained or pretrained)):
        try:
            spec = parse_init_spec(init_spec) if init_spec else None
        except Exception:   # not an init this code knows: nothing it loads from the hub
            continue
        where = source_location(spec, location) if spec is not None and spec.is_subword else None
        if where and not Path(where).expanduser().exists() and where not in out.values():
            out[field] = where
    if tokenizer and _hub_tokenizer(tokenizer):
        out["tokenizer"] = tokenizer
    return out


def _hub_tokenizer(name: str) -> bool:
    """Whether a trial's `tokenizer` names a hub id ("auto": a Hugging Face source's own, tagged above)."""
    from embinit.tasks.tokenization import TOKENIZERS
    return name != "auto" and name not in TOKENIZERS and not Path(name).expanduser().exists()


def resolve_source(spec: InitSpec, pretrained: str | None = None) -> tuple[str, str]:
    """(loader kind, location) for a pretrained spec: kind is text | word2vec_bin | npy | hf."""
    location = source_location(spec, pretrained)
    if not location:
        raise EmbinitError(f"init {str(spec)!r} needs a pretrained source: pass a path"
                           f"{' or hub id' if spec.source == 'hf' else ''} (--pretrained)")
    if spec.is_subword:
        if Path(location).expanduser().is_file():   # else read as a hub id: "its config is not valid JSON"
            raise EmbinitError(f"{location} is a file; init {spec.source!r} reads a Hugging Face model folder or "
                               f"hub id (a word-vector file is read by init 'glove', 'word2vec', 'fasttext' or "
                               f"'pretrained')")
        if (problem := revision_problem(location)) is not None:
            raise EmbinitError(problem)
        return "hf", location
    kind = detect_format(location) if Path(location).expanduser().exists() else None
    if kind is None:
        check_file(location)   # raises "not found"
    if spec.source == "npy" and kind != "npy":
        raise EmbinitError(f"init 'npy' needs a .npy file, got {location}")
    if kind == "hf" and spec.source != "pretrained":
        raise EmbinitError(f"{location} is a Hugging Face model folder; use init 'hf' (or 'pretrained')")
    return kind, location


def source_dim(spec, pretrained: str | None = None) -> int | None:
    """D fixed by the pretrained source (from a header, first line or model config), None for random;
    an EmbinitError when the source cannot be read."""
    spec = parse_init_spec(spec)
    if not spec.is_pretrained:
        return None
    kind, location = resolve_source(spec, pretrained)
    if kind == "hf":
        d = hf_dim(location)
        if d is None:  # no width in the config: the matrix itself (loads the weights, and torch)
            from embinit.init.hf import load_model_embeddings
            d = int(load_model_embeddings(location)[1].shape[1])
        return d
    return file_dim(location, kind)
