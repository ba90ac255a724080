"""SentencePiece, trained on the training split; the model bytes travel inside every checkpoint.

Special ids (PAD=0, UNK=1, BOS=2, EOS=3, in nmt/vocab.py) are fixed for every model, so the network
never needs to ask the tokenizer.
"""

from __future__ import annotations

import io
from collections.abc import Iterable
from functools import cached_property
from pathlib import Path

import sentencepiece as spm

from nmt.config import TokenizerConfig
from nmt.errors import NMTError
from nmt.fileio import atomic_write
from nmt.vocab import BOS, EOS, PAD, UNK

# The SentencePiece files of a release or an export: one joint model, or one per side.
JOINT_FILE, SRC_FILE, TGT_FILE = "spm.model", "src.model", "tgt.model"


class Tokenizer:
    """One SentencePiece model: text <-> ids (no BOS/EOS added) and text -> pieces."""

    def __init__(self, model_bytes: bytes):
        self.model_bytes = model_bytes
        self.sp = spm.SentencePieceProcessor(model_proto=model_bytes)

    def __len__(self) -> int:
        return self.sp.get_piece_size()

    def encode(self, text: str) -> list[int]:
        return self.sp.encode(text)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return self.sp.encode(texts)

    def decode(self, ids: list[int]) -> str:
        return self.sp.decode([i for i in ids if i > EOS])

    def id_to_piece(self, ids: Iterable[int]) -> list[str]:
        pieces = self.pieces
        return [pieces[i] for i in ids]

    @cached_property
    def pieces(self) -> list[str]:
        """Every id's piece, read once: one looked up through SentencePiece's wrapper per id was
        half the host's work of a bulk translation around the search (a GPU's floor)."""
        return [self.sp.id_to_piece(i) for i in range(len(self))]


def train_tokenizer(sentences: list[str], cfg: TokenizerConfig) -> Tokenizer:
    """Train in memory; returns a Tokenizer whose bytes can be stored anywhere."""
    sentences = [s for s in sentences if s.strip()]
    if not sentences:
        raise NMTError("tokenizer: the training data has no non-empty sentence")
    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(sentences),
            model_writer=model,
            model_type=cfg.type,
            vocab_size=cfg.vocab_size,
            character_coverage=cfg.character_coverage,
            num_threads=cfg.num_threads,
            pad_id=PAD,
            unk_id=UNK,
            bos_id=BOS,
            eos_id=EOS,
            hard_vocab_limit=False,  # small corpora (the toy task) may not fill the vocabulary
            user_defined_symbols=cfg.user_symbols,
            input_sentence_size=cfg.input_sentence_size,
            shuffle_input_sentence=True,
            minloglevel=2,
        )
    except RuntimeError as e:
        raise NMTError(f"tokenizer: SentencePiece training failed: {e}") from None
    return Tokenizer(model.getvalue())


class TokenizerPair:
    """The source and target tokenizers (the same object when the model is joint)."""

    def __init__(self, src: Tokenizer, tgt: Tokenizer):
        self.src, self.tgt = src, tgt

    @classmethod
    def train(cls, pairs: list[tuple[str, str]], cfg: TokenizerConfig) -> TokenizerPair:
        srcs = [s for s, _ in pairs]
        tgts = [t for _, t in pairs]
        if cfg.joint:
            joint = train_tokenizer(srcs + tgts, cfg)
            return cls(joint, joint)
        return cls(train_tokenizer(srcs, cfg), train_tokenizer(tgts, cfg))

    def to_state(self) -> dict[str, bytes]:
        return {"src": self.src.model_bytes, "tgt": self.tgt.model_bytes}

    @classmethod
    def from_state(cls, state: dict[str, bytes]) -> TokenizerPair:
        src = Tokenizer(state["src"])
        tgt = src if state["tgt"] == state["src"] else Tokenizer(state["tgt"])
        return cls(src, tgt)

    @property
    def joint(self) -> bool:
        return self.src.model_bytes == self.tgt.model_bytes

    def save(self, directory: Path) -> list[str]:
        """Write the model file(s) into `directory` (one joint file, or src + tgt); their names."""
        files = {JOINT_FILE: self.src} if self.joint else {SRC_FILE: self.src, TGT_FILE: self.tgt}
        for name, tok in files.items():
            atomic_write(Path(directory) / name, lambda f, tok=tok: f.write(tok.model_bytes))
        return list(files)

    @classmethod
    def load(cls, directory: Path) -> TokenizerPair:
        """The tokenizers `save` wrote into `directory`."""
        directory = Path(directory)
        if (directory / JOINT_FILE).is_file():
            joint = _model_file(directory / JOINT_FILE)
            return cls(joint, joint)
        missing = [n for n in (SRC_FILE, TGT_FILE) if not (directory / n).is_file()]
        if missing:
            raise NMTError(
                f"{directory}: no SentencePiece model ({JOINT_FILE}, or {SRC_FILE} and {TGT_FILE})"
            )
        return cls(_model_file(directory / SRC_FILE), _model_file(directory / TGT_FILE))


def _model_file(path: Path) -> Tokenizer:
    """The SentencePiece model in `path`; a file that is not one is one line naming it."""
    try:
        return Tokenizer(path.read_bytes())
    except RuntimeError:  # SentencePiece: "Internal: ... ParseFromArray(...)"
        raise NMTError(f"{path}: not a SentencePiece model (damaged?); get the model again") from None
