"""On a CUDA GPU (skipped without one; run on the device with `pytest -m cuda tests/test_cuda.py`):
the CUDA-graph training step gives the eager step's loss and gradients, mixed precision trains
like fp32, a resumed GPU run continues where it stopped, a shortlist decodes as on the CPU, and
a decoding step waits for the GPU once."""

import pytest
import torch

from nmt.checkpoint import model_weights
from nmt.data.batching import Batch
from nmt.rundir import CHECKPOINTS, LAST, read_metrics
from nmt.train.learner import Learner
from nmt.train.precision import Precision
from nmt.vocab import BOS, EOS, PAD
from tests.conftest import tiny_config
from tests.plugins import load_examples
from tests.train.test_trainer import nmt_train

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(
        not torch.cuda.is_available(), reason="needs a CUDA GPU (pytest -m cuda, on the device)"
    ),
]
V = 50
STATEFUL = load_examples()  # location-aware and coverage attention, plugins of docs/plugins


def random_batch(seed: int, rows: int = 5, src_len: int = 9, tgt_len: int = 7, device: str = "cuda") -> Batch:
    """Sentences of several lengths, none a multiple of 8: the graph pads all three sizes."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, src_len + 1, (rows,), generator=g)
    lengths[0] = src_len
    src = torch.randint(4, V, (rows, src_len), generator=g)
    src[torch.arange(src_len)[None, :] >= lengths[:, None]] = PAD
    src[torch.arange(rows), lengths - 1] = EOS
    tgt = torch.randint(4, V, (rows, tgt_len + 1), generator=g)
    tgt[:, 0] = BOS
    tgt[1, 3:] = PAD
    tgt_out = torch.cat([tgt[:, 2:], torch.full((rows, 1), PAD)], 1)
    tgt_out[torch.arange(rows), (tgt[:, 1:] != PAD).sum(1) - 1] = EOS
    return Batch(src, lengths, tgt[:, :-1], tgt_out).to(torch.device(device))


def loss_and_gradients(learner: Learner, batch: Batch) -> tuple[float, float, dict]:
    learner.model.train()
    objective, nll, _ = learner.objective(batch, 0, torch.Generator())
    objective.backward()
    grads = {n: p.grad.clone() for n, p in learner.model.named_parameters() if p.grad is not None}
    learner.optimizer.zero_grad(set_to_none=True)
    return float(objective.detach()), float(nll), grads


@pytest.mark.parametrize(
    "feeding,attention", [(True, "general"), (False, "general"), (False, "location"), (True, "coverage")]
)
def test_a_graphed_step_gives_the_eager_loss_and_gradients(feeding, attention):
    cuda = torch.device("cuda")
    results = []
    for graphs in (False, True):
        torch.manual_seed(0)
        cfg = tiny_config(
            model={"decoder": {"hidden": 32, "input_feeding": feeding}, "attention": {"type": attention}},
            train={"cuda_graphs": graphs, "precision": "fp32", "label_smoothing": 0.1},
        )
        learner = Learner(cfg, (V, V), cuda, Precision(cuda, "fp32"))
        assert (learner.objective.graphs is not None) == graphs
        # the first batch captures its bucket, the second (same bucket) replays it
        results.append([loss_and_gradients(learner, random_batch(seed)) for seed in (1, 2, 2)])
    for (eager_obj, eager_nll, eager_grads), (obj, nll, grads) in zip(*results, strict=True):
        assert obj == pytest.approx(eager_obj, rel=1e-5) and nll == pytest.approx(eager_nll, rel=1e-5)
        assert grads.keys() == eager_grads.keys()
        for name, grad in grads.items():
            torch.testing.assert_close(grad, eager_grads[name], rtol=1e-4, atol=1e-5, msg=name)


def final_loss(run) -> float:
    return [m["loss"] for m in read_metrics(run) if "loss" in m][-1]


def test_bf16_and_fp16_train_like_fp32_over_100_steps(toy_dir, tmp_path):
    common = ["train.device=cuda", "train.max_steps=100", "train.log_every=10", "train.valid_every=100"]
    common.append("train.teacher_forcing_ratio=1.0")  # the graphed path (scheduled sampling is eager)
    losses = {}
    for precision in ("fp32", "bf16", "fp16"):
        nmt_train(toy_dir, tmp_path / precision, *common, f"train.precision={precision}")
        rows = [m for m in read_metrics(tmp_path / precision) if "loss" in m]
        assert all(torch.isfinite(torch.tensor(m["loss"])) for m in rows), precision
        skipped = [m["skipped_steps"] for m in rows]  # fp16's overflow steps, read at log lines
        assert all(isinstance(n, int) for n in skipped) and skipped == sorted(skipped), skipped
        assert precision == "fp16" or skipped[-1] == 0, skipped
        losses[precision] = rows[-1]["loss"]
    assert losses["bf16"] == pytest.approx(losses["fp32"], rel=0.1), losses
    assert losses["fp16"] == pytest.approx(losses["fp32"], rel=0.1), losses


def test_a_resumed_gpu_run_continues_where_it_stopped(toy_dir, tmp_path):
    common = ["train.device=cuda", "train.log_every=5", "train.valid_every=10", "model.dropout=0.2"]
    common.append("train.teacher_forcing_ratio=1.0")  # the graphed path (scheduled sampling is eager)
    nmt_train(toy_dir, tmp_path / "whole", *common, "train.max_steps=20")
    nmt_train(toy_dir, tmp_path / "parts", *common, "train.max_steps=10")
    from nmt.cli import app
    from tests.train.test_trainer import runner, sets

    more = sets(["train.max_steps=20"])
    resumed = runner.invoke(app, ["train", "--resume", str(tmp_path / "parts"), *more, "-q"])
    assert resumed.exit_code == 0, resumed.output
    runs = [tmp_path / "whole", tmp_path / "parts"]
    whole, parts = ([(m["step"], m["loss"]) for m in read_metrics(run) if "loss" in m] for run in runs)
    assert parts == whole
    weights = [model_weights(torch.load(run / CHECKPOINTS / LAST, weights_only=False)) for run in runs]
    for name, tensor in weights[0].items():
        torch.testing.assert_close(weights[1][name], tensor, rtol=0, atol=0, msg=name)


def test_a_batch_on_the_gpu_goes_longest_first_with_the_loss_it_has_on_the_cpu():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    torch.manual_seed(0)
    cfg = tiny_config(train={"cuda_graphs": False, "precision": "fp32"})
    learner = Learner(cfg, (V, V), cpu, Precision(cpu))
    batch = random_batch(3, rows=6, device="cpu")
    on_gpu = batch.to(cuda)
    assert on_gpu.src_len.tolist() == sorted(batch.src_len.tolist(), reverse=True)
    assert on_gpu.n_tgt_tokens == batch.n_tgt_tokens
    expected = loss_and_gradients(learner, batch)[:2]
    learner.model.to(cuda)
    assert loss_and_gradients(learner, on_gpu)[:2] == pytest.approx(expected, rel=1e-5)


def test_a_shortlist_decodes_on_the_gpu_as_on_the_cpu(translating_model, toy_dir, tmp_path):
    """The shortlist's cut output layer, masks and kept log-probabilities live on the device, and
    its searches run over fixed rows, a CUDA graph per source bucket and width of its columns
    (`FixedVocabulary`): the CPU's translations but for a rare near tie."""
    from nmt import Translator
    from nmt.commands.shortlist import encoded_pairs
    from nmt.text.shortlist import Shortlist

    cpu = Translator.load(translating_model.last, device="cpu")
    pairs = encoded_pairs(toy_dir / "train.human", toy_dir / "train.iso", cpu.tok, "none", 10**6, 10**6)
    Shortlist.build(pairs, cpu.tok, best=3).save(tmp_path / "shortlist.npz")
    lines = (toy_dir / "test.human").read_text(encoding="utf-8").splitlines()
    for beam in (1, 3):
        on_cpu = cpu.shortlisted(tmp_path / "shortlist.npz").translate(lines, beam=beam)
        gpu = Translator.load(translating_model.last, device="cuda").shortlisted(tmp_path / "shortlist.npz")
        on_gpu = gpu.translate(lines, beam=beam, attention=False)
        assert sum(g.text == c.text for g, c in zip(on_gpu, on_cpu, strict=True)) >= 0.95 * len(lines)
        (pool,) = gpu.kept.kept.values()
        widths = [width for _, width, _ in pool.steps.graphs]  # per `rows.Shape`
        assert widths and all(widths), pool.steps.graphs


@pytest.mark.parametrize("beam", [1, 5])
def test_a_decoding_step_waits_for_the_gpu_once(translating_model, toy_dir, beam):
    """torch's sync debug mode counts what waits for the GPU: one read a step, and the order an
    encoder call sends for packing (tests/decode/test_host_traffic.py bounds the same on the CPU).
    The translations are the CPU's, but for a rare near tie."""
    import warnings

    from nmt import Translator
    from tests.decode.test_host_traffic import Counted

    lines = (toy_dir / "test.human").read_text(encoding="utf-8").splitlines()
    on_cpu = Translator.load(translating_model.last, device="cpu").translate(
        lines, beam=beam, attention=False
    )
    gpu = Translator.load(translating_model.last, device="cuda")
    gpu.translate(lines[:3], beam=beam, attention=False)  # cuBLAS and the allocators set up
    gpu.model = counted = Counted(gpu.model)
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            on_gpu = gpu.translate(lines, beam=beam, attention=False)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    syncs = [w for w in caught if "synchroniz" in str(w.message)]
    # The same maths on another device's kernels: a near tie may rarely go the other way.
    same = sum(g.text == c.text for g, c in zip(on_gpu, on_cpu, strict=True))
    assert same >= 0.95 * len(lines), (same, len(lines))
    assert counted.steps > 2 * counted.encodes
    assert len(syncs) <= counted.steps + 2 * counted.encodes, [str(w.message) for w in syncs[:5]]


def validation_scores(run, device: str) -> dict:
    """The validation scores of `run`'s last checkpoint, validated on `device` in fp32 with a
    decode batch of 8 (the CPU validates 8 sentences at a time, a GPU 512)."""
    from nmt.checkpoint import read_checkpoint
    from nmt.config import config_from_dict
    from nmt.train.trainer import Trainer

    checkpoint = read_checkpoint(run / CHECKPOINTS / LAST)
    raw = checkpoint["config"]
    raw["train"] |= {"device": device, "precision": "fp32"}
    raw["decode"] |= {"batch_size": 8}
    trainer = Trainer(config_from_dict(raw), run, quiet=True, resume=True, checkpoint=checkpoint)
    return trainer.evaluate_model()[0]


def test_validation_on_the_gpu_scores_what_it_scores_on_the_cpu(translating_model, tmp_path):
    """On a GPU, validation takes 512 sentences at once (loss batches and the search's pool)
    instead of the decode section's 8 here: the same maths, so the loss to float rounding and
    BLEU but for a rare near tie in the search."""
    import shutil

    from nmt.train.validation import GPU_WIDTH

    runs = {device: tmp_path / device for device in ("cpu", "cuda")}
    for run in runs.values():
        shutil.copytree(translating_model.run, run)
    on_cpu, on_gpu = (validation_scores(run, device) for device, run in runs.items())
    assert GPU_WIDTH > 60 > 8  # the 60 validation pairs: one batch on the GPU, eight on the CPU
    assert on_gpu["valid_loss"] == pytest.approx(on_cpu["valid_loss"], rel=1e-4)
    # 60 short validation sentences: one near tie decided the other way moves BLEU by about 1.
    assert on_gpu["valid_bleu"] == pytest.approx(on_cpu["valid_bleu"], abs=2.0)


@pytest.mark.parametrize("beam", [1, 5])
def test_fixed_rows_replayed_as_cuda_graphs_decode_as_the_eager_searches(
    translating_model, toy_dir, beam, monkeypatch
):
    """The GPU's default search (`nmt.decode.rows`): each source bucket's window captured once and
    replayed, sources long enough to change bucket mid-file, one wait for the GPU a window (and
    what an encoder call costs), and the translations of the continuous pool on the same GPU and
    of the CPU but for a rare near tie."""
    import warnings

    from nmt import Translator
    from nmt.decode import rows
    from nmt.model.seq2seq import Seq2Seq

    lines = (toy_dir / "test.human").read_text(encoding="utf-8").splitlines()
    lines += [" ".join(lines[i : i + 4]) for i in range(0, 40, 4)]  # longer sources: more buckets
    windows, encodes = [], []
    run, encode = rows.Steps.run, Seq2Seq.encode

    def watched(self, shape, window):
        run(self, shape, window)
        windows.append((shape, shape in (self.graphs or {})))

    monkeypatch.setattr(rows.Steps, "run", watched)
    monkeypatch.setattr(Seq2Seq, "encode", lambda *a: encodes.append(1) or encode(*a))
    gpu = Translator.load(translating_model.last, device="cuda", beam=beam)
    gpu.translate(lines[:3], attention=False)  # cuBLAS and the allocators set up
    windows.clear()
    encodes.clear()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            graphed = [t.text for t in gpu.translate(lines, attention=False)]
    finally:
        torch.cuda.set_sync_debug_mode("default")
    syncs = [w for w in caught if "synchroniz" in str(w.message)]
    assert len(syncs) <= len(windows) + 3 * len(encodes), [str(w.message) for w in syncs[:5]]
    shapes = {shape for shape, _ in windows}  # source buckets here (no shortlist, no prefixes)
    assert len(shapes) > 1, windows
    assert sum(replayed for _, replayed in windows) >= len(windows) - 2 * len(shapes), windows
    pooled = [t.text for t in gpu.translate(lines, attention=False, rows="pooled")]
    on_cpu = Translator.load(translating_model.last, device="cpu", beam=beam).translate(
        lines, attention=False
    )
    for other in (pooled, [t.text for t in on_cpu]):
        same = sum(g == o for g, o in zip(graphed, other, strict=True))
        assert same >= 0.95 * len(lines), (same, len(lines))


def test_kept_graphs_replay_in_later_searches_and_read_weights_changed_in_place(translating_model, toy_dir):
    """A translator's pools and graphs outlive a search (`rows.Kept`): a second search replays the
    graphs the first captured, and weights changed in place (an optimiser step between two
    validations) are what the replayed graphs read."""
    from nmt import Translator

    lines = (toy_dir / "test.human").read_text(encoding="utf-8").splitlines()
    lines += [" ".join(lines[i : i + 4]) for i in range(0, 40, 4)]
    gpu = Translator.load(translating_model.last, device="cuda", beam=5)
    first = [t.text for t in gpu.translate(lines, attention=False)]
    (pool,) = gpu.kept.kept.values()
    captured = dict(pool.steps.graphs)
    assert captured
    assert [t.text for t in gpu.translate(lines, attention=False)] == first
    assert list(gpu.kept.kept.values()) == [pool]
    assert all(pool.steps.graphs[bucket] is graph for bucket, graph in captured.items())
    with torch.no_grad():
        for parameter in gpu.model.parameters():
            parameter.mul_(1.5)
    changed = [t.text for t in gpu.translate(lines, attention=False)]
    pooled = [t.text for t in gpu.translate(lines, attention=False, rows="pooled")]
    assert changed != first
    assert sum(c == p for c, p in zip(changed, pooled, strict=True)) >= 0.95 * len(lines)


def test_n_best_and_prefixes_decode_over_fixed_rows_and_constraints_fall_back(
    translating_model, toy_dir, monkeypatch
):
    """On a GPU, n-best lists come from the fixed rows too (the continuous pool's but for rare
    near ties), target prefixes are forced there by the device, and a search with lexical
    constraints, which the host steers every step, goes to the continuous pool and meets them."""
    from tests.decode.test_rows import check_fixed_rows_routing

    check_fixed_rows_routing(translating_model, toy_dir, monkeypatch, "cuda")


@pytest.mark.parametrize("attention", STATEFUL)
@pytest.mark.parametrize("beam", [1, 3])
def test_a_stateful_plugin_decodes_over_graphed_fixed_rows_as_the_pool_does(attention, beam):
    """A stateful attention's state in the fixed rows' buffers, one a source bucket, replayed as
    CUDA graphs: the hypotheses of the continuous pool on the same GPU."""
    from nmt.config import DecodeConfig
    from nmt.decode import rows
    from nmt.decode.search import search
    from tests.decode.test_rows import mixed_sources
    from tests.decode.test_search import STYLES, make_model

    cuda = torch.device("cuda")
    model = make_model(STYLES["luong-if"], attention=attention).to(cuda)
    items, cfg = mixed_sources(40, 30, seed=4), DecodeConfig(beam=beam, rows="fixed")
    fits = lambda sentences, _: sentences <= 8  # noqa: E731
    kept = rows.Kept()
    for _ in range(2):  # the second search replays the graphs the first captured
        fixed = dict(search(model, items, cfg, fits, cuda, beam, attention=False, pools=kept.pools()))
    pooled = dict(search(model, items, cfg, fits, cuda, beam, attention=False))
    graphs = [len(pool.steps.graphs) for pool in kept.kept.values()]
    assert sum(graphs) > 1, graphs
    same = sum([h.tokens for h in fixed[k]] == [h.tokens for h in v] for k, v in pooled.items())
    assert same >= 0.95 * len(items), (same, len(items))
