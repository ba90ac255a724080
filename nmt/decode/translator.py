"""The torch engine: a `TextTranslator` whose batches go through `greedy_search` / `beam_search`
with a Seq2Seq (or an ensemble of them), and `load_translator` for any model path."""

from __future__ import annotations

from pathlib import Path

import torch

from nmt.config import Config, DecodeConfig, decode_settings
from nmt.data.batching import pad_sources
from nmt.data.tokenizer import TokenizerPair
from nmt.decode.ensemble import Ensemble
from nmt.decode.ranking import Hypothesis
from nmt.decode.search import StepModel, beam_search, greedy_search
from nmt.decode.text import TextTranslator, Translation
from nmt.errors import NMTError

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
