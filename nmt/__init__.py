"""nmt: attentional LSTM encoder-decoder translation, from data to BLEU.

The Python API (docs/api.md)::

    from nmt import Translator
    translator = Translator.load("runs/toy")
    translator.translate(["Sonntag, 12. März 1989"], beam=5)[0].text

    nmt.train("toy-luong.yaml", overrides={"data.dir": "data/toy"}, output="runs/toy")
    nmt.evaluate(hypotheses, references).systems[0].scores["BLEU"]

Names load lazily (module `__getattr__`), so `import nmt` and `nmt --help` never import torch.
"""

from __future__ import annotations

import importlib

# `import nmt` runs before `nmt` can handle Ctrl-C (nmt/__main__.py), so it imports next to
# nothing: not typing (type checkers read any TYPE_CHECKING as true), nor the version, whose
# metadata lookup took 50 ms
TYPE_CHECKING = False
# public name -> the module that defines it ("" : the name is a callable subpackage)
_EXPORTS = {
    "__version__": "nmt.version",
    "Translator": "nmt.decode.translator",
    "Translation": "nmt.decode.translator",
    "WordAttention": "nmt.decode.translator",
    "ModelInfo": "nmt.decode.translator",
    "NMTError": "nmt.errors",
    "train": "",
    "evaluate": "",
}
__all__ = [
    "ModelInfo",
    "NMTError",
    "Translation",
    "Translator",
    "WordAttention",
    "__version__",
    "evaluate",
    "train",
]

if TYPE_CHECKING:
    from nmt import evaluate, train
    from nmt.decode.translator import ModelInfo, Translation, Translator, WordAttention
    from nmt.errors import NMTError
    from nmt.version import __version__


def __getattr__(name: str) -> object:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'nmt' has no attribute {name!r}")
    if not _EXPORTS[name]:
        return importlib.import_module(f"nmt.{name}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
