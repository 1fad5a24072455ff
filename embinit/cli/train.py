"""`embinit train`: one trial from the command line, with a progress bar per epoch and a summary.

`--from-run RUN_ID` trains the trial an MLflow run recorded (`embinit.rerun`): its `embinit.config` tag,
with the flags given beside it overriding the record, then its key and metrics beside the record's.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from embinit.cli.arg_types import folder_to_write
from embinit.config import PRECISIONS
from embinit.cli.train_checks import FIELD_FLAGS, check_args, in_flags
from embinit.errors import EmbinitError, ListedError


class ProgressBar:
    """A tqdm bar on stderr per epoch, showing the running training loss; validation metrics after. On a
    stderr that is not a terminal (a log file, a pipe) a bar's redraws would be a line per update: there,
    one line per epoch with its metrics instead."""

    def __init__(self, enabled: bool = True, stream=None):
        self.enabled, self.bar = enabled, None
        self.stream = stream if stream is not None else sys.stderr
        isatty = getattr(self.stream, "isatty", None)
        self.tty = bool(isatty and isatty())

    def on_step_end(self, ctx, step, loss):
        if not self.enabled or not self.tty:
            return
        if self.bar is None:
            from tqdm import tqdm
            self.bar = tqdm(total=ctx.epoch_steps, desc=f"epoch {ctx.epoch}/{ctx.cfg.epochs}",
                            file=self.stream, leave=True, dynamic_ncols=True)
        self.bar.update(1)
        if step % 10 == 0:
            self.bar.set_postfix(loss=f"{loss:.3f}")

    def on_epoch_end(self, ctx, epoch, metrics):
        shown = {k.replace("/", "_"): f"{v:.4g}" for k, v in metrics.items()
                 if k.startswith(("train/", "val/")) and isinstance(v, float)}
        if self.bar is not None:
            self.bar.set_postfix(shown)
            self.bar.close()
            self.bar = None
        elif self.enabled and not self.tty and epoch is not None:
            text = ", ".join(f"{k}={v}" for k, v in shown.items())
            print(f"epoch {epoch}/{ctx.cfg.epochs}" + (f": {text}" if text else ""), file=self.stream, flush=True)

    on_train_end = lambda self, ctx, result: self.on_epoch_end(ctx, None, {})  # noqa: E731


def _extra(text: str) -> tuple[str, object]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


class _DefinitionFile(dict):
    """A task definition read from a file, which its problems name."""
    path = ""


def _definition(path: str) -> dict:
    """A task definition (embinit.task_defs) from a YAML or JSON file."""
    import yaml

    from embinit.spec.yaml_text import SpecLoader, yaml_error
    try:
        data = yaml.load(Path(path).expanduser().read_text(encoding="utf-8"), Loader=SpecLoader)   # a SafeLoader
    except yaml.YAMLError as e:   # one line, where the parser stopped; a key given twice too (as in a spec)
        raise argparse.ArgumentTypeError(f"cannot read a task definition: {yaml_error(e, f' in {path!r}')}") from None
    except OSError as e:
        raise argparse.ArgumentTypeError(f"cannot read a task definition from {path}: {e}") from None
    except UnicodeDecodeError:   # each line that is not UTF-8, and how to re-encode it
        from embinit.text_files import utf8_error
        error = utf8_error(Path(path).expanduser(), Path(path).expanduser().read_bytes())
        raise argparse.ArgumentTypeError(f"cannot read a task definition: {error}") from None
    if not isinstance(data, dict):
        raise argparse.ArgumentTypeError(f"{path} holds no mapping (like, files, ...): a task definition is one")
    out = _DefinitionFile(data)
    out.path = path
    return out


def register(subparsers) -> None:
    p = subparsers.add_parser("train", help="train one trial (task x init x seed) and print its result",
                              description=__doc__.splitlines()[0])
    # Every config flag defaults to None ("not given"): TrialConfig's defaults apply, or with --from-run the
    # record's values; a flag given beside --from-run overrides the record.
    p.add_argument("--task", help="multi30k, iwslt2017, sst2, mnli, wikitext2, synthetic_* (or --from-run)")
    p.add_argument("--from-run", metavar="RUN_ID",
                   help="re-run the trial of this MLflow run from its recorded config (other flags override it), "
                        "and compare its key and test/* and best/* metrics with the record's")
    p.add_argument("--tracking-uri",
                   help="with --from-run: the MLflow store holding the run (default: sqlite:///mlflow.db)")
    p.add_argument("--init", help="init spec of the (target) embedding, e.g. glove+standardize (default: xavier)")
    p.add_argument("--src-init", help="translation: init spec of the source embedding (default: --init)")
    p.add_argument("--pretrained", help="path or hub id of the pretrained source")
    p.add_argument("--src-pretrained", help="pretrained source of --src-init (default: --pretrained)")
    p.add_argument("--init-from", metavar="BEST_PT",
                   help="a best.pt whose non-embedding weights start the model (the config's init_from)")
    p.add_argument("--oov", help="rule for vocabulary rows the source lacks (default: xavier)")
    p.add_argument("--tokenizer", help="default: auto")
    p.add_argument("--seed", type=int, help="default: 0")
    p.add_argument("--emb-seed", type=int, help="seed of the embedding tables' init only (default: --seed)")
    p.add_argument("--data-seed", type=int, help="seed of the data order only (default: --seed)")
    for name, typ in (("epochs", int), ("batch-size", int), ("max-tokens", int), ("lr", float),
                      ("d-model", int), ("layers", int), ("heads", int), ("ff-dim", int),
                      ("dropout", float), ("min-freq", int), ("max-len", int),
                      ("max-train-examples", int), ("threads", int), ("beam-size", int),
                      ("length-penalty", float), ("early-stopping-patience", int)):
        p.add_argument(f"--{name}", type=typ)
    p.add_argument("--attention-dropout", type=float, metavar="P",
                   help="dropout on the softmaxed attention weights, as torch.nn.Transformer and fairseq place it "
                        "(default 0: none, the paper's)")
    p.add_argument("--activation-dropout", type=float, metavar="P",
                   help="dropout after the feed-forward activation, before its second linear (default 0: none)")
    p.add_argument("--pe-base", type=float, help="default: 10000")
    p.add_argument("--pe-positions", type=int,
                   help="position-encoding rows: the model's table and the statistics' (default 5000, the paper's)")
    p.add_argument("--pre-ln", action="store_true", default=None, help="pre-LN layers (default: post-LN)")
    p.add_argument("--no-pos-encoding", action="store_true", default=None, help="ablation: no position encoding")
    p.add_argument("--freeze-embeddings", action="store_true", default=None, help="ablation: embeddings not trained")
    p.add_argument("--freeze-non-embeddings", action="store_true", default=None, help="train only the embeddings")
    p.add_argument("--tie-embeddings", action="store_true", default=None,
                   help="language models: the output layer reuses the token table (GPT-2 style)")
    p.add_argument("--data-dir", help="the task's data folder (else $EMBINIT_DATA_DIR/<task>, else the hub)")
    p.add_argument("--data-revision", metavar="REVISION",
                   help="the commit, tag or branch of the task's hub dataset to read (no --data-dir; "
                        "$EMBINIT_DATA_DIR is not looked at); default: the hub's main")
    p.add_argument("--task-def", type=_definition, metavar="FILE",
                   help="a task of your own: a YAML or JSON file holding its definition, as a spec's define_tasks "
                        "entry (like: sst2, files: ..., columns: ...); --task names it")
    p.add_argument("--precision", choices=PRECISIONS,
                   help="default fp32; auto: bf16 where the GPU or CPU has bf16 units, else fp32")
    p.add_argument("--device", help="default: auto")
    p.add_argument("--cuda-graphs", action="store_true", default=None,
                   help="translation on CUDA: the training step in CUDA graphs over padded length buckets "
                        "(another dropout sample, so another trial key)")
    p.add_argument("--extra", type=_extra, action="append", metavar="KEY=VALUE",
                   help="task-specific switch, e.g. train_split=valid (repeatable)")
    p.add_argument("--out", type=folder_to_write, help="checkpoint folder (last.pt, best.pt); resumes from last.pt")
    p.add_argument("--no-resume", action="store_true", help="ignore an existing last.pt in --out")
    p.add_argument("--cache-dir", help="cache of tokenized data and aligned vectors")
    p.add_argument("--json", action="store_true",
                   help="print the full result as JSON (with --from-run, the comparison goes to stderr)")
    p.add_argument("--quiet", action="store_true",
                   help="no progress (a bar per epoch on a terminal, else a line per epoch)")
    p.set_defaults(func=run)


# the switches set a field to a fixed value (the flags of TrialConfig fields: `train_checks.FIELD_FLAGS`)
_SWITCHES = {"pre_ln": ("pre_ln", True), "no_pos_encoding": ("pos_encoding", False),
             "freeze_embeddings": ("train_embeddings", False),
             "freeze_non_embeddings": ("freeze_non_embeddings", True), "tie_embeddings": ("tie_embeddings", True),
             "cuda_graphs": ("cuda_graphs", True)}
# the flag that points a recorded file input at this machine's copy
_PATH_FLAGS = {"data_dir": "--data-dir", "pretrained": "--pretrained", "src_pretrained": "--src-pretrained",
               "tokenizer": "--tokenizer", "init_from": "--init-from"}


def given_fields(args) -> dict:
    """The TrialConfig fields the flags given set (a flag left out sets nothing)."""
    out = {name: getattr(args, name) for name in FIELD_FLAGS if getattr(args, name) is not None}
    if isinstance(out.get("task_def"), dict):
        out["task_def"] = dict(out["task_def"])   # the definition, not the file it came from
    out.update({field: value for flag, (field, value) in _SWITCHES.items() if getattr(args, flag)})
    if args.extra:
        out["extras"] = dict(args.extra)
    return out


def config_from_args(args):
    """The trial the flags describe; TrialConfig's defaults for the flags left out."""
    from embinit.config import TrialConfig

    if args.task is None:
        raise EmbinitError("give --task TASK (a new trial) or --from-run RUN_ID (a trial an MLflow run recorded)")
    if isinstance(args.task_def, _DefinitionFile):   # its problems by the file's own fields
        from embinit import task_defs
        at = f"define_tasks.{args.task}"
        found = [(where.removeprefix(at).lstrip("."), msg)
                 for where, msg in task_defs.problems(args.task, args.task_def)]
        if found:
            raise ListedError(f"--task-def {args.task_def.path}:", [f"{w}: {m}" if w else m for w, m in found])
    return TrialConfig(**given_fields(args))


def rerun_config(args):
    """(the record of --from-run's run, its recorded config, the config to train: the recorded one with
    the flags given beside --from-run); an error listing every file input of the record this machine
    lacks, with the flag that points it at a copy, before anything trains."""
    from embinit import rerun
    from embinit.tracking.run_readers import trial_record
    from embinit.tracking.store_check import require_store

    rec = trial_record(require_store(args.tracking_uri), args.tracking_uri, args.from_run)
    recorded, given = rerun.recorded_config(rec), given_fields(args)
    missing = rerun.missing_inputs(recorded, set(given))
    if missing:
        raise ListedError(f"MLflow run {rec.run_id} recorded file inputs this machine does not have:", [
            f"{name}: the recorded path {path!r} does not exist here (give {_PATH_FLAGS[name]} PATH to your copy)"
            for name, path in missing])
    return rec, recorded, rerun.with_overrides(recorded, given)


def _token_share_text(share: float | None) -> str:
    """The token share in words: it counts the training tokens of the vocabulary's words (its counts), so a
    token read as <unk> (a word below min_freq, never a source's row) is in neither side of it."""
    if share is None:   # a vocabulary without counts, or no training tokens
        return ""
    return f", {share:.1%} of the training tokens of vocabulary words (those read as <unk> not counted)"


def _coverage_lines(coverage: dict | None) -> list[str]:
    """How much of each vocabulary a pretrained source had (a source that barely overlaps the data is
    a Xavier table under the source's label: the summary says so, not only the JSON and MLflow)."""
    if not coverage:
        return []
    sides = [("", coverage)] if "rows_found" in coverage else [(f" ({side})", c) for side, c in coverage.items()]
    return [f"pretrained coverage{side}: {c['rows_found']} of {c['rows_total']} vocabulary rows "
            f"({c['row_share']:.1%})" + _token_share_text(c.get("token_share"))
            + (f"; {c['duplicate_words']} of its words occur more than once in the file (each takes its first "
               "row)" if c.get("duplicate_words") else "") for side, c in sides]


def summary(result, label: str | None = None) -> str:
    """The trial's result in a few lines. `label`: the name a record gave the trial (`--from-run`'s, a
    sweep's "Pretrained"), said first where it is not the trainer's own (`Pretrained (init=GloVe)`)."""
    def fmt(d):
        return ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in d.items())

    from embinit.spec.inits import oov_text

    c = result.config   # an OOV rule that fills rows is said as a sweep's label says it (`GloVe oov=zeros`)
    relabel = bool(label) and label != result.label
    init = f"{label} (init={result.label}" if relabel else f"init={result.label}"
    lines = [f"trial {result.key}: {c['task']} {init}"
             + (f" src_init={result.src_label}" if result.src_label else "")
             + oov_text(c.get("oov"), [c.get("init"), c.get("src_init")])
             + (")" if relabel else "")
             + f" seed={result.config['seed']} D={result.config['d_model']} heads={result.config['heads']}",
             f"status: {result.status}" + (f" at step {result.diverged_step}" if result.diverged_step else "")]
    if result.best:
        lines.append(f"best (epoch {result.best_epoch}): {fmt(result.best)}")
    if result.test:
        lines.append(f"test: {fmt(result.test)}")
    if result.bleu_signature:
        lines.append(f"bleu signature: {result.bleu_signature}")
    lines += _coverage_lines(result.coverage)
    lines.append(f"wall time: {result.wall_time_s:.1f} s"
                 + (f"; best checkpoint: {result.checkpoint_path}" if result.checkpoint_path else ""))
    return "\n".join(lines)


def run(args) -> int:
    if args.no_resume and args.out is None:
        raise EmbinitError("--no-resume needs --out")
    if args.from_run is not None:
        return _rerun(args)
    if args.tracking_uri is not None:
        raise EmbinitError("--tracking-uri names the store of --from-run's run; give --from-run RUN_ID too")
    cfg = config_from_args(args)
    check_args(cfg)
    _say_oov_moot(args, cfg)
    result = _train(args, cfg)
    print(result.to_json(indent=2) if args.json else summary(result))
    return 0


def _say_oov_moot(args, cfg) -> None:
    """A note on stderr when --oov changes no table of the trial (a random init's, a `match`ed one's), as
    `embinit embeddings stats` says it: the trial and its key are those of the default rule."""
    if args.oov and not cfg.oov_applies():
        from embinit.cli.embeddings import oov_note
        inits = [cfg.init] + ([cfg.src_init] if cfg.src_init else [])
        print(oov_note(args.oov, inits, "the trial (and its key)"), file=sys.stderr, flush=True)


def _train(args, cfg):
    """The trial's result. A model size only the trial could check (a hub source's D, which `check_args`
    does not read) is refused naming the flags, as `check_args` names them."""
    from embinit.model_dims import SizeError
    from embinit.train import run_trial

    try:
        return run_trial(cfg, out_dir=args.out, callbacks=(ProgressBar(not args.quiet),),
                         resume=not args.no_resume, cache_dir=args.cache_dir)
    except SizeError as e:
        raise EmbinitError(in_flags(str(e))) from None


def _rerun(args) -> int:
    """`--from-run`: the recorded trial, trained here; its key and metrics beside the record's (on
    stderr with --json, so that stdout is the result's JSON as `embinit train --json` prints it)."""
    from embinit import rerun

    rec, recorded, cfg = rerun_config(args)
    check_args(cfg)
    _say_oov_moot(args, cfg)
    notes = sys.stderr if args.json else sys.stdout
    print(f"re-running MLflow run {rec.run_id} ({rec.label}, {rec.task}, seed {cfg.seed}; recorded status "
          f"{rec.status})", file=notes)
    print(rerun.key_report(rec, recorded, cfg), file=notes, flush=True)
    result = _train(args, cfg)
    print(result.to_json(indent=2) if args.json else summary(result, label=rec.label), flush=True)
    rows = rerun.compared_metrics(rec, result.to_dict())
    print(rerun.comparison_text(rec, rows, same_key=result.key == rec.key), file=notes)
    return 0
