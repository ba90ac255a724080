"""`nmt translate` options on a briefly trained toy model."""

import itertools
import json
import shutil

import pytest
from typer.testing import CliRunner

from nmt.cli import app
from tests.test_end_to_end import train_toy

runner = CliRunner()


@pytest.fixture(scope="module")
def model(toy_dir, tmp_path_factory):
    return train_toy(
        toy_dir, tmp_path_factory.mktemp("translate") / "run", "train.max_steps=20", "data.max_len=12"
    )


@pytest.fixture()
def text(toy_dir):
    return (toy_dir / "test.human").read_text().splitlines()[:12]


def translate(*args, input=None):
    result = runner.invoke(app, ["translate", *map(str, args)], input=input)
    assert result.exit_code == 0, result.output
    return result


def test_nbest_tsv_lists_k_ranked_hypotheses(model, text):
    out = translate("-m", model, "--beam", 4, "--nbest", 3, input="\n".join(text) + "\n").stdout
    rows = [line.split("\t") for line in out.splitlines()]
    assert len(rows) == 3 * len(text)
    assert [(int(r[0]), int(r[1])) for r in rows[:3]] == [(1, 1), (1, 2), (1, 3)]
    first = [float(r[2]) for r in rows[:3]]
    assert first == sorted(first, reverse=True)


def test_scores_and_attention_jsonl(model, text, tmp_path):
    attention = tmp_path / "att.jsonl"
    out = translate("-m", model, "--scores", "--attention", attention, input="\n".join(text) + "\n").stdout
    scores = [float(line.split("\t")[0]) for line in out.splitlines()]
    assert len(scores) == len(text) and all(s <= 0 for s in scores)
    records = [json.loads(line) for line in attention.read_text().splitlines()]
    assert [r["index"] for r in records] == list(range(1, len(text) + 1))
    first = records[0]
    assert len(first["weights"]) == len(first["target"]) and len(first["weights"][0]) == len(first["source"])
    assert first["source"][-1] == "</s>"


def test_token_batches_give_the_same_output_as_sentence_batches(model, text):
    by_sentences = translate("-m", model, "--batch-size", 5, input="\n".join(text) + "\n").stdout
    by_tokens = translate(
        "-m", model, "--batch-type", "tokens", "--batch-size", 40, input="\n".join(text) + "\n"
    ).stdout
    assert by_sentences == by_tokens


def test_long_lines_are_truncated_with_a_warning(model):
    long = " ".join(["Montag, 5. März 2001"] * 6)
    result = translate("-m", model, input=f"{long}\n5.6.1990\n")
    assert len(result.stdout.splitlines()) == 2
    assert "1 input lines were longer" in result.stderr


def test_ensemble_of_two_checkpoints(model, text, tmp_path):
    out = translate("-m", model, "-m", model / "checkpoints" / "last.pt", input="\n".join(text) + "\n").stdout
    assert len(out.splitlines()) == len(text)


def test_ensemble_with_different_vocabularies_is_refused(model, toy_dir, tmp_path):
    other = train_toy(toy_dir, tmp_path / "other", "train.max_steps=1", "tokenizer.vocab_size=90")
    result = runner.invoke(app, ["translate", "-m", str(model), "-m", str(other)], input="x\n")
    assert result.exit_code == 2 and "share their vocabularies" in result.stderr


@pytest.mark.parametrize(
    "args,message",
    [
        (["--beam", "0"], "--beam"),
        (["--batch-type", "words"], "'words' is not one of 'sentences', 'tokens'"),
        (["--xyzzy"], "No such option: --xyzzy (see nmt translate --help)"),
        (["-i", "missing.txt"], "file not found"),
        *[
            (["--sample", "--temperature", t], f"decode.temperature: must be in [0.001, 100], got {t}")
            for t in ["0", "1e-45", "5e-324", "1e+308", "0.0009", "100.1", "inf", "nan"]
        ],
        (["--sample", "--top-p", "0"], "decode.top_p: must be in (0, 1], got 0"),
        (["--sample", "--top-p", "1.5"], "decode.top_p: must be in (0, 1], got 1.5"),
        (["--sample", "--top-k", "-1"], "decode.top_k: must be a finite number >= 0, got -1"),
        (["--top-k", "5"], "decode.top_k: applies only when sampling; set sample: true (--sample)"),
    ],
)
def test_bad_options_fail_cleanly(model, args, message):
    result = runner.invoke(app, ["translate", "-m", str(model), *args], input="x\n")
    assert result.exit_code == 2 and message in result.output
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_incompatible_checkpoint_version(model, tmp_path):
    import torch

    state = torch.load(model / "checkpoints" / "last.pt", weights_only=True)
    state["format_version"] = 99
    torch.save(state, tmp_path / "future.pt")
    result = runner.invoke(app, ["translate", "-m", str(tmp_path / "future.pt")], input="x\n")
    assert result.exit_code == 2 and "format 99 is not supported" in result.stderr


def test_non_utf8_input_names_the_line(model, tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"5.6.1990\n\xff\xfe\n")
    result = runner.invoke(app, ["translate", "-m", str(model), "-i", str(bad)])
    assert result.exit_code == 2 and "line 2 is not valid UTF-8" in result.stderr


def test_output_file_is_written_whole(model, text, tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("\n".join(text) + "\n")
    translate("-m", model, "-i", src, "-o", tmp_path / "out.txt")
    assert len((tmp_path / "out.txt").read_text().splitlines()) == len(text)
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    shutil.rmtree(tmp_path)


def test_nbest_keeps_empty_lines_in_place(model):
    out = translate("-m", model, "--beam", 3, "--nbest", 2, input="5.6.1990\n\n1. Mai 2000\n").stdout
    indices = [line.split("\t")[0] for line in out.splitlines()]
    assert indices == ["1", "1", "2", "3", "3"]


def test_non_utf8_on_stdin_is_one_clean_error(model):
    result = runner.invoke(app, ["translate", "-m", str(model)], input=b"5.6.1990\n\xff\n")
    assert result.exit_code == 2 and "<stdin>: line 2 is not valid UTF-8" in result.stderr


def test_sort_windows_and_the_reorder_buffer_keep_input_order(model, text, monkeypatch):
    # Input is sorted by length in windows; results leave in input order as their turn comes.
    lines = "\n".join([*text[:5], "", *text[5:]]) + "\n"
    whole = translate("-m", model, "--batch-size", 3, input=lines).stdout
    monkeypatch.setattr("nmt.text.translation.SORT_WINDOW", 4)
    windowed = translate("-m", model, "--batch-size", 3, input=lines).stdout
    assert windowed == whole and whole.splitlines()[5] == ""


def test_length_cap_options(model, text):
    from nmt import Translator

    # with EOS forbidden, every output runs to its cap: ratio x source length (EOS included) + add
    for ratio, add in [(0.5, 1), (1.25, 4)]:
        translator = Translator.load(
            model, device="cpu", min_len=99, max_len=99, max_len_ratio=ratio, max_len_add=add
        )
        for t in translator.translate(text):
            assert len(t.hypotheses[0].tokens) == int(ratio * len(t.src_pieces)) + add


@pytest.mark.parametrize("precision", ["int8", "bf16"])
def test_a_reduced_precision_decodes_close_to_fp32_and_says_so(model, text, precision):
    lines = "\n".join(text) + "\n"
    fp32 = translate("-m", model, "--scores", "--device", "cpu", "--precision", "fp32", input=lines)
    other = translate("-m", model, "--scores", "--device", "cpu", "--precision", precision, input=lines)
    assert "precision: fp32 (asked)" in fp32.stderr and f"precision: {precision} (asked" in other.stderr
    rows = [
        (a.split("\t"), b.split("\t"))
        for a, b in zip(fp32.stdout.splitlines(), other.stdout.splitlines(), strict=True)
    ]
    assert sum(a[1] == b[1] for a, b in rows) >= len(rows) // 2
    assert max(abs(float(a[0]) - float(b[0])) for a, b in rows if a[1] == b[1]) < 0.1


def test_the_old_quantize_flag_still_works_and_says_it_is_now_precision(model, text):
    lines = "\n".join(text[:5]) + "\n"
    old = translate("-m", model, "--device", "cpu", "--quantize", "int8", input=lines)
    new = translate("-m", model, "--device", "cpu", "--precision", "int8", input=lines)
    assert old.stdout == new.stdout
    assert old.stderr.count("--quantize int8 is now spelled --precision int8") == 1
    both = runner.invoke(
        app, ["translate", "-m", str(model), "--quantize", "int8", "--precision", "bf16"], input="x\n"
    )
    assert both.exit_code == 2 and "give --precision alone" in both.stderr


def test_the_api_takes_a_precision_and_warns_once_on_the_old_quantize(model):
    import torch
    import torch.ao.nn.quantized.dynamic as nnqd

    from nmt import Translator
    from nmt.decode.quantize import Int8Linear
    from nmt.machine import int8_activation_bits

    with pytest.warns(FutureWarning, match="quantize int8 is now spelled precision int8"):
        int8 = Translator.load(model, device="cpu", quantize="int8")
    assert int8.precision.name == "int8"
    replaced = (int8.model.encoder.rnn, int8.model.decoder.rnn, int8.model.decoder.output_layer)
    assert all(isinstance(layer, nnqd.LSTM) for layer in replaced[:2])
    output_layer = replaced[2]
    assert isinstance(output_layer, Int8Linear) and output_layer.reduce_range == (int8_activation_bits() < 8)
    assert output_layer.weight().qscheme() == torch.per_channel_affine
    bf16 = Translator.load(model, device="cpu", precision="bf16")
    assert bf16.precision.name == "bf16" and bf16.precision.why.startswith("precision: bf16 (asked")
    assert Translator.load(model, device="cpu").precision.why == "precision: fp32 (NMT_PRECISION=fp32)"


def test_a_precision_is_for_the_torch_engine(model):
    result = runner.invoke(
        app, ["translate", "-m", str(model), "--precision", "int8", "--engine", "onnx"], input="x\n"
    )
    assert result.exit_code == 2 and "--precision is for the torch engine" in result.stderr


def test_a_long_input_is_read_as_it_is_translated(model, text):
    from nmt.decode.translator import load_translator
    from nmt.text.translation import SORT_WINDOW

    pulled = []

    def endless():  # a file far longer than memory would hold, read line by line
        while True:
            pulled.append(1)
            yield text[len(pulled) % len(text)]

    results = load_translator([model], {}, "cpu").iter_translate(endless(), attention=False)
    for _ in range(3 * SORT_WINDOW):
        next(results)
    assert len(pulled) <= 4 * SORT_WINDOW  # the window being decoded and the next, never the whole input


def test_a_file_is_translated_in_order_with_its_empty_lines(model, text, tmp_path):
    lines = [*text[:5], "", *text[5:], "", ""]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    translate("-m", model, "-i", tmp_path / "in.txt", "-o", tmp_path / "out.txt", "--quiet")
    out = (tmp_path / "out.txt").read_text(encoding="utf-8").split("\n")[:-1]
    expected = translate("-m", model, input="\n".join(text) + "\n").stdout.splitlines()
    assert out == [*expected[:5], "", *expected[5:], "", ""]


def test_samples_follow_the_seed_and_top_k_one_is_greedy(model, text):
    lines = "\n".join(text) + "\n"
    drawn = translate("-m", model, "--sample", "--seed", 3, "--nbest", 4, "--temperature", 1.5, input=lines)
    rows = [line.split("\t") for line in drawn.stdout.splitlines()]
    assert [(int(r[0]), int(r[1])) for r in rows[:4]] == [(1, 1), (1, 2), (1, 3), (1, 4)]
    assert len(rows) == 4 * len(text)
    assert all(float(a[2]) >= float(b[2]) for a, b in itertools.pairwise(rows) if a[0] == b[0])  # best first
    again = translate("-m", model, "--sample", "--seed", 3, "--nbest", 4, "--temperature", 1.5, input=lines)
    assert again.stdout == drawn.stdout
    in_small_batches = translate(
        "-m",
        model,
        "--sample",
        "--seed",
        3,
        "--nbest",
        4,
        "--temperature",
        1.5,
        "--batch-size",
        3,
        input=lines,
    )
    assert in_small_batches.stdout == drawn.stdout
    other = translate("-m", model, "--sample", "--seed", 4, "--nbest", 4, "--temperature", 1.5, input=lines)
    assert other.stdout != drawn.stdout
    greedy = translate("-m", model, "--beam", 1, input=lines).stdout
    assert translate("-m", model, "--sample", "--top-k", 1, input=lines).stdout == greedy
    assert translate("-m", model, "--sample", "--top-p", 1e-6, input=lines).stdout == greedy


@pytest.mark.parametrize(
    "settings",
    [
        ["--temperature", "0.001"],
        ["--top-p", "1e-300"],
        ["--top-p", "5e-324"],
        ["--temperature", "0.001", "--top-p", "5e-324"],
        ["--temperature", "100"],
        ["--temperature", "100", "--top-p", "1e-300", "--top-k", "1000"],
    ],
)
def test_every_accepted_sampling_extreme_decodes(model, text, settings):
    """`--temperature 1e-45` and `--top-p 1e-300` were accepted and crashed decoding (NaN
    probabilities): the sharpest settings accepted are greedy search, the flattest decode."""
    lines = "\n".join(text) + "\n"
    result = translate("-m", model, "--sample", "--seed", 2, *settings, input=lines)
    assert len(result.stdout.splitlines()) == len(text) and "Traceback" not in result.output
    if "100" not in settings:
        assert result.stdout == translate("-m", model, "--beam", 1, input=lines).stdout


@pytest.mark.parametrize(
    ("outputs", "clash"),
    [
        (["-o", "X", "--attention", "X"], "--attention X: is also this command's -o"),
        (["-o", "X", "--attention", "./d/../X"], "--attention d/../X: is also this command's -o"),
        (["-o", "X", "--plot-attention", "X"], "--plot-attention X: is also this command's -o"),
        (
            ["--attention", "A", "--plot-attention", "A/"],
            "--plot-attention A: is also this command's --attention",
        ),
    ],
)
def test_two_outputs_on_one_path_are_refused_before_anything_is_written(
    model, text, tmp_path, monkeypatch, outputs, clash
):
    """`-o X --attention X` wrote both into X and kept one, with exit 0."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "d").mkdir()
    (tmp_path / "in.txt").write_text("\n".join(text) + "\n", encoding="utf-8")
    result = runner.invoke(app, ["translate", "-m", str(model), "-i", "in.txt", "-q", *outputs])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert result.stderr == f"error: {clash} output; give each output its own path\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d", "in.txt"]


def test_outputs_may_share_a_device(model, text):
    translate("-m", model, "-o", "/dev/null", "--attention", "/dev/null", input="\n".join(text) + "\n")
