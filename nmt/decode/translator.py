"""The torch engine: a `TextTranslator` whose batches go through `greedy_search` / `beam_search`
with a Seq2Seq (or an ensemble of them), and `load_translator` for any model path."""

from __future__ import annotations

from pathlib import Path

import torch

from nmt.config import Config, DecodeConfig, decode_settings
from nmt.data.batching import pad_sources
from nmt.data.cleaning import normalize
from nmt.data.tokenizer import TokenizerPair
from nmt.decode.ensemble import Ensemble
from nmt.decode.forced import ForcedScore, forced_decode
from nmt.decode.ranking import Hypothesis
from nmt.decode.search import StepModel, beam_search, greedy_search
from nmt.decode.text import TextTranslator, Translation
from nmt.errors import NMTError
from nmt.vocab import EOS

__all__ = ["Translation", "Translator", "load_translator"]


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
    ):
        super().__init__(tok, cfg, src_limit, normalize_form)
        self.model, self.device = model, device

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

    def score(self, sources: list[str], targets: list[str]) -> list[ForcedScore]:
        """Forced decoding of each (source, target) pair, in input order: the target's
        log-probability per piece and the attention the model puts on the source while
        producing it. Both sides are normalised and the source truncated as in `translate`."""
        if len(sources) != len(targets):
            raise NMTError(f"score: {len(sources)} sources but {len(targets)} targets")
        norm = self.normalize_form
        src_ids = [p + [EOS] for p in self.tok.src.encode_batch([normalize(s, norm) for s in sources])]
        truncated = {i for i, ids in enumerate(src_ids) if len(ids) > self.src_limit + 1}
        src_ids = [ids[: self.src_limit] + [EOS] if i in truncated else ids for i, ids in enumerate(src_ids)]
        tgt_ids = [p + [EOS] for p in self.tok.tgt.encode_batch([normalize(t, norm) for t in targets])]
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

    def _decode(self, rows: list[list[int]], nbest: int) -> list[list[Hypothesis]]:
        src, src_len = pad_sources(rows)
        src = src.to(self.device)
        max_lens = [self.max_len(len(r)) for r in rows]
        if self.cfg.beam == 1 and nbest == 1:
            return [[h] for h in greedy_search(self.model, src, src_len, max_lens, self.cfg)]
        return beam_search(self.model, src, src_len, max_lens, self.cfg, nbest)


def load_translator(checkpoints: list[Path], overrides: dict, device: str = "cpu") -> Translator:
    """A Translator for one model (a checkpoint, run directory, release directory or hf:// path;
    see `nmt.checkpoint.load_model`), or an ensemble of several; `overrides` replace the first
    model's `decode` settings."""
    from nmt.checkpoint import load_model
    from nmt.device import resolve_device

    torch_device = resolve_device(device)
    loaded = [load_model(path, torch_device) for path in checkpoints]
    first = loaded[0]
    for path, other in zip(checkpoints[1:], loaded[1:], strict=True):
        if other.tokenizers.to_state() != first.tokenizers.to_state():
            raise NMTError(
                f"{path}: ensemble members must share their vocabularies, and this one differs "
                f"from {checkpoints[0]}'s"
            )
    model = first.model if len(loaded) == 1 else Ensemble([m.model for m in loaded])
    return Translator.from_config(model, first.tokenizers, first.config, torch_device, overrides)
