"""scripts/bench.py's FLOP count, checked against torch's own FlopCounterMode. With oneDNN off,
nn.LSTM runs as plain matrix products that the counter sees, so the two must agree."""

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from nmt.config import config_from_dict
from nmt.data.batching import Batch
from nmt.model.seq2seq import Seq2Seq
from nmt.vocab import BOS, PAD
from tests.scripts import load_script


def load_bench():
    return load_script("bench")


@pytest.mark.filterwarnings("ignore:TF32 acceleration")  # oneDNN's flag toggle, irrelevant here
@pytest.mark.parametrize(
    "style,attention,feeding",
    [
        ("luong", "general", True),
        ("luong", "general", False),
        ("luong", "dot", False),
        ("bahdanau", "bahdanau", False),
    ],
)
def test_forward_flops_match_torch_flop_counter(style, attention, feeding):
    bench = load_bench()
    bridge = "backward" if style == "bahdanau" else "linear"
    cfg = config_from_dict(
        {
            "data": {"src_lang": "a", "tgt_lang": "b"},
            "tokenizer": {"vocab_size": 50},
            "model": {
                "embedding": 8,
                "dropout": 0.0,
                "encoder": {"hidden": 6},
                "decoder": {"style": style, "hidden": 12, "input_feeding": feeding, "bridge": bridge},
                "attention": {"type": attention},
            },
        }
    )
    g = torch.Generator().manual_seed(0)
    src_len = torch.tensor([7, 4, 2])
    src = torch.randint(4, 50, (3, 7), generator=g)
    src[torch.arange(7)[None] >= src_len[:, None]] = PAD
    tgt_in = torch.randint(4, 50, (3, 5), generator=g)
    tgt_in[:, 0] = BOS
    batch = Batch(src, src_len, tgt_in, tgt_in.roll(-1, 1))
    model = Seq2Seq(cfg.model, 50, 50)
    with torch.backends.mkldnn.flags(enabled=False), FlopCounterMode(display=False) as forward:
        logits, _ = model(batch.src, batch.src_len, batch.tgt_in)
    assert forward.get_total_flops() == pytest.approx(bench.forward_flops(cfg, batch), rel=0.02)
    with torch.backends.mkldnn.flags(enabled=False), FlopCounterMode(display=False) as both:
        logits, _ = model(batch.src, batch.src_len, batch.tgt_in)
        F.cross_entropy(logits.flatten(0, 1), batch.tgt_out.flatten()).backward()
    assert both.get_total_flops() == pytest.approx(3 * bench.forward_flops(cfg, batch), rel=0.05)
