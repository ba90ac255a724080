"""Encoder, bridges and decoders: shapes, packing, the parallel Luong path, and learning."""

import typing

import pytest
import torch
import torch.nn.functional as F

from nmt.config import AttentionType, BridgeType, DecoderStyle, ModelConfig, config_from_dict
from nmt.model.bridge import Bridge
from nmt.model.decoder import Decoder
from nmt.model.init import INITIALISERS
from nmt.model.seq2seq import Seq2Seq
from nmt.vocab import BOS, EOS, PAD

V = 24


def model_config(style="luong", attention="general", **decoder) -> ModelConfig:
    raw = {
        "data": {"src_lang": "a", "tgt_lang": "b"},
        "model": {
            "embedding": 16,
            "dropout": 0.0,
            "encoder": {"hidden": 16, "layers": 2, "dropout": 0.0},
            "decoder": {"style": style, "hidden": 32, "layers": 2, "dropout": 0.0, **decoder},
            "attention": {"type": attention},
        },
    }
    return config_from_dict(raw).model


def batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, V, (3, 6), generator=g)
    src_len = torch.tensor([6, 3, 1])
    src[torch.arange(6)[None, :] >= src_len[:, None]] = PAD
    tgt_in = torch.randint(4, V, (3, 5), generator=g)
    tgt_in[:, 0] = BOS
    return src, src_len, tgt_in


def test_registries_match_config_choices():
    assert set(Decoder.registry) == set(typing.get_args(DecoderStyle))
    assert set(Bridge.registry) == set(typing.get_args(BridgeType))
    assert set(INITIALISERS) == set(typing.get_args(typing.get_type_hints(ModelConfig)["init"]))


@pytest.mark.parametrize("scheme", sorted(INITIALISERS))
def test_initialisation_schemes(scheme):
    cfg = model_config()
    cfg.init, cfg.init_scale = scheme, 0.05
    torch.manual_seed(0)
    model = Seq2Seq(cfg, V, V)
    embed = model.decoder.embed.weight
    assert embed[PAD].abs().sum() == 0  # padding stays the zero vector
    largest = max(float(p.detach().abs().max()) for p in model.parameters())
    if scheme == "uniform":
        assert 0.045 < largest <= 0.05
    elif scheme == "xavier":
        assert all(p.abs().sum() == 0 for p in model.parameters() if p.dim() == 1)
    else:  # PyTorch's N(0, 1) embeddings
        assert 0.8 < float(embed[4:].detach().std()) < 1.2


def test_encoder_result_does_not_depend_on_padding_or_batch():
    torch.manual_seed(0)
    model = Seq2Seq(model_config(), V, V).eval()
    src, src_len, _ = batch()
    memory, (h, c) = model.encoder(src, src_len)
    alone, (h1, c1) = model.encoder(src[1:2, :3], src_len[1:2])
    torch.testing.assert_close(memory[1, :3], alone[0])
    assert (memory[1, 3:] == 0).all()
    torch.testing.assert_close(h[:, :, 1], h1[:, :, 0])  # backward state read real words only
    torch.testing.assert_close(c[:, :, 1], c1[:, :, 0])


@pytest.mark.parametrize("bridge", sorted(Bridge.registry))
def test_bridges_give_one_state_per_decoder_layer(bridge):
    h = torch.randn(2, 2, 3, 16)  # (L_enc, directions, B, H)
    c = torch.randn(2, 2, 3, 16)
    h0, c0 = Bridge.build(bridge, 16, 32, 2)(h, c)
    assert h0.shape == c0.shape == (2, 3, 32)
    if bridge == "last":
        torch.testing.assert_close(h0[1, 0], torch.cat([h[1, 0, 0], h[1, 1, 0]]))
    if bridge == "backward":
        assert (c0 == 0).all()


@pytest.mark.parametrize("attention", sorted(typing.get_args(AttentionType)))
def test_parallel_luong_path_equals_stepping(attention):
    torch.manual_seed(0)
    model = Seq2Seq(model_config("luong", attention), V, V).eval()
    src, src_len, tgt_in = batch()
    mem, state = model.encode(src, src_len)
    assert model.decoder.parallel
    parallel_logits, parallel_weights = model.decoder(tgt_in, state, mem)
    stepped_logits, stepped_weights = [], []
    for t in range(tgt_in.size(1)):
        logits, state, weights = model.step(tgt_in[:, t], state, mem, torch.full((tgt_in.size(0),), t))
        stepped_logits.append(logits)
        stepped_weights.append(weights)
    stepped_logits, stepped_weights = torch.stack(stepped_logits, 1), torch.stack(stepped_weights, 1)
    torch.testing.assert_close(parallel_logits, stepped_logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(parallel_weights, stepped_weights, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "style,feeding",
    [("luong", False), ("luong", True), ("bahdanau", False)],
    ids=["luong", "luong-if", "bahdanau"],
)
def test_a_sentence_decodes_the_same_alone_and_in_a_padded_batch(style, feeding):
    torch.manual_seed(0)
    extra = {"input_feeding": True} if feeding else {}
    model = Seq2Seq(model_config(style, "bahdanau", **extra), V, V).eval()
    src, src_len, tgt_in = batch()
    logits, weights = model(src, src_len, tgt_in)
    alone_logits, alone_weights = model(src[1:2, :3], src_len[1:2], tgt_in[1:2])
    torch.testing.assert_close(logits[1], alone_logits[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(weights[1, :, :3], alone_weights[0], atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("feeding", [False, True], ids=["luong", "luong-if"])
def test_luong_concat_is_the_additive_score_in_luong_order(feeding):
    """v^T tanh(W[h_t; h_s]) = v^T tanh(W_q h_t + W_k h_s): Luong's concat and Bahdanau's score
    (without its bias, the default) in a Luong decoder are one model, weight for weight, so the
    study lists them as one system."""
    torch.manual_seed(0)
    additive = Seq2Seq(model_config("luong", "bahdanau", input_feeding=feeding), V, V).eval()
    concat = Seq2Seq(model_config("luong", "concat", input_feeding=feeding), V, V).eval()
    concat.load_state_dict(additive.state_dict())  # the same parameters, names and shapes
    src, src_len, tgt_in = batch()
    for got, want in zip(concat(src, src_len, tgt_in), additive(src, src_len, tgt_in), strict=True):
        torch.testing.assert_close(got, want, atol=0, rtol=0)


def test_tied_embeddings_share_one_tensor():
    cfg = model_config("bahdanau", "bahdanau")
    cfg.tie_embeddings = True
    model = Seq2Seq(cfg, V, V)
    assert model.decoder.output_layer.weight is model.decoder.embed.weight


def test_bahdanau_decoder_attends_with_the_previous_state():
    """Changing the target token at step t must not change the attention at step t (it uses
    s_{t-1}), while in Luong order it does (it uses h_t, which has read y_{t-1})."""
    torch.manual_seed(0)
    src, src_len, tgt_in = batch()
    other = tgt_in.clone()
    other[:, 2] = (other[:, 2] + 1 - 4) % (V - 4) + 4
    for style, same in (("bahdanau", True), ("luong", False)):
        cfg = model_config(style, "bahdanau")
        cfg.init = "torch"  # weights large enough that one token moves the attention visibly
        model = Seq2Seq(cfg, V, V).eval()
        _, w1 = model(src, src_len, tgt_in)
        _, w2 = model(src, src_len, other)
        assert torch.equal(w1[:, :2], w2[:, :2])
        assert not torch.allclose(w1[:, 3], w2[:, 3])
        assert torch.equal(w1[:, 2], w2[:, 2]) is same


@pytest.mark.parametrize(
    "style,feeding", [("luong", True), ("bahdanau", False)], ids=["luong-if", "bahdanau"]
)
def test_teacher_forcing_equals_stepping_for_recurrent_decoders(style, feeding):
    """The training path applies the output layer once after the loop; it must equal step()."""
    torch.manual_seed(0)
    extra = {"input_feeding": True} if feeding else {}
    model = Seq2Seq(model_config(style, "general", **extra), V, V).eval()
    src, src_len, tgt_in = batch()
    mem, state = model.encode(src, src_len)
    assert not model.decoder.parallel
    logits, _ = model.decoder(tgt_in, state, mem)
    for t in range(tgt_in.size(1)):
        step_logits, state, _ = model.step(tgt_in[:, t], state, mem, torch.full((tgt_in.size(0),), t))
        torch.testing.assert_close(logits[:, t], step_logits, atol=1e-5, rtol=1e-5)


CASES = [("luong", a, False) for a in sorted(typing.get_args(AttentionType))] + [
    ("luong", "general", True),
    ("bahdanau", "bahdanau", False),
    ("bahdanau", "local_p", False),
    ("bahdanau", "multihead", False),
]


@pytest.mark.parametrize("style,attention,feeding", CASES, ids=[f"{s}-{a}{'-if' * f}" for s, a, f in CASES])
def test_a_tiny_model_overfits_a_handful_of_pairs(style, attention, feeding):
    torch.manual_seed(0)
    extra = {"input_feeding": True} if feeding else {}
    raw = model_config(style, attention, layers=1, **extra)
    raw.encoder.layers = 1
    model = Seq2Seq(raw, V, V)
    g = torch.Generator().manual_seed(1)
    src = torch.randint(4, V, (8, 5), generator=g)
    src[:, -1] = EOS
    tgt = torch.cat([src[:, :4].flip(1), torch.full((8, 1), EOS)], 1)  # reverse the words
    tgt_in = torch.cat([torch.full((8, 1), BOS), tgt[:, :-1]], 1)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(300):
        logits, _ = model(src, torch.full((8,), 5), tgt_in)
        loss = F.cross_entropy(logits.flatten(0, 1), tgt.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.05


def test_a_search_memory_moves_rows_in_place_and_regrows_only_when_outgrown():
    from nmt.decode.search import Compaction
    from nmt.model.decoder import Memory

    lengths = torch.tensor([3, 9, 5, 2])
    mask = torch.arange(9)[None, :] < lengths[:, None]
    memory = torch.randn(4, 9, 4) * mask[..., None]
    whole = Memory(memory.clone(), mask.clone(), memory * 2)
    packed = Compaction.of([0, 2, 3], torch.device("cpu"))  # the longest sentence has finished
    assert packed.order == [0, 3, 2]
    kept = packed.memory(whole)
    assert kept.memory.data_ptr() == whole.memory.data_ptr()  # moved in place, not copied
    assert torch.equal(kept.memory, memory[[0, 3, 2]]) and torch.equal(kept.mask, mask[[0, 3, 2]])
    assert torch.equal(kept.keys, 2 * memory[[0, 3, 2]])

    joined = kept.join(Memory(memory[1:2, :4], mask[1:2, :4], 2 * memory[1:2, :4]), 5)  # a short one
    assert joined.memory.data_ptr() == whole.memory.data_ptr()  # into the spare row
    new_mask = torch.cat([mask[[0, 3, 2]], (torch.arange(9) < 4)[None]])
    assert torch.equal(joined.mask, new_mask)
    assert torch.equal(joined.memory[3], torch.cat([memory[1, :4], torch.zeros(5, 4)]))

    grown = joined.join(Memory(memory[1:2], mask[1:2], 2 * memory[1:2]), 5)  # more rows than room
    assert grown.memory.shape == (5, 12, 4)  # the length rounded up to a multiple of 4
    assert torch.equal(grown.mask[:, :9], torch.cat([new_mask, mask[1:2]]))
    assert not grown.mask[:, 9:].any() and not grown.memory[:, 9:].any()
    assert torch.equal(grown.keys[:4, :9], 2 * joined.memory)


@pytest.mark.parametrize(
    "style,feeding", [("luong", True), ("bahdanau", False)], ids=["luong-if", "bahdanau"]
)
def test_rows_whose_target_ended_leave_teacher_forcing_with_the_same_results(style, feeding):
    """A CPU batch shortest target first (as training's are) runs each step on the rows still
    writing only; the real positions' features and every gradient equal those of the same
    batch in another order, which runs every row at every step."""
    from nmt.model.decoder import _live_rows

    torch.manual_seed(0)
    extra = {"input_feeding": True} if feeding else {}
    model = Seq2Seq(model_config(style, "general", **extra), V, V)
    src, src_len, tgt_in = batch()
    tgt_in[0, 2:], tgt_in[1, 4:] = PAD, PAD  # targets of 2, 4 and 5 positions: shortest first
    assert _live_rows(tgt_in) == [3, 3, 2, 2, 1]
    assert _live_rows(tgt_in.flip(0)) == [3] * 5  # longest first: every row every step
    real = tgt_in != PAD
    results = []
    for order in (torch.arange(3), torch.tensor([2, 1, 0])):
        model.zero_grad()
        features, weights = model.features(src[order], src_len[order], tgt_in[order])
        back = torch.argsort(order)
        features, weights = features[back], weights[back]
        (features[real] ** 2).sum().backward()
        results.append(
            (
                features[real],
                weights[real],
                [p.grad.clone() for p in model.parameters() if p.grad is not None],
            )
        )
    (f1, w1, g1), (f2, w2, g2) = results
    torch.testing.assert_close(f1, f2, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(w1, w2, atol=1e-6, rtol=1e-5)
    for a, b in zip(g1, g2, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_a_model_built_for_loading_takes_every_weight_and_keeps_its_ties():
    from nmt.checkpoint import unfilled_model

    tied = {"embedding": 16, "tie_embeddings": True, "decoder": {"style": "bahdanau"}}
    model = tied | {"attention": {"type": "bahdanau"}}
    cfg = config_from_dict({"data": {"src_lang": "a", "tgt_lang": "b"}, "model": model}).model
    torch.manual_seed(0)
    trained = Seq2Seq(cfg, V, V).eval()
    loaded = unfilled_model(cfg, V, V)
    loaded.load_state_dict(trained.state_dict())
    loaded.eval()
    assert loaded.decoder.output_layer.weight is loaded.decoder.embed.weight
    src, src_len, tgt_in = batch()
    assert torch.equal(loaded(src, src_len, tgt_in)[0], trained(src, src_len, tgt_in)[0])
    torch.manual_seed(0)
    drawn_again = Seq2Seq(cfg, V, V).decoder.embed.weight  # a model to train draws as before
    assert torch.equal(drawn_again, trained.decoder.embed.weight)


def test_a_model_with_a_buffer_no_state_dict_fills_is_built_with_its_values(monkeypatch):
    from nmt import checkpoint

    class WithConstant(Seq2Seq):
        def __init__(self, *args):
            super().__init__(*args)
            self.register_buffer("constant", torch.ones(3), persistent=False)

    monkeypatch.setattr(checkpoint, "Seq2Seq", WithConstant)
    assert torch.equal(checkpoint.unfilled_model(model_config(), V, V).constant, torch.ones(3))
