"""Counts the work a PyTorch program does, op by op, whatever toolkit it is.

    python scripts/opcount.py --out counts.json --hidden 512 --vocab 4000 onmt.bin.train:main -config c.yaml

runs `main()` of the named module with the arguments after it as sys.argv, under a dispatch mode
that sees every ATen op the program runs (after autograd, so the backward's too), and writes:
- FLOPs (2 per multiply-add) of every matrix product: mm, addmm, bmm, baddbmm, oneDNN's linear,
  and oneDNN's LSTM layers forward and backward (nn.LSTM on the CPU), by op;
- bytes re-laid out: a weight oneDNN copies into its blocked layout before a product, which it
  does on every call for a weight that is not prepacked (a trained weight changes every step),
  and for the LSTM layers' weights on every call; a weight prepacked; an input oneDNN copies
  because it is a transposed view; a transposed tensor made contiguous;
- bytes touched: every tensor each op reads and writes (views excluded), a proxy for memory traffic;
- ops dispatched (Python's share of the time grows with them);
- decoder row-steps (rows of the recurrent product h @ W_hh of a `--hidden` LSTM) and
  output-layer rows (rows of products at least `--vocab` wide);
- the FLOPs so far at the end of every optimiser step (`step_flops`), so a caller who knows each
  step's source and target tokens can tell the encoder's share from the decoder's.
Why here and not in a profiler: these counts are the same on every machine, so a design decision
made on them holds on a slow CPU and a fast one. It imports only torch and the standard library,
so each peer's own virtualenv runs it (scripts/counts.py drives it).
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import sys
from collections import Counter
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

aten, mkldnn = torch.ops.aten, torch.ops.mkldnn


def _rows(x: torch.Tensor) -> int:
    return math.prod(x.shape[:-1])


def _bytes(x: torch.Tensor) -> int:
    return x.numel() * x.element_size()


def _mm(args) -> tuple[int, int, int, int]:  # (batch, rows, inner, columns)
    a, b = args[-2], args[-1]
    return 1, a.shape[0], a.shape[1], b.shape[1]


def _bmm(args) -> tuple[int, int, int, int]:
    a, b = args[-2], args[-1]
    return a.shape[0], a.shape[1], a.shape[2], b.shape[2]


def _onednn_linear(args) -> tuple[int, int, int, int]:
    x, weight = args[0], args[1]
    return 1, _rows(x), x.shape[-1], weight.shape[0]


PRODUCTS = {  # op -> its shape as (batch, rows, inner, columns)
    aten.mm.default: _mm,
    aten.addmm.default: _mm,
    aten.bmm.default: _bmm,
    aten.baddbmm.default: _bmm,
    mkldnn._linear_pointwise.default: _onednn_linear,
}
LSTM_LAYERS = {aten.mkldnn_rnn_layer.default: 1, aten.mkldnn_rnn_layer_backward.default: 2}


class Counts(TorchDispatchMode):
    """The counts of everything run inside it."""

    def __init__(self, hidden: int, vocab: int):
        super().__init__()
        self.hidden, self.vocab = hidden, vocab
        self.flops: Counter = Counter()
        self.touched: Counter = Counter()  # bytes by op
        self.relayouts: Counter = Counter()  # bytes by op
        self.ops = 0
        self.decoder_rows = self.output_rows = 0
        self.step_flops: list[int] = []

    def __enter__(self):
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self._hook = register_optimizer_step_post_hook(
            lambda *_: self.step_flops.append(sum(self.flops.values()))
        )
        return super().__enter__()

    def __exit__(self, *exc):
        self._hook.remove()
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.ops += 1
        if func in PRODUCTS:
            batch, rows, inner, columns = PRODUCTS[func](args)
            self.flops[str(func.overloadpacket)] += 2 * batch * rows * inner * columns
            if (columns, inner) == (4 * self.hidden, self.hidden):
                self.decoder_rows += batch * rows
            if columns >= self.vocab:
                self.output_rows += batch * rows
            if func is mkldnn._linear_pointwise.default:
                self.relayouts[str(func.overloadpacket)] += sum(
                    _bytes(a) for a in args[:2] if _plain_but_strided(a, a is args[1])
                )
        elif func is mkldnn._reorder_linear_weight.default or (
            func is aten.clone.default and not args[0].is_contiguous()
        ):  # a weight prepacked, or a transposed tensor made contiguous
            self.relayouts[str(func.overloadpacket)] += _bytes(args[0])
        elif func in LSTM_LAYERS:
            x, w_ih, w_hh = args[0], args[1], args[2]
            steps = _rows(x)  # time x batch
            self.flops[str(func.overloadpacket)] += (
                LSTM_LAYERS[func] * 2 * steps * w_ih.shape[0] * (w_ih.shape[1] + w_hh.shape[1])
            )
            self.relayouts[str(func.overloadpacket)] += _bytes(w_ih) + _bytes(w_hh)
        if not any(r.alias_info for r in func._schema.returns):  # views move nothing
            tensors = [a for a in (*args, *_flat(out)) if isinstance(a, torch.Tensor) and not a.is_mkldnn]
            self.touched[str(func.overloadpacket)] += sum(_bytes(t) for t in tensors)
        return out

    def report(self) -> dict:
        return {
            "flops": sum(self.flops.values()),
            "flops_by_op": dict(self.flops.most_common()),
            "relayout_bytes": sum(self.relayouts.values()),
            "relayout_bytes_by_op": dict(self.relayouts.most_common()),
            "touched_bytes": sum(self.touched.values()),
            "touched_bytes_by_op": dict(self.touched.most_common(12)),
            "ops": self.ops,
            "decoder_rows": self.decoder_rows,
            "output_rows": self.output_rows,
            "step_flops": self.step_flops,
        }


def _plain_but_strided(x: torch.Tensor, weight: bool) -> bool:
    """Whether oneDNN copies `x` into another layout first: a weight not prepacked, or an input
    that is not contiguous (a transposed view)."""
    return not x.is_mkldnn and (weight or not x.is_contiguous())


def _flat(out) -> list:
    return list(out) if isinstance(out, tuple | list) else [out]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="the JSON counts go here")
    parser.add_argument("--hidden", type=int, default=512, help="the decoder LSTM's size")
    parser.add_argument("--vocab", type=int, default=4000, help="products this wide are the output layer")
    parser.add_argument("entry", help="module:function to run, e.g. onmt.bin.train:main")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    opts = parser.parse_args()
    module, function = opts.entry.split(":")
    sys.argv = [opts.entry, *opts.args]
    counts = Counts(opts.hidden, opts.vocab)
    code = 0
    with counts:
        try:
            getattr(importlib.import_module(module), function)()
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    opts.out.write_text(json.dumps(counts.report(), indent=1) + "\n", encoding="utf-8")
    sys.exit(code)


if __name__ == "__main__":
    main()
