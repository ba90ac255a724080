"""The torch engine: a `TextTranslator` that decodes with `nmt.decode.search` (greedy or beam,
continuous batching) with a Seq2Seq (or an ensemble of them), and `load_translator` for any model
path."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from nmt.config import Config, DecodeConfig, decode_settings
from nmt.data.batching import pad_sources
from nmt.data.cleaning import normalize
from nmt.data.tokenizer import TokenizerPair
from nmt.decode import rows
from nmt.decode.ensemble import Ensemble
from nmt.decode.forced import ForcedScore, forced_decode
from nmt.decode.sampling import sample
from nmt.decode.search import StepModel, search
from nmt.errors import NMTError
from nmt.model.precision import Choice
from nmt.model.seq2seq import count_parameters
from nmt.text.ranking import Hypothesis, Source
from nmt.text.translation import TextTranslator, Translation, WordAttention
from nmt.vocab import EOS

__all__ = ["ModelInfo", "Translation", "Translator", "WordAttention", "load_translator"]


@dataclass(frozen=True)
class ModelInfo:
    """What a loaded model is: its languages, architecture and size, for people and for `/info`."""

    src_lang: str
    tgt_lang: str
    attention: str  # model.attention.type
    decoder: str  # model.decoder.style: luong or bahdanau
    parameters: int  # trainable parameters (all members of an ensemble)
    src_vocab: int
    tgt_vocab: int
    max_source_pieces: int  # longer sources are translated truncated
    checkpoints: list[str] = field(default_factory=list)  # where it was loaded from


class Translator(TextTranslator):
    """Decodes with `model` (a Seq2Seq or an Ensemble) on `device` under the settings of `cfg`."""

    def __init__(
        self,
        model: StepModel,
        tok: TokenizerPair,
        cfg: DecodeConfig,
        device: torch.device,
        src_limit: int = 10**9,
        normalize_form: str = "none",
        info: ModelInfo | None = None,
    ):
        super().__init__(tok, cfg, src_limit, normalize_form)
        self.model, self.device, self.info = model, device, info
        self.precision = Choice("fp32", "precision: fp32")  # what `load_translator` chose and applied
        self.kept = rows.Kept()  # fixed-row pools and their graphs, shared by `configured` copies

    @classmethod
    def load(
        cls,
        path: str | Path | Sequence[str | Path],
        device: str = "auto",
        precision: str | None = None,
        quantize: str | None = None,
        plugins: Sequence[str | Path] = (),
        trust_plugins: bool = False,
        **settings: object,
    ) -> Translator:
        """A translator for a checkpoint, a run directory (its best checkpoint), a release
        directory or an `hf://` path, or for a list of them decoding as an ensemble; `settings`
        replace the model's decode settings (`beam=5`, `alpha=0.6`, ...). `device`: auto, cpu,
        cuda, cuda:N or mps. `precision`: auto (the default: bf16 where this CPU runs the
        model's products at least 1.5x as fast in it, else fp32), fp32, bf16 or int8
        (`nmt.model.precision`); `translator.precision.why` says what was chosen.
        `quantize="int8"` is the old spelling of `precision="int8"`. `plugins`: the files of
        the classes a model of one's own attention needs (`nmt.plugins`); `trust_plugins`: run
        the plugin sources the model recorded instead (only for a model you trust)."""
        from nmt.plugins import load_files, trust

        if trust_plugins:
            trust()
        load_files(plugins)
        paths = [path] if isinstance(path, str | Path) else list(path)
        precision, renamed = renamed_quantize(quantize, precision)
        if renamed:
            import warnings

            warnings.warn(renamed.replace("--", ""), FutureWarning, stacklevel=2)
        return load_translator(paths, settings, device, precision)

    @classmethod
    def from_config(
        cls,
        model: StepModel,
        tok: TokenizerPair,
        cfg: Config,
        device: torch.device,
        overrides: dict | None = None,
        source: str = "command line",
    ) -> Translator:
        """The translator a run's config describes: its decode settings (with `overrides`, checked
        like the config), and the data limits and normalisation the model was trained with."""
        settings = decode_settings(cfg.decode, overrides or {}, source)
        members = model.models if isinstance(model, Ensemble) else [model]
        info = ModelInfo(
            src_lang=cfg.data.src_lang,
            tgt_lang=cfg.data.tgt_lang,
            attention=cfg.model.attention.type,
            decoder=cfg.model.decoder.style,
            parameters=sum(count_parameters(m) for m in members),
            src_vocab=len(tok.src),
            tgt_vocab=len(tok.tgt),
            max_source_pieces=cfg.data.max_len,
        )
        return cls(model, tok, settings, device, cfg.data.max_len, cfg.data.normalize, info)

    def score(self, sources: list[str], targets: list[str]) -> list[ForcedScore]:
        """Forced decoding of each (source, target) pair, in input order: the target's
        log-probability per piece and the attention the model puts on the source while
        producing it. Both sides are normalised and the source truncated as in `translate`."""
        if len(sources) != len(targets):
            raise NMTError(f"score: {len(sources)} sources but {len(targets)} targets")
        src_ids, truncated = self.encode_sources(sources)
        normalized = [normalize(t, self.normalize_form) for t in targets]
        tgt_ids = [p + [EOS] for p in self.tok.tgt.encode_batch(normalized)]
        order = sorted(range(len(src_ids)), key=lambda i: len(src_ids[i]))
        out: list[ForcedScore | None] = [None] * len(sources)
        for chunk in self.batches(order, lambda i: len(src_ids[i])):
            src, src_len = pad_sources([src_ids[i] for i in chunk])
            forced = forced_decode(self.model, src.to(self.device), src_len, [tgt_ids[i] for i in chunk])
            for i, (log_probs, attention) in zip(chunk, forced, strict=True):
                out[i] = ForcedScore(
                    self.tok.src.id_to_piece(src_ids[i]),
                    self.tok.tgt.id_to_piece(tgt_ids[i]),
                    log_probs,
                    attention[:, : len(src_ids[i])],
                    i in truncated,
                )
        return out  # type: ignore[return-value]

    def _decode_stream(
        self, sources: Iterator[Source | None], nbest: int, attention: bool, unconstrained: bool = False
    ) -> Iterator[tuple[Any, list[Hypothesis]]]:
        """Continuous batching (`nmt.decode.search`, `nmt.decode.sampling`): the pool refills
        from `sources`, which may be live (None: nothing ready yet). Sampling: `nbest` samples.
        Sources without constraints on a GPU: fixed rows and CUDA graphs (`nmt.decode.rows`)."""
        if unconstrained and rows.suits(self.model, self.cfg, self.device, attention):
            return search(
                self.model, sources, self.cfg, self.fits, self.device, nbest, False, self.kept.pools()
            )
        decode = sample if self.cfg.sample else search
        return decode(self.model, sources, self.cfg, self.fits, self.device, nbest, attention)


def renamed_quantize(quantize: str | None, precision: str | None) -> tuple[str | None, str]:
    """`precision`, or what the old `quantize` (none or int8) said, and then the line saying it
    is now spelled `precision` ('' when `quantize` was not given)."""
    if quantize is None:
        return precision, ""
    if quantize not in QUANTIZE:
        raise NMTError(f"--quantize: {quantize!r} is not one of {', '.join(QUANTIZE)}")
    if precision is not None:
        raise NMTError(f"--quantize {quantize} and --precision {precision}: give --precision alone")
    new = "int8" if quantize == "int8" else "fp32"
    return new, f"--quantize {quantize} is now spelled --precision {new}"


QUANTIZE = ("none", "int8")  # the old --quantize's values


def load_translator(
    checkpoints: list[Path],
    overrides: dict,
    device: str = "cpu",
    precision: str | None = None,
    int8: bool = True,
) -> Translator:
    """A Translator for one model (a checkpoint, run directory, release directory or hf:// path;
    see `nmt.checkpoint.load_model`), or an ensemble of several; `overrides` replace the first
    model's `decode` settings; `precision`: auto (None), fp32, bf16 or int8, chosen by
    `nmt.model.precision` and applied to every member. `int8`: whether auto may take int8, for
    one model whose BLEU check allows it (`nmt.decode.bleucheck`)."""
    from nmt.checkpoint import load_model
    from nmt.device import resolve_device
    from nmt.model.precision import choose, resolve

    torch_device = resolve_device(device)
    loaded = [load_model(path, torch_device) for path in checkpoints]
    check, unused = None, ""
    single_on_cpu = len(checkpoints) == 1 and torch_device.type == "cpu"
    weigh_int8 = int8 and single_on_cpu and resolve(precision) == "auto"
    if weigh_int8:
        from nmt.checkpoint import weights_file
        from nmt.decode.bleucheck import read_check

        check, unused = read_check(weights_file(checkpoints[0]), checkpoints[0])
    choice = choose(precision, loaded[0].model, torch_device, check=check)
    if unused:
        choice = replace(choice, why=f"{unused}\n{choice.why}")
    elif weigh_int8 and check is None:
        hint = f"; int8 is weighed once `nmt precision -m {checkpoints[0]}` checks its BLEU"
        choice = replace(choice, why=choice.why + hint)
    for m in loaded:
        apply_precision(m.model, choice, torch_device)
    first = loaded[0]
    for path, other in zip(checkpoints[1:], loaded[1:], strict=True):
        if other.tokenizers.to_state() != first.tokenizers.to_state():
            raise NMTError(
                f"{path}: ensemble members must share their vocabularies, and this one differs "
                f"from {checkpoints[0]}'s"
            )
    model = first.model if len(loaded) == 1 else Ensemble([m.model for m in loaded])
    translator = Translator.from_config(model, first.tokenizers, first.config, torch_device, overrides)
    translator.info = replace(translator.info, checkpoints=[str(p) for p in checkpoints])
    translator.precision = choice
    return translator


def apply_precision(model: torch.nn.Module, choice: Choice, device: torch.device) -> None:
    """`model`'s products in the chosen precision, in place: bf16 operands, or an int8 decoder."""
    from nmt.decode.quantize import quantize_int8
    from nmt.model.linear import use_operands

    if choice.name == "int8":
        quantize_int8(model, device, choice.engine)
    else:
        use_operands(model, choice.dtype)
