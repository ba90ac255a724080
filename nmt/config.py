"""YAML configs mapped onto typed dataclasses, with `--set section.key=value` overrides.

Every key is checked: an unknown key, a value of the wrong type or a missing required field is
an `NMTError` naming the file and the dotted key, so a typo never silently falls back to a default.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from nmt.errors import NMTError

BUILTIN_DIR = Path(__file__).parent / "configs"

# The built-in names of the three registries a plugin may add to (nmt.plugins): a config's value
# is one of these, or a name a plugin registered (`nmt.registry.names`)
AttentionType = Literal[
    "none", "dot", "scaled_dot", "general", "concat", "bahdanau", "local_m", "local_p", "multihead"
]
DecoderStyle = Literal["luong", "bahdanau"]
BridgeType = Literal["none", "last", "linear", "backward"]
PLUGGABLE = {  # config key -> (registry kind, built-in names)
    "model.attention.type": ("attention", typing.get_args(AttentionType)),
    "model.decoder.style": ("decoder", typing.get_args(DecoderStyle)),
    "model.decoder.bridge": ("bridge", typing.get_args(BridgeType)),
}


def setting(default: Any = dataclasses.MISSING, doc: str = "", factory: Any = None) -> Any:
    """A config field with its one-line description, which `nmt configs --show` prints."""
    if factory is not None:
        return field(default_factory=factory, metadata={"doc": doc})
    return field(default=default, metadata={"doc": doc})


@dataclass
class CorpusConfig:
    """One training corpus of several, drawn from in proportion to its weight."""

    train: str = setting(doc="the split name: {dir}/{train}.{lang} files")
    dir: str = setting("", "their folder; empty: data.dir")
    weight: float = setting(1.0, "its share of each epoch, relative to the others' weights")
    tag: str = setting("", "put before each of its sources (kept one piece), e.g. <BT> for back-translation")


@dataclass
class DataConfig:
    """Where the parallel text comes from.

    `format: text` reads `{dir}/{split}.{lang}` (one sentence a line), where `split` is the value
    of `train`/`valid`/`test`. `format: hf` goes through `datasets.load_dataset(hf_path, hf_name,
    data_files=hf_data_files)` and takes those values as split names.
    """

    src_lang: str = setting(doc="source language code, the suffix of the source files")
    tgt_lang: str = setting(doc="target language code, the suffix of the target files")
    format: Literal["text", "hf"] = setting("text", "text: {dir}/{split}.{lang} files; hf: HF datasets")
    dir: str = setting("data", "folder of the text files (and of `nmt data download`'s copy)")
    train: str = setting("train", "name of the training split")
    valid: str = setting("valid", "name of the validation split")
    test: str = setting("test", "name of the test split")
    hf_path: str = setting(
        "", "format hf: a hub id, a local dataset folder or a builder (json, csv, parquet)"
    )
    hf_name: str | None = setting(None, "format hf: the dataset's configuration name")
    hf_data_files: dict[str, str] | None = setting(None, "format hf: split name -> file pattern for builders")
    max_len: int = setting(100, "training pairs with more subwords on either side are dropped")
    max_ratio: float = setting(9.0, "and pairs whose subword lengths differ by more than this factor")
    join: int = setting(
        0, "K >= 2: also train on every 2, 3 .. K consecutive training pairs joined into one (long inputs)"
    )
    normalize: Literal["NFC", "NFKC", "none"] = setting("NFC", "Unicode normalisation of every input")
    errors: Literal["strict", "replace"] = setting("strict", "invalid UTF-8: stop, or replace with U+FFFD")
    cache_dir: str = setting("data/cache", "encoded splits and tokenizers, keyed by a fingerprint")
    corpora: list[CorpusConfig] = setting(
        factory=list, doc="several training corpora, each with a weight and a tag, in place of `train`"
    )

    def text_files(self, split: str) -> tuple[Path, Path] | None:
        """A split's source and target files, when the data are text files that are here."""
        src, tgt = (Path(self.dir) / f"{split}.{lang}" for lang in (self.src_lang, self.tgt_lang))
        return (src, tgt) if self.format == "text" and src.is_file() and tgt.is_file() else None


@dataclass
class TokenizerConfig:
    type: Literal["unigram", "bpe", "char", "word"] = setting("unigram", "SentencePiece model type")
    vocab_size: int = setting(8000, "pieces per model (a soft limit on small corpora)")
    joint: bool = setting(True, "one model for both sides (needed to tie embeddings across sides)")
    character_coverage: float = setting(1.0, "share of characters the pieces must cover")
    num_threads: int = setting(2, "fixed on purpose: unigram pieces depend on the thread count")
    input_sentence_size: int = setting(
        300_000, "sentences (a seeded sample) the tokenizer learns from: ~10 s and ~1 GB per 300k"
    )
    sampling_alpha: float = setting(
        0.0, "> 0: subword regularisation, each epoch segmented afresh: unigram's smoothing, BPE's dropout"
    )
    sampling_nbest: int = setting(-1, "unigram: sample among the n best segmentations; -1: all of them")
    user_symbols: list[str] = setting(
        factory=list, doc="pieces always kept whole, e.g. a back-translation tag [<BT>] (nmt backtranslate)"
    )


@dataclass
class EncoderConfig:
    hidden: int = setting(256, "LSTM units per direction; annotations h_j are 2 * hidden wide")
    layers: int = setting(1, "stacked bidirectional LSTM layers")
    dropout: float = setting(0.3, "dropout between stacked layers")


@dataclass
class DecoderConfig:
    style: str = setting(
        "luong", "step order: luong (RNN, then attend with h_t) or bahdanau (attend with s_{t-1}, then RNN)"
    )
    hidden: int = setting(512, "LSTM units")
    layers: int = setting(1, "stacked LSTM layers")
    input_feeding: bool = setting(False, "luong only: feed h~_{t-1} into the next step (Luong §3.3)")
    bridge: str = setting(
        "linear", "initial state from the encoder: none, last, linear or backward (Bahdanau's s_0)"
    )
    output: Literal["linear", "maxout"] = setting("linear", "bahdanau only: the deep-output layer")
    dropout: float = setting(0.3, "dropout between stacked layers")


@dataclass
class AttentionConfig:
    type: str = setting("dot", "the score function (nmt/model/attention.py), or a plugin's")
    dim: int | None = setting(None, "hidden size of additive scores; default: decoder hidden")
    bias: bool = setting(False, "additive scores: a bias inside the tanh")
    heads: int = setting(4, "multihead: number of heads")
    window: int = setting(10, "local_m / local_p: D, the window is [p_t - D, p_t + D]")
    dropout: float = setting(0.0, "dropout on the attention weights, in training only")
    options: dict[str, Any] = setting(factory=dict, doc="a plugin attention's own settings (its Options)")


@dataclass
class ModelConfig:
    embedding: int = setting(256, "embedding size of both sides")
    dropout: float = setting(0.3, "dropout on embeddings and on the attentional/output vector")
    tie_embeddings: bool = setting(False, "target embedding = output projection (needs equal sizes)")
    init: Literal["uniform", "xavier", "torch"] = setting("uniform", "parameter initialisation scheme")
    init_scale: float = setting(0.1, "uniform: U(-init_scale, init_scale), as Luong et al. 2015")
    encoder: EncoderConfig = setting(factory=EncoderConfig, doc="the bidirectional LSTM encoder")
    decoder: DecoderConfig = setting(factory=DecoderConfig, doc="the LSTM decoder")
    attention: AttentionConfig = setting(factory=AttentionConfig, doc="how the decoder reads the source")


@dataclass
class GuidedAlignmentConfig:
    """An extra loss pulling the attention toward given word alignments (Chen et al. 2016)."""

    links: list[str] = setting(
        factory=list,
        doc="Pharaoh i-j files, one line per training pair (one file per data.corpora entry); empty: off",
    )
    weight: float = setting(
        0.3,
        "the alignment loss's weight beside the translation loss (on Multi30k 0.3 kept all of 1.0's "
        "markup placement and none of its BLEU cost: docs/distillation.md)",
    )
    valid_links: str = setting(
        "", "Pharaoh links of the validation split: each validation logs the attention's AER (links or not)"
    )


@dataclass
class TrainConfig:
    init_from: str = setting(
        "", "fine-tuning: start from this checkpoint's weights and tokenizers (a run directory: its best)"
    )
    freeze: list[Literal["embeddings", "encoder"]] = setting(
        factory=list, doc="fine-tuning: parts left as they are for the first freeze_steps steps"
    )
    freeze_steps: int = setting(0, "how many steps train.freeze holds (0: the whole run)")
    seed: int = setting(1, "seed of every random generator of the run")
    batch_size: int = setting(64, "sentences per batch (per process under torchrun), or tokens")
    batch_type: Literal["sentences", "tokens"] = setting(
        "sentences", "what batch_size counts (tokens: padded source + target tokens)"
    )
    update_every: int = setting(1, "gradient accumulation: one optimiser step every N batches")
    optimizer: Literal["adam", "adamw", "sgd"] = setting("adam", "the optimiser")
    lr: float = setting(0.001, "learning rate (the peak, with warm-up)")
    momentum: float = setting(0.9, "sgd: momentum")
    weight_decay: float = setting(0.0, "L2 penalty on weight matrices, not on biases (decoupled for adamw)")
    clip: float = setting(5.0, "maximum gradient norm")
    label_smoothing: float = setting(0.0, "share of the target mass spread over the vocabulary")
    teacher_forcing_ratio: float = setting(1.0, "below 1, feed back the model's own predictions")
    teacher_forcing_final: float | None = setting(
        None, "if set, the ratio moves linearly to this by max_steps"
    )
    schedule: Literal["constant", "plateau", "step", "inverse_sqrt", "budget"] = setting(
        "constant", "learning-rate schedule (budget: linear decay to min_lr as the budget runs out)"
    )
    decay_factor: float = setting(0.5, "plateau and step: the factor of each decay")
    decay_patience: int = setting(1, "plateau: validations without improvement before a decay")
    decay_start_epoch: int = setting(5, "step: decay after every epoch from this one on (Luong et al.)")
    warmup_steps: int = setting(4000, "inverse_sqrt: steps of linear warm-up")
    min_lr: float = setting(1e-6, "no schedule goes below this")
    max_steps: int = setting(10000, "stop after this many optimiser steps")
    max_epochs: int = setting(0, "stop after this many epochs; 0: no limit")
    max_time: float = setting(
        0, "stop after this many seconds of wall-clock time, what runs after included; 0: no limit"
    )
    log_every: int = setting(50, "steps between training log lines")
    valid_every: int = setting(500, "steps between validations (and checkpoints)")
    valid_at_epoch_end: bool = setting(False, "also validate at the end of every epoch")
    valid_share: float = setting(
        0.0, "skip a validation that would take validating past this share of the time so far; 0: never"
    )
    valid_subset: int = setting(
        0, "translate only this many validation pairs (a fixed seeded sample) for BLEU; 0: all"
    )
    metric: Literal["bleu", "ppl", "loss"] = setting("bleu", "chooses best checkpoints and early stopping")
    patience: int = setting(0, "stop after this many validations without improvement; 0: never")
    keep_best: int = setting(1, "keep the k best validation checkpoints (best.pt is always the best)")
    average_last: int = setting(0, "at the end, average the last n validation checkpoints into averaged.pt")
    save_every_minutes: float = setting(
        5.0, "also save last.pt this often (at a log step), so a kill loses little"
    )
    device: str = setting("auto", "auto, cpu, cuda, cuda:N or mps")
    precision: Literal["auto", "fp32", "fp16", "bf16"] = setting(
        "auto",
        "auto: AMP on CUDA; on a CPU bf16 products where they run at least 1.5x faster than fp32 "
        "(measured once per machine), else fp32. bf16 on a CPU: bf16 operands, fp32 accumulation "
        "and weights; fp16: CUDA only",
    )
    cuda_graphs: bool = setting(
        True, "CUDA: replay the decoder's training step as CUDA graphs (one process, update_every 1)"
    )
    loggers: list[Literal["tensorboard", "mlflow"]] = setting(
        factory=list, doc="experiment trackers that also get the metrics (installed as extras)"
    )
    guided_alignment: GuidedAlignmentConfig = setting(
        factory=GuidedAlignmentConfig, doc="supervise the attention with word alignments"
    )


@dataclass
class DecodeConfig:
    beam: int = setting(1, "beam size; 1 is greedy search")
    batch_size: int = setting(64, "sentences per batch, or tokens with batch_type: tokens")
    batch_type: Literal["sentences", "tokens"] = setting("sentences", "what batch_size counts")
    max_len: int = setting(200, "absolute cap on output tokens (EOS included)")
    max_len_ratio: float = setting(2.0, "and at most max_len_ratio * source length + max_len_add")
    max_len_add: int = setting(10, "see max_len_ratio (source length counts EOS)")
    min_len: int = setting(0, "EOS is forbidden before this many tokens")
    length_penalty: Literal["none", "avg", "gnmt"] = setting(
        "gnmt", "avg: |Y|^alpha; gnmt: ((5 + |Y|) / 6)^alpha"
    )
    alpha: float = setting(0.0, "length penalty exponent; 0 ranks by raw log-probability")
    coverage: float = setting(0.0, "GNMT coverage penalty weight beta")
    no_repeat_ngram: int = setting(0, "forbid repeating any n-gram of this size (0: off)")
    allow_unk: bool = setting(True, "False: never output the unknown token")
    sample: bool = setting(False, "draw each token from the model's distribution instead of searching")
    temperature: float = setting(1.0, "sampling: divides the logits (< 1 sharper, > 1 flatter)")
    top_k: int = setting(0, "sampling: only from the k most probable tokens (0: all)")
    top_p: float = setting(1.0, "sampling: only from the fewest tokens holding this much probability")
    seed: int = setting(1, "sampling: a sentence's draws follow from the seed and its text alone")
    rows: Literal["auto", "fixed", "pooled"] = setting(
        "auto",
        "fixed: a pool of fixed rows read once every 8 steps, replayed as CUDA graphs on a GPU; "
        "pooled: rows leave and join every step; auto: fixed on a GPU where the search allows",
    )


@dataclass
class Config:
    data: DataConfig = setting(doc="where the parallel text comes from")
    tokenizer: TokenizerConfig = setting(factory=TokenizerConfig, doc="SentencePiece settings")
    model: ModelConfig = setting(factory=ModelConfig, doc="the network")
    train: TrainConfig = setting(factory=TrainConfig, doc="optimisation, validation and budgets")
    decode: DecodeConfig = setting(factory=DecodeConfig, doc="search settings for validation and translate")
    plugins: list[str] = setting(
        factory=list, doc="Python files of your own attention, decoder or bridge (relative to this file)"
    )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False, allow_unicode=True)


def builtin_configs() -> list[Path]:
    """The built-in configs to train with; `_*.yaml` files are bases the others build on."""
    return sorted(p for p in BUILTIN_DIR.glob("*.yaml") if not p.name.startswith("_"))


def is_file(path: Path) -> bool:
    """Whether `path` is a regular file; a name the system refuses (too long) is not one."""
    try:
        return path.is_file()
    except OSError:
        return False


def find_builtin(name: str | Path) -> Path | None:
    """The built-in config (or base) of that name, with or without .yaml."""
    stem = Path(name).name
    for candidate in (BUILTIN_DIR / stem, BUILTIN_DIR / f"{stem}.yaml"):
        if is_file(candidate):
            return candidate
    return None


def resolve_config_path(name: str | Path) -> Path:
    """An existing path wins; otherwise a built-in config of that name (with or without .yaml)."""
    path = Path(name)
    found = path if is_file(path) else find_builtin(path)
    if found is None:
        known = ", ".join(p.name for p in builtin_configs())
        raise NMTError(
            f"{printable(str(name))}: config not found (not a file, nor a built-in config: {known})"
        )
    return found


MAX_CONFIG_VALUES = 10_000  # a config has ~100; more means YAML aliases expanding without end


class StrictLoader(yaml.SafeLoader):
    """yaml.safe_load that refuses a key given twice in one mapping (the second would silently
    replace the first, a whole section included)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, str | int | float | bool) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} appears twice in one mapping", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep)


def read_yaml(text: str, source: str) -> Any:
    """Parse untrusted YAML: safe tags only, no duplicate keys. Aliases are not expanded here
    (PyYAML shares the objects); `config_from_dict` bounds the expanded size before any walk."""
    try:
        return yaml.load(text, Loader=StrictLoader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as e:
        raise NMTError(f"{source}: not valid YAML ({' '.join(str(e).split())[:300]})") from None


def check_size(data: Any, source: str) -> None:
    """Refuse a structure with more than MAX_CONFIG_VALUES values, counting shared ones each time
    they occur, without walking further than that."""
    count, stack = 0, [data]
    while stack:
        item = stack.pop()
        count += 1
        if count > MAX_CONFIG_VALUES:
            raise NMTError(
                f"{source}: more than {MAX_CONFIG_VALUES} values once YAML aliases are expanded; "
                "a config needs far fewer (remove the aliases)"
            )
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)


def show(value: Any) -> str:
    """A short repr of an untrusted value for an error message."""
    import reprlib

    r = reprlib.Repr()
    r.maxstring, r.maxother, r.maxlist, r.maxdict, r.maxlevel = 60, 60, 4, 4, 2
    return r.repr(value)


def printable(text: str) -> str:
    """`text` as typed, or quoted with escapes when it holds a newline or another control
    character, so that an error message naming it stays one line."""
    return text if text.isprintable() else repr(text)


def load_config(
    name: str | Path, overrides: list[str] | None = None, plugins: list[Path] | None = None, run: bool = True
) -> Config:
    """A config file or built-in name, merged over its `base:` chain, then the `--set` overrides.
    Its `plugins` (each relative to the file naming it) and `plugins` given here (--plugin) are
    imported first, when `run` (a release's config is read with `run` False: its plugins are
    the model's, `nmt.plugins.require`), and recorded in the config as absolute paths."""
    path = resolve_config_path(name)
    raw, bases = read_with_bases(path)
    for item in overrides or []:
        apply_override(raw, item)
    source = f"{path} (with base {', '.join(bases)})" if bases else str(path)
    named = raw.get("plugins", [])
    if isinstance(named, list) and all(isinstance(p, str) for p in named):
        raw["plugins"] = list(dict.fromkeys([*named, *(str(Path(p).resolve()) for p in plugins or [])]))
        if run:
            from nmt.plugins import load_files

            load_files(raw["plugins"])
    return config_from_dict(raw, source=source)


def read_config_file(path: Path, named_by: Path | None = None) -> dict[str, Any]:
    """One file's top-level mapping as written, its `base:` not followed; a base's errors also
    name the file whose `base:` it is."""
    source = f"{path} (the base of {named_by})" if named_by else str(path)
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise NMTError(f"{source}: not UTF-8 text (byte {e.start}); save the config as UTF-8") from None
    except OSError as e:
        raise NMTError(f"{source}: cannot read the config ({e.strerror})") from None
    raw = read_yaml(text, source) or {}
    if not isinstance(raw, dict):
        raise NMTError(f"{source}: the top level must be a mapping of sections")
    return raw


def read_with_bases(path: Path) -> tuple[dict[str, Any], list[str]]:
    """The file's mapping merged over its `base:` chain (a base may have a base), and the bases'
    names as written, nearest first. Configs that differ in a few keys then say only those."""
    layers, names, seen = [_anchored(read_config_file(path), path)], [], [path.resolve()]
    while "base" in layers[-1]:
        name = layers[-1].pop("base")
        base = find_base(name, path)
        if base.resolve() in seen:
            cycle = " -> ".join(p.name for p in [*seen, base])
            raise NMTError(f"{path}: base: {name} makes a cycle ({cycle}); remove one of the bases")
        seen.append(base.resolve())
        names.append(str(name))
        layers.append(_anchored(read_config_file(base, named_by=path), base))
        path = base
    raw = layers.pop()
    for own in reversed(layers):
        raw = merge_sections(raw, own)
    return raw, names


def _anchored(raw: dict[str, Any], path: Path) -> dict[str, Any]:
    """A file's `plugins` as absolute paths: each is relative to the file that names it."""
    named = raw.get("plugins")
    if isinstance(named, list) and all(isinstance(p, str) for p in named):
        raw["plugins"] = [str((path.parent / p).resolve()) for p in named]
    return raw


def find_base(name: Any, naming: Path) -> Path:
    """`base:` is a path relative to the file that names it, or a built-in config's name."""
    if not isinstance(name, str) or not name:
        raise NMTError(f"{naming}: base: expected a config file or built-in name, got {show(name)}")
    found = naming.parent / name
    if is_file(found):
        return found
    builtin = find_builtin(name)
    if builtin is None:
        shown, looked = printable(name[:200]), printable(str(found)[:300])
        raise NMTError(f"{naming}: base: {shown} not found (not {looked}, nor a built-in config)")
    return builtin


def merge_sections(base: dict[str, Any], own: dict[str, Any], cls: type = Config) -> dict[str, Any]:
    """`own` over `base`: sections merge key by key; a value (a list, or a mapping such as
    data.hf_data_files) replaces the base's whole, so a file never inherits half of one."""
    hints = typing.get_type_hints(cls)
    merged = dict(base)
    for key, value in own.items():
        section = hints.get(key)
        if dataclasses.is_dataclass(section) and isinstance(value, dict) and isinstance(base.get(key), dict):
            merged[key] = merge_sections(base[key], value, section)
        else:
            merged[key] = value
    return merged


def upgrade(raw: dict[str, Any]) -> dict[str, Any]:
    """Configs of nmt 0.1 (in their checkpoints and run folders): `train.tensorboard: true`
    became `train.loggers: [tensorboard]`."""
    train = raw.get("train")
    if isinstance(train, dict) and "tensorboard" in train:
        train = dict(train)
        if train.pop("tensorboard") is True and "tensorboard" not in train.get("loggers", []):
            train["loggers"] = [*train.get("loggers", []), "tensorboard"]
        raw = {**raw, "train": train}
    return raw


def config_from_dict(raw: dict[str, Any], source: str = "<config>") -> Config:
    check_size(raw, source)
    cfg = _build(Config, upgrade(raw), source, "")
    validate(cfg, source, given=raw.get("decode") or {})
    return cfg


def apply_override(raw: dict[str, Any], item: str) -> None:
    """Apply one `section.key=value`; the value is parsed as YAML (so `3`, `true`, `[1, 2]` work).

    The key is checked against the config's fields and the value against the key's type right
    here, so a mistake is reported as coming from the command line, with a suggestion for a typo.
    """
    option = f"--set {printable(item)}"
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
        raise NMTError(f"{option}: expected section.key=value, e.g. model.attention.type=general")
    parts = key.strip().split(".")
    cls, node, hint = Config, raw, None
    for depth, part in enumerate(parts):
        fields = {f.name: f for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else {}
        if part not in fields:
            where = ".".join(parts[:depth]) or "the top level"
            if not fields:
                raise NMTError(f"{option}: {where} is a value, not a section")
            raise NMTError(f"{option}: {where} has no key {part!r}{_did_you_mean(part, fields)}")
        hint = typing.get_type_hints(cls)[part]
        if depth < len(parts) - 1:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise NMTError(f"{option}: {part} is not a section")
            cls = hint
            if typing.get_origin(hint) is dict and depth == len(parts) - 2:
                # a mapping of a plugin's own keys (model.attention.options): checked with the config
                node[parts[-1]] = read_yaml(value, option)
                return
    parsed = read_yaml(value, option)
    _convert(hint, parsed, "--set", key.strip())
    node[parts[-1]] = parsed


def _did_you_mean(name: str, known) -> str:
    import difflib

    close = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean {close[0]}?)" if close else f" (known: {', '.join(known)})"


def _build(cls: type, raw: Any, source: str, prefix: str) -> Any:
    where = prefix.rstrip(".") or "top level"
    if not isinstance(raw, dict):
        raise NMTError(f"{source}: {where}: expected a mapping, got {show(raw)}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(raw) - set(fields), key=str)
    if unknown:
        name = printable(str(unknown[0])[:60])
        raise NMTError(f"{source}: {prefix}{name}: unknown key{_did_you_mean(name, fields)}")
    values = {}
    for name, f in fields.items():
        key = f"{prefix}{name}"
        if name in raw:
            values[name] = _convert(hints[name], raw[name], source, key)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise NMTError(f"{source}: {key}: required key is missing")
    return cls(**values)


def _convert(tp: Any, value: Any, source: str, key: str) -> Any:
    """Check `value` against the annotation `tp` and return it (nested dataclasses built)."""
    if dataclasses.is_dataclass(tp):
        return _build(tp, value, source, f"{key}.")
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is Literal:
        if value not in args:
            raise NMTError(f"{source}: {key}: {show(value)} is not one of {', '.join(map(str, args))}")
        return value
    if origin in (types.UnionType, typing.Union):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _convert(inner[0], value, source, key)
    if origin is list:
        if not isinstance(value, list):
            raise NMTError(f"{source}: {key}: expected a list, got {show(value)}")
        return [_convert(args[0], item, source, f"{key}[{i}]") for i, item in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise NMTError(f"{source}: {key}: expected a mapping, got {show(value)}")
        if args[1] is Any:  # a plugin's own settings: checked against its Options (`validate`)
            return {str(k): v for k, v in value.items()}
        return {str(k): str(v) for k, v in value.items()}
    if tp is float and isinstance(value, int | str) and not isinstance(value, bool):
        try:  # YAML 1.1 reads `1e-4` (no dot) as a string; take it as the number it means
            return float(value)
        except ValueError:
            pass
    if tp in (int, float, str, bool) and (type(value) is not tp):
        raise NMTError(f"{source}: {key}: expected {tp.__name__}, got {show(value)}")
    return value


# decode.temperature's range, on the command line, in the API and in a server request alike:
# sharper than its least is greedy search, flatter than its most uniform noise
TEMPERATURES = (0.001, 100.0)
RULES = {
    "positive_int": (lambda v: v >= 1, "must be at least 1"),
    "non_negative": (lambda v: v >= 0 and v != float("inf"), "must be a finite number >= 0"),
    "positive": (lambda v: v > 0 and v != float("inf"), "must be a finite number > 0"),
    "probability": (lambda v: 0 <= v < 1, "must be in [0, 1)"),
    "fraction": (lambda v: 0 <= v <= 1, "must be in [0, 1]"),
    "decay": (lambda v: 0 < v <= 1, "must be in (0, 1]"),
    "coverage": (lambda v: 0 < v <= 1, "must be in (0, 1]"),
    "ratio": (lambda v: v >= 1 and v != float("inf"), "must be a finite number >= 1"),
    "temperature": (
        lambda v: TEMPERATURES[0] <= v <= TEMPERATURES[1],
        f"must be in [{TEMPERATURES[0]:g}, {TEMPERATURES[1]:g}]",
    ),
}
# Every numeric setting and the range it must lie in (decode has its own: validate_decode).
RANGES = {
    "positive_int": [
        "data.max_len",
        "tokenizer.num_threads",
        "tokenizer.input_sentence_size",
        "model.embedding",
        "model.encoder.hidden",
        "model.encoder.layers",
        "model.decoder.hidden",
        "model.decoder.layers",
        "model.attention.dim",
        "model.attention.heads",
        "model.attention.window",
        "train.batch_size",
        "train.update_every",
        "train.decay_patience",
        "train.max_steps",
        "train.log_every",
        "train.valid_every",
        "train.keep_best",
    ],
    "non_negative": [
        "tokenizer.sampling_alpha",
        "train.freeze_steps",
        "train.lr",
        "train.weight_decay",
        "train.warmup_steps",
        "train.min_lr",
        "train.decay_start_epoch",
        "train.max_epochs",
        "train.max_time",
        "train.patience",
        "train.valid_subset",
        "train.average_last",
        "train.save_every_minutes",
    ],
    "positive": ["model.init_scale", "train.clip"],
    "probability": [
        "model.dropout",
        "model.encoder.dropout",
        "model.decoder.dropout",
        "model.attention.dropout",
        "train.momentum",
    ],
    "fraction": [
        "train.valid_share",
        "train.label_smoothing",
        "train.teacher_forcing_ratio",
        "train.teacher_forcing_final",
    ],
    "decay": ["train.decay_factor"],
    "coverage": ["tokenizer.character_coverage"],
    "ratio": ["data.max_ratio"],
}


def _get(cfg: Config, key: str) -> Any:
    value: Any = cfg
    for part in key.split("."):
        value = getattr(value, part)
    return value


def validate(cfg: Config, source: str, given: Collection[str] = ()) -> None:
    """Cross-field checks that a type alone cannot express; `given`: the decode keys written."""

    def fail(key: str, why: str) -> None:
        raise NMTError(f"{source}: {key}: {why}")

    m, att, dec, enc = cfg.model, cfg.model.attention, cfg.model.decoder, cfg.model.encoder
    for rule, keys in RANGES.items():
        test, why = RULES[rule]
        for key in keys:
            value = _get(cfg, key)
            if value is not None and not test(value):  # written so that NaN fails every rule
                fail(key, f"{why}, got {show(value)}")
    validate_decode(cfg.decode, source, given)
    if cfg.tokenizer.vocab_size < 8:
        fail("tokenizer.vocab_size", "must be at least 8")
    for symbol in cfg.tokenizer.user_symbols:
        if len(symbol.split()) != 1 or symbol != symbol.strip():
            fail("tokenizer.user_symbols", f"{symbol!r}: each symbol is one word without spaces")
    validate_corpora(cfg, fail)
    validate_pluggable(cfg, source, fail)
    validate_guided_alignment(cfg, fail)
    memory = 2 * enc.hidden
    if att.type in ("dot", "scaled_dot") and dec.hidden != memory:
        fail(
            "model.attention.type",
            f"{att.type} needs decoder.hidden ({dec.hidden}) == 2 * encoder.hidden ({memory}); "
            "use general, concat or bahdanau for different sizes",
        )
    if att.type == "multihead" and memory % att.heads:
        fail("model.attention.heads", f"2 * encoder.hidden ({memory}) must divide by {att.heads}")
    if att.type == "none" and dec.bridge == "none":
        fail("model.decoder.bridge", "with attention none the decoder needs a bridge from the encoder")
    if dec.bridge == "last" and (dec.hidden != memory or dec.layers != enc.layers):
        fail(
            "model.decoder.bridge",
            "last needs decoder.hidden == 2 * encoder.hidden and equal layer counts; use linear",
        )
    if dec.input_feeding and dec.style != "luong":
        fail("model.decoder.input_feeding", "input feeding belongs to the luong style")
    if m.tie_embeddings and dec.style == "luong" and m.embedding != dec.hidden:
        fail("model.tie_embeddings", f"needs model.embedding == decoder.hidden ({dec.hidden})")
    if cfg.tokenizer.sampling_alpha and cfg.tokenizer.type not in ("unigram", "bpe"):
        fail("tokenizer.sampling_alpha", "subword regularisation needs type unigram or bpe")
    if cfg.tokenizer.type == "bpe" and cfg.tokenizer.sampling_alpha >= 1:
        fail("tokenizer.sampling_alpha", "is BPE's dropout probability: below 1 (0.1 is usual)")
    if cfg.tokenizer.sampling_nbest in (0, 1) or cfg.tokenizer.sampling_nbest < -1:
        fail("tokenizer.sampling_nbest", "must be -1 (every segmentation) or at least 2")
    if cfg.data.join == 1 or cfg.data.join < 0:
        fail("data.join", f"must be 0 (off) or at least 2 (join runs of 2 .. K pairs), got {cfg.data.join}")
    if cfg.data.format == "hf" and not cfg.data.hf_path:
        fail("data.hf_path", "format hf needs a dataset id, a local folder or a builder name")


def validate_guided_alignment(cfg: Config, fail: Callable[[str, str], None]) -> None:
    """Links need weights to pull (an attention), fixed pieces to point at (no subword
    sampling), and teacher forcing (the attention over the reference is what they supervise)."""
    guided, key = cfg.train.guided_alignment, "train.guided_alignment"
    if not guided.links:  # valid_links alone: the AER of an unguided run, to compare
        return
    corpora = max(1, len(cfg.data.corpora))
    if len(guided.links) != corpora:
        fail(f"{key}.links", f"give one file per training corpus ({corpora}), got {len(guided.links)}")
    if not guided.weight > 0:
        fail(f"{key}.weight", f"must be above 0, got {show(guided.weight)}")
    if cfg.model.attention.type == "none":
        fail(
            f"{key}.links", "the none attention has no weights to guide; choose another model.attention.type"
        )
    if cfg.tokenizer.sampling_alpha:
        fail(f"{key}.links", "links name fixed pieces: set tokenizer.sampling_alpha to 0")
    if cfg.train.teacher_forcing_ratio < 1 or cfg.train.teacher_forcing_final is not None:
        fail(f"{key}.links", "guides the attention over the reference: keep teacher_forcing_ratio 1")


def registered(key: str) -> dict[str, type | None]:
    """The names `key` (a `PLUGGABLE` key) may take: the built-in ones, and those plugins
    registered (with their classes; a built-in's class is None until its module is imported)."""
    from nmt.registry import names

    kind, builtin = PLUGGABLE[key]
    return dict.fromkeys(builtin) | names(kind)


def validate_pluggable(cfg: Config, source: str, fail: Callable[[str, str], None]) -> None:
    """Each pluggable name is built in or registered by a plugin; a plugin attention's options
    are those of its `Options` (a dataclass of `setting`s), and a built-in takes none."""
    for key in PLUGGABLE:
        value = _get(cfg, key)
        known = registered(key)
        if value not in known:
            fail(
                key,
                f"{show(value)} is not one of {', '.join(known)}; for a class of your own, name its file "
                "under plugins: in the config or give --plugin FILE",
            )
    att = cfg.model.attention
    options = getattr(registered("model.attention.type")[att.type], "Options", None)
    if options is None and att.options:
        fail("model.attention.options", f"the {att.type} attention takes no options")
    if options is not None:
        try:
            plugin_options(options, att.options, source)
        except (TypeError, ValueError) as e:
            fail("model.attention.options", str(e))


def plugin_options(options: type, given: dict[str, Any], source: str) -> Any:
    """A plugin's `Options` dataclass built from `given` (the config's mapping), every key and
    type checked as a config's are."""
    return _build(options, given, source, "model.attention.options.")


SPECIAL_PIECES = ("<pad>", "<unk>", "<s>", "</s>")


def validate_corpora(cfg: Config, fail: Callable[[str, str], None]) -> None:
    """`data.corpora`: text files, positive weights, tags that are one word and no special piece."""
    d = cfg.data
    seen = set()
    for i, corpus in enumerate(d.corpora):
        key = f"data.corpora[{i}]"
        if not (0 < corpus.weight < float("inf")):
            fail(f"{key}.weight", f"must be a finite number > 0, got {show(corpus.weight)}")
        if corpus.tag and (len(corpus.tag.split()) != 1 or corpus.tag != corpus.tag.strip()):
            fail(f"{key}.tag", f"{corpus.tag!r}: a tag is one word without spaces")
        if corpus.tag in SPECIAL_PIECES:
            fail(f"{key}.tag", f"{corpus.tag!r} is a special piece of every tokenizer; choose another tag")
        named = Path(corpus.dir or d.dir, corpus.train)
        folder = named.resolve()  # d/base, d/base/ and ./d/base are one folder
        if folder in seen:
            fail(f"{key}.train", f"{named} is listed twice; give each corpus once, weighted")
        seen.add(folder)
    if d.corpora and d.format != "text":
        fail("data.corpora", "several corpora are read from text files (data.format: text)")


SAMPLING = ("temperature", "top_k", "top_p", "seed")  # the decode settings of sampling alone


def validate_decode(d: DecodeConfig, source: str, given: Collection[str] = ()) -> None:
    """The checks of the `decode` section, also applied to settings given per command or call;
    `given`: the keys written there (the others are defaults, or the model's settings)."""
    for rule, keys in (
        ("positive_int", ("beam", "batch_size", "max_len")),
        ("non_negative", ("alpha", "coverage", "min_len", "no_repeat_ngram", "max_len_ratio", "max_len_add")),
        ("non_negative", ("top_k", "seed")),
        ("temperature", ("temperature",)),
        ("decay", ("top_p",)),
    ):
        test, why = RULES[rule]
        for key in keys:
            if not test(getattr(d, key)):
                raise NMTError(f"{source}: decode.{key}: {why}, got {show(getattr(d, key))}")
    sampling = [k for k in SAMPLING if k in given and getattr(d, k) != getattr(DecodeConfig, k)]
    if sampling and not d.sample:  # a checkpoint's config writes every key, at its default
        raise NMTError(
            f"{source}: decode.{sampling[0]}: applies only when sampling; set sample: true (--sample)"
        )
    if d.length_penalty != "none" and d.alpha == 0 and "length_penalty" in given and "alpha" not in given:
        # Only a penalty named without its exponent: gnmt with alpha 0 is the default, in every
        # checkpoint's config, and an explicit alpha 0 (a sweep's first value) means what it says.
        raise NMTError(
            f"{source}: decode.length_penalty: {d.length_penalty} does nothing while decode.alpha is 0; "
            "set alpha too (0.6 to 1.0 are usual), or leave length_penalty out"
        )


def decode_settings(base: DecodeConfig, overrides: dict[str, Any], source: str) -> DecodeConfig:
    """`base` with the `overrides` that are not None, type-checked and validated like a config."""
    given = {k: v for k, v in overrides.items() if v is not None}
    settings = _build(DecodeConfig, dataclasses.asdict(base) | given, source, "decode.")
    validate_decode(settings, source, given)
    return settings


def describe_config(cfg: Config) -> str:
    """The config as YAML with every default filled in and each key's description as a comment:
    the reference of every setting, for `nmt configs --show`."""
    lines: list[str] = []

    def walk(obj: Any, indent: str) -> None:
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            doc = f.metadata.get("doc", "")
            comment = f"  # {doc}" if doc else ""
            if dataclasses.is_dataclass(value):
                lines.append(f"{indent}{f.name}:{comment}")
                walk(value, indent + "  ")
            elif isinstance(obj, AttentionConfig) and f.name == "options" and (shown := _options_of(obj)):
                lines.append(f"{indent}{f.name}:{comment}")
                walk(shown, indent + "  ")
            else:
                if isinstance(value, list):  # data.corpora: a list of sections
                    value = [dataclasses.asdict(v) if dataclasses.is_dataclass(v) else v for v in value]
                text = yaml.safe_dump(
                    {f.name: value}, default_flow_style=True, allow_unicode=True, width=10**6
                )
                lines.append(f"{indent}{text.strip()[1:-1]}{comment}")

    walk(cfg, "")
    return "\n".join(lines) + "\n"


def _options_of(att: AttentionConfig) -> Any:
    """A plugin attention's options as set (its `Options` filled in), for `describe_config`."""
    options = getattr(registered("model.attention.type").get(att.type), "Options", None)
    return None if options is None else plugin_options(options, att.options, "<config>")
