"""Text in, text out: tokenise, sort by length, decode in batches, restore the input order."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from nmt.config import Config, DecodeConfig, decode_settings
from nmt.data.batching import pad_sources
from nmt.data.cleaning import normalize
from nmt.data.tokenizer import TokenizerPair
from nmt.decode.ensemble import Ensemble
from nmt.decode.forced import ForcedScore, forced_decode
from nmt.decode.search import Hypothesis, StepModel, beam_search, greedy_search
from nmt.errors import NMTError
from nmt.vocab import EOS


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
    ):
        self.model, self.tok, self.cfg, self.device = model, tok, cfg, device
        self.src_limit, self.normalize_form = src_limit, normalize_form

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
        return cls(model, tok, settings, device, cfg.data.max_len, cfg.data.normalize)

    def configured(self, **settings) -> Translator:
        """The same model with other decode settings (`beam=5`, `alpha=0.6`, ...), checked."""
        cfg = decode_settings(self.cfg, settings, "Translator.configured")
        return Translator(self.model, self.tok, cfg, self.device, self.src_limit, self.normalize_form)

    def max_len(self, src_len: int) -> int:
        return max(1, min(self.cfg.max_len, int(self.cfg.max_len_ratio * src_len) + 10))

    def translate(self, lines: list[str], nbest: int = 1) -> list[Translation]:
        return list(self.iter_translate(lines, nbest))

    def iter_translate(
        self, lines: list[str], nbest: int = 1, progress: Callable[[int], None] | None = None
    ) -> Iterator[Translation]:
        """Translations in input order; batches are formed from length-sorted sentences."""
        ids, truncated = self._source_ids(lines)
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

    def score(self, sources: list[str], targets: list[str]) -> list[ForcedScore]:
        """Forced decoding of each (source, target) pair, in input order: the target's
        log-probability per piece and the attention the model puts on the source while
        producing it. Both sides are normalised and the source truncated as in `translate`."""
        if len(sources) != len(targets):
            raise NMTError(f"score: {len(sources)} sources but {len(targets)} targets")
        src_ids, truncated = self._source_ids(sources)
        tgt_ids = [
            pieces + [EOS]
            for pieces in self.tok.tgt.encode_batch([normalize(t, self.normalize_form) for t in targets])
        ]
        order = sorted(range(len(src_ids)), key=lambda i: len(src_ids[i]))
        out: list[ForcedScore | None] = [None] * len(sources)
        for chunk in self._batches(order, src_ids):
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

    def _source_ids(self, lines: list[str]) -> tuple[list[list[int]], set[int]]:
        """Normalised, encoded sources ending in EOS, cut to the model's limit (and which were)."""
        ids, truncated = [], set()
        normalized = [normalize(line, self.normalize_form) for line in lines]
        for i, pieces in enumerate(self.tok.src.encode_batch(normalized)):
            if len(pieces) > self.src_limit:
                truncated.add(i)
                pieces = pieces[: self.src_limit]
            ids.append(pieces + [EOS])
        return ids, truncated

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
    return Translator.from_config(model, first.tokenizers, first.config, torch_device, overrides)
