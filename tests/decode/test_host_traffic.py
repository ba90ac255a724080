"""A decoding step reads the device once: on a GPU, every read of a tensor's values (and every
copy to it from ordinary memory) waits for the queued kernels, and a beam step used to make 13
of them (docs/notes/performance-history.md, 17). Counted on the CPU by `HostTraffic`; the same
bound is checked on a GPU in tests/test_cuda.py."""

import pytest
import torch

from nmt.config import DecodeConfig
from nmt.decode.ensemble import Ensemble
from nmt.decode.sampling import sample
from nmt.decode.search import search
from nmt.text.ranking import Source
from nmt.vocab import EOS
from tests.decode.test_search import STYLES, make_model, many_sources
from tests.host_traffic import HostTraffic

# An encoder call: packing reads the lengths (already on the host: no wait) twice and sends the
# order it sorted the sentences in (one wait).
PER_ENCODE = 3


class Counted:
    """A `StepModel` that counts its encoder calls and decoder steps."""

    def __init__(self, model):
        self.model, self.encodes, self.steps = model, 0, 0

    def encode(self, src, src_len):
        self.encodes += 1
        return self.model.encode(src, src_len)

    def step(self, *args):
        self.steps += 1
        return self.model.step(*args)


def lasting(decoder: dict, seed: int = 0):
    """`make_model`'s model with EOS less likely, so that sentences last several steps."""
    model = make_model(decoder, seed)
    with torch.no_grad():
        model.decoder.output_layer.bias[EOS] -= 2.5
    return model


def traffic(model, cfg: DecodeConfig, nbest: int = 1, attention: bool = False, draw: bool = False):
    src, src_len, max_lens = many_sources(count=30)
    items = [Source(i, src[i, : int(src_len[i])].tolist(), m) for i, m in enumerate(max_lens)]
    counted = Counted(model)
    decode = sample if draw else search
    with HostTraffic() as seen:
        results = list(
            decode(counted, items, cfg, lambda rows, _: rows <= 8, torch.device("cpu"), nbest, attention)
        )
    assert len(results) == len(items)
    return seen, counted


@pytest.mark.parametrize("style", sorted(STYLES))
@pytest.mark.parametrize("beam", [1, 4])
def test_a_step_reads_the_device_once(style, beam):
    seen, counted = traffic(lasting(STYLES[style]), DecodeConfig(beam=beam, alpha=0.6))
    assert counted.steps > 2 * counted.encodes  # sentences joined mid-search, sentences left
    assert seen.waits <= counted.steps + PER_ENCODE * counted.encodes, seen.calls


@pytest.mark.parametrize("case", ["nbest", "attention", "ensemble", "sampling"])
def test_the_other_searches_read_little_more(case):
    """n-best lists and ensembles take the same path; kept attention is a second read a step."""
    model = lasting(STYLES["luong-if"])
    cfg = DecodeConfig(beam=3, sample=case == "sampling")
    if case == "ensemble":
        model = Ensemble([model, lasting(STYLES["luong-if"], seed=1)])
    nbest = 2 if case in ("nbest", "sampling") else 1
    seen, counted = traffic(model, cfg, nbest, attention=case == "attention", draw=case == "sampling")
    per_step = 2 if case == "attention" else 1
    members = 2 if case == "ensemble" else 1
    assert seen.waits <= per_step * counted.steps + PER_ENCODE * members * counted.encodes, seen.calls


@pytest.mark.parametrize("beam", [1, 4])
def test_the_lengths_the_search_hands_the_memory_are_the_masks(beam, monkeypatch):
    """The memory no longer reads its mask for the longest source: the search says it, and says
    what the mask says (else a memory is cut short, or kept too long)."""
    from nmt.model.decoder import Memory

    rows, join, checked = Memory.rows, Memory.join, []

    def checked_rows(self, index, length):
        assert length == int(self.mask[index].sum(1).max())
        checked.append("rows")
        return rows(self, index, length)

    def checked_join(self, other, longest):
        assert longest == int(self.mask.sum(1).max())
        checked.append("join")
        return join(self, other, longest)

    monkeypatch.setattr(Memory, "rows", checked_rows)
    monkeypatch.setattr(Memory, "join", checked_join)
    traffic(lasting(STYLES["luong-if"]), DecodeConfig(beam=beam))
    assert checked.count("join") > 3 and checked.count("rows") > 3
