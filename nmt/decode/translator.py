"""Text in, text out: tokenise, sort by length, decode in batches, restore the input order."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from nmt.config import Config, DecodeConfig, decode_settings
from nmt.data.batching import pad_sources
from nmt.data.cleaning import normalize
from nmt.data.tokenizer import TokenizerPair
from nmt.decode.ensemble import Ensemble
from nmt.decode.search import Hypothesis, StepModel, beam_search, greedy_search
from nmt.decode.words import merge_pieces
from nmt.errors import NMTError
from nmt.model.seq2seq import count_parameters
from nmt.vocab import EOS


@dataclass
class WordAttention:
    """Attention of the best hypothesis between words (pieces merged, `decode.words`): one row
    per target word, one column per source word; "</s>" is a word of its own on both sides."""

    source: list[str]
    target: list[str]
    weights: list[list[float]]


@dataclass
class Translation:
    src_pieces: list[str]  # with the final "</s>"
    tgt_pieces: list[str]  # with the final "</s>" when the hypothesis ended in EOS
    hypotheses: list[Hypothesis]  # n-best, best first; empty for an empty input line
    texts: list[str]  # the detokenised text of each hypothesis
    truncated: bool = False  # the source was longer than the model's limit and was cut to it

    @property
    def text(self) -> str:
        """The best translation."""
        return self.texts[0]

    @property
    def score(self) -> float:
        """The best hypothesis's ranking score (length-normalised log-probability); 0 for an
        empty input line."""
        return self.hypotheses[0].score if self.hypotheses else 0.0

    @property
    def scores(self) -> list[float]:
        """The score of each n-best hypothesis, best first, beside `texts`."""
        return [h.score for h in self.hypotheses] or [0.0]

    @property
    def tokens(self) -> list[str]:
        """The best hypothesis as the model wrote it: SentencePiece pieces, "</s>" included."""
        return self.tgt_pieces

    @property
    def attention(self) -> WordAttention:
        """Word-level attention of the best hypothesis (empty for an empty input line)."""
        if not self.hypotheses:
            return WordAttention([], [], [])
        weights = self.hypotheses[0].attention[:, : len(self.src_pieces)].tolist()
        return WordAttention(*merge_pieces(weights, self.src_pieces, self.tgt_pieces))


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


class Translator:
    """Decodes with `model` (a Seq2Seq or an Ensemble) under the settings of `cfg`.

    Sources longer than `src_limit` subwords (the training length limit) are cut to it, and their
    `Translation.truncated` says so, so the caller can warn.
    """

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
        self.model, self.tok, self.cfg, self.device = model, tok, cfg, device
        self.src_limit, self.normalize_form, self.info = src_limit, normalize_form, info

    @classmethod
    def load(
        cls, path: str | Path | Sequence[str | Path], device: str = "auto", **settings: object
    ) -> Translator:
        """A translator for a checkpoint or a run directory (its best checkpoint), or for a list
        of them decoding as an ensemble; `settings` replace the checkpoint's decode settings
        (`beam=5`, `alpha=0.6`, ...). `device`: auto, cpu, cuda, cuda:N or mps."""
        paths = [path] if isinstance(path, str | Path) else list(path)
        return load_translator(paths, settings, device)

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

    def configured(self, **settings: object) -> Translator:
        """The same model with other decode settings (`beam=5`, `alpha=0.6`, ...), checked."""
        cfg = decode_settings(self.cfg, settings, "Translator.configured")
        return Translator(
            self.model, self.tok, cfg, self.device, self.src_limit, self.normalize_form, self.info
        )

    def max_len(self, src_len: int) -> int:
        return max(1, min(self.cfg.max_len, int(self.cfg.max_len_ratio * src_len) + 10))

    def translate(self, sentences: str | list[str], nbest: int = 1, **settings: object) -> list[Translation]:
        """Translations of `sentences` in their order (a single string is one sentence), each
        with `nbest` hypotheses; `settings` (`beam=5`, `max_len=50`, ...) apply to this call."""
        translator = self.configured(**settings) if settings else self
        lines = [sentences] if isinstance(sentences, str) else list(sentences)
        return list(translator.iter_translate(lines, nbest))

    def iter_translate(
        self, lines: list[str], nbest: int = 1, progress: Callable[[int], None] | None = None
    ) -> Iterator[Translation]:
        """Translations in input order; batches are formed from length-sorted sentences."""
        ids, truncated = [], set()
        normalized = [normalize(line, self.normalize_form) for line in lines]
        for i, pieces in enumerate(self.tok.src.encode_batch(normalized)):
            if len(pieces) > self.src_limit:
                truncated.add(i)
                pieces = pieces[: self.src_limit]
            ids.append(pieces + [EOS])
        # Empty in, empty out: a blank line is not a sentence to hallucinate a translation for.
        done = {i: Translation([], [], [], [""]) for i, line in enumerate(lines) if not line.strip()}
        order = sorted((i for i in range(len(ids)) if i not in done), key=lambda i: len(ids[i]))
        batches = iter(self._batches(order, ids))
        next_out = 0
        while True:
            while next_out in done:
                yield done.pop(next_out)
                next_out += 1
            chunk = next(batches, None)
            if chunk is None:
                return
            for i, hyps in zip(chunk, self._decode([ids[i] for i in chunk], nbest), strict=True):
                texts = [self.tok.tgt.decode(h.tokens) for h in hyps]
                done[i] = Translation(
                    src_pieces=self.tok.src.id_to_piece(ids[i]),
                    tgt_pieces=self.tok.tgt.id_to_piece(hyps[0].tokens),
                    hypotheses=hyps,
                    texts=texts,
                    truncated=i in truncated,
                )
            if progress:
                progress(len(chunk))

    def _batches(self, order: list[int], ids: list[list[int]]) -> list[list[int]]:
        """Consecutive length-sorted sentences, up to batch_size sentences or padded tokens."""
        if self.cfg.batch_type == "sentences":
            return [order[i : i + self.cfg.batch_size] for i in range(0, len(order), self.cfg.batch_size)]
        batches: list[list[int]] = [[]]
        for i in order:  # sorted ascending, so the newest sentence is the longest
            if batches[-1] and (len(batches[-1]) + 1) * len(ids[i]) > self.cfg.batch_size:
                batches.append([])
            batches[-1].append(i)
        return [b for b in batches if b]

    def _decode(self, rows: list[list[int]], nbest: int) -> list[list[Hypothesis]]:
        src, src_len = pad_sources(rows)
        src = src.to(self.device)
        max_lens = [self.max_len(len(r)) for r in rows]
        if self.cfg.beam == 1 and nbest == 1:
            return [[h] for h in greedy_search(self.model, src, src_len, max_lens, self.cfg)]
        return beam_search(self.model, src, src_len, max_lens, self.cfg, nbest)


def load_translator(checkpoints: list[Path], overrides: dict, device: str = "cpu") -> Translator:
    """A Translator for one checkpoint (or run directory), or an ensemble of several; `overrides`
    replace the first checkpoint's `decode` settings."""
    from nmt.checkpoint import load_checkpoint
    from nmt.device import resolve_device

    torch_device = resolve_device(device)
    loaded = [load_checkpoint(path, torch_device) for path in checkpoints]
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
    return translator
