"""Target prefixes: every hypothesis starts with its sentence's prefix and goes on from there,
scored as the model scores the whole output; sentences without one, batched beside them, decode
as they do alone; a prefix with no room under the output cap is refused in one line."""

import pytest
import torch
from typer.testing import CliRunner

from nmt.cli import app
from nmt.config import DecodeConfig
from nmt.decode.sampling import sample
from nmt.decode.search import search
from nmt.errors import NMTError
from nmt.text.ranking import Source
from nmt.vocab import EOS, UNK
from tests.decode.test_search import STYLES, make_model, many_sources, teacher_forced_log_prob

PREFIXES = {0: [5, 6], 2: [7], 3: [UNK, 9, 4], 6: [11]}  # sentence -> prefix; the others have none


def decode(model, src, src_len, max_lens, cfg, prefixes, nbest=1, batch=4, engine=search):
    items = [
        Source(i, src[i, : int(src_len[i])].tolist(), m, prefixes.get(i, [])) for i, m in enumerate(max_lens)
    ]
    fits = lambda sentences, longest: sentences <= batch  # noqa: E731
    results = dict(engine(model, items, cfg, fits, torch.device("cpu"), nbest))
    return [results[i] for i in range(len(items))]


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("beam", [1, 3])
def test_hypotheses_start_with_the_prefix_and_the_others_are_untouched(style, beam):
    model = make_model(STYLES[style], dtype=torch.float64)
    src, src_len, max_lens = many_sources(count=9)
    cfg = DecodeConfig(beam=beam, allow_unk=False)  # a prefix may hold what the settings forbid
    plain = decode(model, src, src_len, max_lens, cfg, {}, nbest=beam)
    steered = decode(model, src, src_len, max_lens, cfg, PREFIXES, nbest=beam)
    for i, (alone, hyps) in enumerate(zip(plain, steered, strict=True)):
        prefix = PREFIXES.get(i, [])
        if not prefix:  # batched beside prefixed sentences, decoded as without any
            assert [h.tokens for h in hyps] == [h.tokens for h in alone]
            continue
        n = int(src_len[i])
        for h in hyps:
            assert h.tokens[: len(prefix)] == prefix and len(h.tokens) <= max_lens[i]
            assert EOS not in h.tokens[:-1] and UNK not in h.tokens[len(prefix) :]
            expected = teacher_forced_log_prob(model, src[i : i + 1, :n], src_len[i : i + 1], h.tokens)
            assert h.log_prob == pytest.approx(expected, abs=1e-6)  # the prefix's own probability counts


def test_sampling_goes_on_from_the_prefix_too():
    model = make_model(STYLES["luong"])
    src, src_len, max_lens = many_sources(count=9)
    cfg = DecodeConfig(sample=True, temperature=2.0, seed=3)
    drawn = decode(model, src, src_len, max_lens, cfg, PREFIXES, nbest=2, engine=sample)
    for i, prefix in PREFIXES.items():
        assert all(h.tokens[: len(prefix)] == prefix for h in drawn[i])


@pytest.fixture(scope="module")
def run(toy_dir, tmp_path_factory):
    from tests.test_end_to_end import train_toy

    return train_toy(toy_dir, tmp_path_factory.mktemp("prefix") / "run", "train.max_steps=20")


def test_the_api_and_the_command_line_take_prefixes(run, tmp_path):
    from nmt import Translator

    translator = Translator.load(run, device="cpu")
    lines = ["5. März 1990", "Montag, 12. April 2001", "3.4.1977", ""]
    prefixes = ["1990-", "", "1977-04", "2000"]
    plain = [t.text for t in translator.translate(lines)]
    steered = translator.translate(lines, prefixes=prefixes, beam=3, nbest=2)
    assert all(text.startswith(p) for p, t in zip(prefixes[:3], steered, strict=False) for text in t.texts)
    assert steered[1].texts[0] == translator.translate(lines[1], beam=3)[0].text and steered[3].text == ""
    source, prefix_file, out = tmp_path / "in.txt", tmp_path / "prefixes.txt", tmp_path / "out.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    prefix_file.write_text("\n".join(prefixes) + "\n", encoding="utf-8")
    result = CliRunner().invoke(
        app,
        [
            "translate",
            "-m",
            str(run),
            "-i",
            str(source),
            "-o",
            str(out),
            "--prefixes",
            str(prefix_file),
            "-q",
        ],
    )
    assert result.exit_code == 0, result.output
    written = out.read_text().splitlines()
    assert written[0].startswith("1990-") and written[2].startswith("1977-04") and written[1] == plain[1]


def test_bad_prefixes_are_refused_in_one_line(run, tmp_path):
    from nmt import Translator

    translator = Translator.load(run, device="cpu")
    with pytest.raises(
        NMTError, match=r"line 1: the prefix has \d+ pieces and the output cap for its source is 3"
    ):
        translator.translate("1.1.1990", prefixes="1990-01-01", max_len=3)
    with pytest.raises(NMTError, match="prefixes: 1 for 2 sentences"):
        translator.translate(["a", "b"], prefixes=["x"])
    source, prefix_file = tmp_path / "in.txt", tmp_path / "prefixes.txt"
    source.write_text("5. März 1990\n3.4.1977\n", encoding="utf-8")
    prefix_file.write_text("1990\n", encoding="utf-8")
    result = CliRunner().invoke(
        app, ["translate", "-m", str(run), "-i", str(source), "--prefixes", str(prefix_file), "-q"]
    )
    assert result.exit_code == 2 and "prefixes: more input lines than prefixes (at line 2)" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
