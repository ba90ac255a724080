"""Text in, text out: tokenise, sort by length, decode in batches, restore the input order."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from nmt.config import DecodeConfig
from nmt.data.batching import pad_sources
from nmt.data.tokenizer import EOS, TokenizerPair
from nmt.decode.search import Hypothesis, beam_search, greedy_search
from nmt.model.seq2seq import Seq2Seq


@dataclass
class Translation:
    text: str
    src_pieces: list[str]  # with the final "</s>"
    tgt_pieces: list[str]  # with the final "</s>" when the hypothesis ended in EOS
    hypotheses: list[Hypothesis]  # n-best, best first


class Translator:
    def __init__(self, model: Seq2Seq, tok: TokenizerPair, cfg: DecodeConfig, device: torch.device):
        self.model, self.tok, self.cfg, self.device = model.eval(), tok, cfg, device

    def max_len(self, src_len: int) -> int:
        return max(1, min(self.cfg.max_len, int(self.cfg.max_len_ratio * src_len) + 10))

    def translate(self, lines: list[str], nbest: int = 1) -> list[Translation]:
        return list(self.iter_translate(lines, nbest))

    def iter_translate(self, lines: list[str], nbest: int = 1) -> Iterator[Translation]:
        """Translations in input order; batches are formed from length-sorted sentences."""
        ids = [s + [EOS] for s in self.tok.src.encode_batch(lines)]
        # Empty in, empty out: a blank line is not a sentence to hallucinate a translation for.
        done = {i: Translation("", [], [], []) for i, line in enumerate(lines) if not line.strip()}
        order = sorted((i for i in range(len(ids)) if i not in done), key=lambda i: len(ids[i]))
        next_out = 0
        while next_out in done:
            yield done.pop(next_out)
            next_out += 1
        for start in range(0, len(order), self.cfg.batch_size):
            chunk = order[start : start + self.cfg.batch_size]
            for i, hyps in zip(chunk, self._decode([ids[i] for i in chunk], nbest), strict=True):
                best = hyps[0]
                done[i] = Translation(
                    text=self.tok.tgt.decode(best.tokens),
                    src_pieces=self.tok.src.id_to_piece(ids[i]),
                    tgt_pieces=self.tok.tgt.id_to_piece(best.tokens),
                    hypotheses=hyps,
                )
            while next_out in done:
                yield done.pop(next_out)
                next_out += 1

    def _decode(self, rows: list[list[int]], nbest: int) -> list[list[Hypothesis]]:
        src, src_len = pad_sources(rows)
        src = src.to(self.device)
        max_lens = [self.max_len(len(r)) for r in rows]
        if self.cfg.beam == 1 and nbest == 1:
            return [[h] for h in greedy_search(self.model, src, src_len, max_lens)]
        return beam_search(
            self.model, src, src_len, max_lens, max(self.cfg.beam, nbest), self.cfg.alpha, nbest
        )


def load_translator(checkpoint: Path, overrides: dict, device: str = "cpu") -> Translator:
    """A Translator for a checkpoint (or run directory), with `decode` settings overridden."""
    from nmt.checkpoint import load_checkpoint
    from nmt.train.device import resolve_device

    torch_device = resolve_device(device)
    loaded = load_checkpoint(checkpoint, torch_device)
    cfg = replace(loaded.config.decode, **{k: v for k, v in overrides.items() if v is not None})
    return Translator(loaded.model, loaded.tokenizers, cfg, torch_device)
