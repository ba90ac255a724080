"""`nmt translate --engine onnx`: the shared text handling of `TextTranslator` over an ONNX export."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from nmt.config import DecodeConfig, decode_settings
from nmt.data.tokenizer import TokenizerPair
from nmt.errors import NMTError
from nmt.hub import resolve_model_path
from nmt.runtime.model import OnnxModel
from nmt.runtime.search import beam_search, greedy_search
from nmt.text.ranking import Hypothesis, is_greedy
from nmt.text.translation import TextTranslator
from nmt.vocab import PAD


class OnnxTranslator(TextTranslator):
    def __init__(
        self, model: OnnxModel, tok: TokenizerPair, cfg: DecodeConfig, src_limit: int, normalize_form: str
    ):
        super().__init__(tok, cfg, src_limit, normalize_form)
        self.model = model

    def _decode(self, rows: list[list[int]], nbest: int) -> list[list[Hypothesis]]:
        if self.cfg.sample:
            raise NMTError("the onnx engine searches and does not sample; sample with --engine torch")
        src = np.full((len(rows), max(len(r) for r in rows)), PAD, dtype=np.int64)
        for i, r in enumerate(rows):
            src[i, : len(r)] = r
        src_len = np.array([len(r) for r in rows], dtype=np.int64)
        max_lens = [self.max_len(len(r)) for r in rows]
        if is_greedy(self.cfg, nbest):
            return [[h] for h in greedy_search(self.model, src, src_len, max_lens, self.cfg)]
        return beam_search(self.model, src, src_len, max_lens, self.cfg, nbest)


def load_onnx_translator(paths: list[Path | str], overrides: dict, threads: int = 0) -> OnnxTranslator:
    """A translator for one `nmt export` directory (or hf:// path to one); `overrides` replace
    its decode settings."""
    if len(paths) != 1:
        raise NMTError("the onnx engine decodes with one model; ensembles need --engine torch")
    directory = resolve_model_path(paths[0])
    model = OnnxModel(directory, threads)
    cfg = model.config
    exported = decode_settings(DecodeConfig(), cfg["decode"], f"{directory}/config.json")
    settings = decode_settings(exported, overrides, "command line")
    tok = TokenizerPair.load(directory)
    model.check(len(tok.src), len(tok.tgt))
    return OnnxTranslator(model, tok, settings, cfg["max_len"], cfg["normalize"])
