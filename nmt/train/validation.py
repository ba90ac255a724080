"""Validation: the loss over every validation pair, and BLEU / chrF of the translations made
through the same code and settings as `nmt translate` with this checkpoint."""

from __future__ import annotations

import math
import random
from pathlib import Path

import torch

from nmt.config import Config, DecodeConfig
from nmt.data.batching import collate
from nmt.data.corpus import EncodedCorpus
from nmt.data.sources import Pairs
from nmt.data.tokenizer import TokenizerPair
from nmt.decode.translator import Translation, Translator
from nmt.errors import NMTError
from nmt.evaluate.alignment import align, alignment_error_rate, method, read_gold
from nmt.evaluate.scoring import EvalOptions, evaluate, metrics
from nmt.fileio import read_lines
from nmt.model.linear import drop_prepacked
from nmt.train.loss import batch_loss
from nmt.train.precision import Precision

# On a GPU, validation's loss batches and its translation pool hold this many sentences: a batch
# or a decoding step costs about the same few hundred kernel launches at any width, so 64 at a
# time left the card idle (1.7 s a validation on the H200, docs/notes/performance-history.md, 12).
GPU_WIDTH = 512


def validation_width(decode: DecodeConfig, device: torch.device) -> int:
    """Sentences validated at once: the decode section's batch size, or on a GPU at least
    `GPU_WIDTH` sentences (exactly that when the section counts tokens). The same maths either
    way: a sentence's loss and search do not depend on the others beside it, so the scores differ
    by float rounding at most (and a rare near tie in a search)."""
    if device.type != "cuda":
        return decode.batch_size
    return GPU_WIDTH if decode.batch_type == "tokens" else max(decode.batch_size, GPU_WIDTH)


def valid_sample(pairs: Pairs, size: int, seed: int) -> Pairs:
    """The validation pairs whose translations are scored: all of them, or `size` drawn once
    with `seed` and kept in their order, so that every validation of a run scores the same ones
    (a smaller, cheaper BLEU that still ranks checkpoints; the loss always uses every pair)."""
    if not size or size >= len(pairs):
        return pairs
    chosen = sorted(random.Random(seed).sample(range(len(pairs)), size))
    return [pairs[i] for i in chosen]


def valid_gold(cfg: Config, pairs: Pairs) -> list:
    """The validation split's gold links (`train.guided_alignment.valid_links`), checked against
    its pairs: one line each, every link inside its pair; [] without them."""
    path = cfg.train.guided_alignment.valid_links
    if not path:
        return []
    key = "train.guided_alignment.valid_links"
    if not Path(path).is_file():
        raise NMTError(f"{key}: {path}: file not found")
    lines = read_lines(Path(path))
    if len(lines) != len(pairs):
        raise NMTError(
            f"{key}: {path} has {len(lines)} lines and the validation split {len(pairs)} pairs; "
            "give one line of links per validation pair"
        )
    return read_gold(Path(path), lines, [s for s, _ in pairs], [t for _, t in pairs])


class Validator:
    def __init__(
        self,
        cfg: Config,
        tok: TokenizerPair,
        corpus: EncodedCorpus,
        pairs: Pairs,
        device: torch.device,
        precision: Precision,
    ):
        self.cfg, self.tok, self.corpus = cfg, tok, corpus
        self.translated = valid_sample(pairs, cfg.train.valid_subset, cfg.train.seed)
        subset = len(self.translated) < len(pairs)
        self.notes = [f"validation: BLEU on {len(self.translated)} of {len(pairs)} pairs"] if subset else []
        self.device, self.precision = device, precision
        self.translator: Translator | None = None  # kept: on a GPU its graphs are captured once
        self.options = EvalOptions(bootstrap=0)
        metrics(self.options)  # sacreBLEU's tokenizer loads now, before the run folder is made
        self.pairs, self.gold = pairs, valid_gold(cfg, pairs)

    @torch.no_grad()
    def scores(
        self,
        model: torch.nn.Module,
        objective: torch.nn.Module,
        step: int,
        generator: torch.Generator,
        attention: bool = False,
    ) -> tuple[dict[str, float], list[Translation]]:
        """Validation loss, perplexity and translation scores of `model`'s current weights, and
        the translations themselves (with their attention if asked, for the trackers)."""
        model.eval()
        nll, tokens = self.loss(objective, step, generator)
        translations = self.translator_of(model).translate(
            [s for s, _ in self.translated], attention=attention
        )
        hyps = [t.text for t in translations]
        refs = [[t for _, t in self.translated]]
        report = evaluate({"valid": hyps}, refs, self.options).systems[0]
        found = {
            "valid_loss": nll / tokens,
            "valid_ppl": math.exp(min(nll / tokens, 50)),
            "valid_bleu": report.scores["BLEU"],
            "valid_chrf": report.scores["chrF"],
            "valid_exact_match": report.exact_match,
        }
        if self.gold:
            found["valid_aer"] = self.error_rate(self.translator_of(model))
        drop_prepacked()  # training changes every weight next: their packed copies are stale
        return found, translations

    def error_rate(self, translator: Translator) -> float:
        """AER of the attention over every validation reference (forced decoding, argmax
        links: `nmt align --ref`) against `train.guided_alignment.valid_links`."""
        how = method("argmax")
        scored = translator.score([s for s, _ in self.pairs], [t for _, t in self.pairs])
        links = [align(s.attention, s.src_pieces, s.tgt_pieces, how) for s in scored]
        return alignment_error_rate(links, self.gold).aer

    def translator_of(self, model: torch.nn.Module) -> Translator:
        """The translator of `model`, the same one every validation (its fixed-row pools and
        their CUDA graphs are kept, and read the weights as training changes them in place)."""
        if self.translator is None or self.translator.model is not model:
            # A search, whatever the decode section says of sampling: validation ranks checkpoints.
            settings: dict = {"sample": False}
            if self.device.type == "cuda":
                width = validation_width(self.cfg.decode, self.device)
                settings |= {"batch_type": "sentences", "batch_size": width}
            self.translator = Translator.from_config(model, self.tok, self.cfg, self.device, settings)
        return self.translator

    def loss(self, objective: torch.nn.Module, step: int, generator: torch.Generator) -> tuple[float, int]:
        """Summed NLL and target tokens over every validation pair, in batches of
        `validation_width` sentences."""
        nll, tokens = 0.0, 0
        size, corpus = validation_width(self.cfg.decode, self.device), self.corpus
        for start in range(0, len(corpus), size):
            batch = collate(corpus, range(start, min(start + size, len(corpus)))).to(self.device)
            with self.precision.autocast():
                sums = batch_loss(objective, batch, step, generator)
            nll, tokens = nll + sums.nll.double(), tokens + sums.tokens  # read once, at the end
        return float(nll), tokens
