"""Evaluation: sacreBLEU scores, length buckets, paired bootstrap significance, reports.

The package is also callable from Python: `nmt.evaluate(hypotheses, references)` scores one
system (a list of lines) or several ({name: lines}) and returns the `Report` that `nmt eval`
prints. A module class with `__call__` lets the one name be both this package and that function;
importing it stays light (sacrebleu loads on the first call).
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nmt.evaluate.scoring import EvalOptions, Report


class _CallablePackage(types.ModuleType):
    def __call__(
        self,
        hypotheses: list[str] | dict[str, list[str]],
        references: list[str] | list[list[str]],
        options: EvalOptions | None = None,
        sources: list[str] | None = None,
    ) -> Report:
        """BLEU, chrF, TER, exact match and scores by length of `hypotheses` against
        `references` (one list of lines, or several reference sets); `options` as `nmt eval`'s
        (`nmt.evaluate.scoring.EvalOptions`), `sources` only for buckets by source length."""
        from nmt.evaluate.scoring import evaluate

        systems = {"hypotheses": hypotheses} if isinstance(hypotheses, list) else hypotheses
        refs = [references] if references and isinstance(references[0], str) else references
        return evaluate(systems, refs, options, sources)


sys.modules[__name__].__class__ = _CallablePackage
