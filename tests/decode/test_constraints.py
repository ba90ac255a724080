"""Lexical constraints (dynamic beam allocation, Post & Vilar 2018): every hypothesis contains
each phrase to include and none to avoid, scored as the model scores it; sentences without
constraints, batched beside constrained ones, decode as they do alone; a sentence whose phrases
cannot all fit under its length cap gets the hypothesis meeting the most, and says so."""

import json

import pytest
import torch
from typer.testing import CliRunner

from nmt.cli import app
from nmt.config import DecodeConfig
from nmt.decode.search import search
from nmt.text.constraints import Candidate, Progress, allocate, banned
from nmt.text.ranking import Source
from nmt.vocab import EOS
from tests.decode.test_search import STYLES, make_model, many_sources, teacher_forced_log_prob

# sentence -> (phrases to include, phrases to avoid); the others have none
STEERED = {0: ([[5, 6]], []), 2: ([[7], [9, 4, 8]], []), 3: ([], [[10], [11, 12]]), 6: ([[11]], [[5]])}


def contains(tokens: list[int], phrase: list[int]) -> bool:
    return any(tokens[i : i + len(phrase)] == phrase for i in range(len(tokens) - len(phrase) + 1))


def decode(model, src, src_len, max_lens, cfg, steered, nbest=1, batch=4):
    items = [
        Source(i, src[i, : int(src_len[i])].tolist(), m, [], *steered.get(i, ([], [])))
        for i, m in enumerate(max_lens)
    ]
    fits = lambda sentences, longest: sentences <= batch  # noqa: E731
    results = dict(search(model, items, cfg, fits, torch.device("cpu"), nbest))
    return [results[i] for i in range(len(items))]


@pytest.mark.parametrize("style", STYLES)
def test_every_hypothesis_holds_its_phrases_and_the_others_are_untouched(style):
    model = make_model(STYLES[style], dtype=torch.float64)
    src, src_len, max_lens = many_sources(count=9)
    max_lens = [m + 4 for m in max_lens]
    cfg = DecodeConfig(beam=4)
    plain = decode(model, src, src_len, max_lens, cfg, {}, nbest=3)
    steered = decode(model, src, src_len, max_lens, cfg, STEERED, nbest=3)
    for i, (alone, hyps) in enumerate(zip(plain, steered, strict=True)):
        if i not in STEERED:  # batched beside constrained sentences, decoded as without any
            assert [h.tokens for h in hyps] == [h.tokens for h in alone]
            continue
        include, avoid = STEERED[i]
        n = int(src_len[i])
        for h in hyps:
            assert h.unmet == 0 and all(contains(h.tokens, p) for p in include)
            assert not any(contains(h.tokens, p) for p in avoid)
            assert h.tokens[-1] == EOS and len(h.tokens) <= max_lens[i]
            expected = teacher_forced_log_prob(model, src[i : i + 1, :n], src_len[i : i + 1], h.tokens)
            assert h.log_prob == pytest.approx(expected, abs=1e-6)


def test_phrases_that_cannot_all_fit_give_the_hypothesis_meeting_the_most():
    model = make_model(STYLES["luong"], dtype=torch.float64)
    src, src_len, _ = many_sources(count=2)
    steered = {0: ([[5, 6, 7], [8, 9, 10]], [])}  # six pieces under a cap of five
    (hyp, *_), _ = decode(model, src, src_len, [5, 5], DecodeConfig(beam=4), steered, nbest=1)
    assert hyp.unmet == 1 and (contains(hyp.tokens, [5, 6, 7]) or contains(hyp.tokens, [8, 9, 10]))


def test_progress_through_a_phrase_counts_only_while_it_goes_on():
    include = [[5, 6, 7], [9]]
    p = Progress.start(include)
    assert p.wanted(include) == [5, 9] and p.unmet == 2
    p = p.advance(5, include).advance(6, include)
    assert p.tokens_met(include) == 2 and p.wanted(include) == [7]
    assert p.advance(4, include).tokens_met(include) == 0  # abandoned half-way: counts for nothing
    assert p.advance(9, include) == Progress((False, True))  # another phrase begun (and done) instead
    done = p.advance(7, include).advance(9, include)
    assert done.unmet == 0 and done.tokens_met(include) == 4 and done.wanted(include) == []


def test_the_banks_share_the_beam_furthest_first():
    include = [[5, 6]]
    start, half, whole = Progress.start(include), Progress((False,), (0, 1)), Progress((True,))
    offered = [Candidate(-1.0, 0, 3, start), Candidate(-2.0, 0, 4, start), Candidate(-3.0, 1, 8, start)]
    offered += [Candidate(-9.0, 1, 5, half), Candidate(-7.0, 2, 6, whole)]
    chosen = allocate(offered, 3, include)
    assert [c.token for c in chosen] == [6, 5, 3]  # one place for each bank, however poor its score
    assert [c.token for c in allocate(offered, 5, include)] == [6, 5, 3, 4, 8]


def test_a_phrase_to_avoid_bans_its_last_token_after_the_rest():
    assert banned([1, 2, 3], [[3, 4], [2, 4], [9]]) == [4, 9]
    assert banned([], [[3, 4], [9]]) == [9]


@pytest.fixture(scope="module")
def run(toy_dir, tmp_path_factory):
    from tests.test_end_to_end import train_toy

    return train_toy(toy_dir, tmp_path_factory.mktemp("constraints") / "run", "train.max_steps=20")


LINES = ["5. März 1990", "Montag, 12. April 2001", "3.4.1977", ""]
GUIDES = [{"constraints": ["1990"]}, {}, {"constraints": ["04"], "avoid": ["1977"]}, {}]


def test_the_api_and_the_command_line_take_constraints(run, tmp_path):
    from nmt import Translator

    translator = Translator.load(run, device="cpu")
    plain = translator.translate(LINES, beam=3)
    steered = translator.translate(LINES, constraints=GUIDES, beam=3, nbest=2)
    assert "1990" in steered[0].text and "04" in steered[2].text and "1977" not in steered[2].text
    assert steered[1].text == plain[1].text and steered[3].text == ""  # none: decoded as without
    assert all(h.unmet == 0 for t in steered for h in t.hypotheses)
    source, guides, out = tmp_path / "in.txt", tmp_path / "constraints.jsonl", tmp_path / "out.txt"
    source.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    guides.write_text("".join(json.dumps(g) + "\n" for g in GUIDES), encoding="utf-8")
    args = ["translate", "-m", str(run), "-i", str(source), "-o", str(out), "--beam", "3", "-q"]
    result = CliRunner().invoke(app, [*args, "--constraints", str(guides)])
    assert result.exit_code == 0, result.output
    assert out.read_text().splitlines() == [
        t.text for t in translator.translate(LINES, constraints=GUIDES, beam=3)
    ]


def test_inputs_that_carry_their_constraints_translate_as_with_a_constraints_file(run, tmp_path):
    """`--input-format jsonl` ({"text": ..., "constraints": [...], "avoid": [...]}) and `tsv`
    (the text, then a tab before each phrase to include) give `--constraints FILE`'s output."""
    from nmt import Translator

    translator = Translator.load(run, device="cpu")
    records = [{"text": line, **guide} for line, guide in zip(LINES, GUIDES, strict=True)]
    include = [{"constraints": g.get("constraints", [])} for g in GUIDES]
    inputs = {
        "jsonl": ("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), GUIDES),
        "tsv": (
            "".join(
                "\t".join([line, *g["constraints"]]) + "\n" for line, g in zip(LINES, include, strict=True)
            ),
            include,
        ),
    }
    for form, (text, guides) in inputs.items():
        source, out = tmp_path / f"in.{form}", tmp_path / f"out.{form}"
        source.write_text(text, encoding="utf-8")
        args = ["translate", "-m", str(run), "-i", str(source), "-o", str(out), "--beam", "3", "-q"]
        result = CliRunner().invoke(app, [*args, "--input-format", form])
        assert result.exit_code == 0, result.output
        expected = translator.translate(LINES, constraints=guides, beam=3)
        assert out.read_text(encoding="utf-8").splitlines() == [t.text for t in expected]
    source.write_text('{"constraints": ["1990"]}\n', encoding="utf-8")
    result = CliRunner().invoke(app, [*args, "--input-format", "jsonl"])
    assert result.exit_code == 2 and 'in.tsv:1: expected an object with "text"' in result.stderr
    result = CliRunner().invoke(app, [*args, "--input-format", "tsv", "--constraints", str(source)])
    assert (
        result.exit_code == 2
        and "--constraints and --input-format tsv both give constraints" in result.stderr
    )


BIG = "1990 1991 1992 1993"


@pytest.mark.parametrize(
    ("first", "extra", "message"),
    [
        ('{"constraints": ["1990"', [], "constraints.jsonl:1: not valid JSON"),
        ('{"include": ["1990"]}', [], 'constraints.jsonl:1: expected an object with "constraints"'),
        ('{"constraints": "1990"}', [], "constraints.jsonl:1: constraints must be a list of strings"),
        ('{"constraints": [""]}', [], "line 1: constraints 1 is empty"),
        ('{"avoid": ["\u4e00"]}', [], "line 1: avoid 1 ('\u4e00') is only unknown pieces"),
        (
            f'{{"constraints": ["{BIG}"]}}',
            ["--max-len", "4", "--beam", "3"],
            "line 1: the constraints (and prefix) need",
        ),
        ('{"constraints": ["1990"]}', ["--beam", "1"], "lexical constraints need beam search"),
        (None, [], "constraints: more input lines than constraints (at line 2)"),
    ],
)
def test_bad_constraints_are_one_line_and_write_nothing(run, tmp_path, first, extra, message):
    source, path, out = tmp_path / "in.txt", tmp_path / "constraints.jsonl", tmp_path / "out.txt"
    source.write_text("1.1.1990\n2.2.1990\n", encoding="utf-8")
    path.write_text("{}\n" if first is None else f"{first}\n{{}}\n", encoding="utf-8")
    args = ["translate", "-m", str(run), "-i", str(source), "-o", str(out), "--constraints", str(path), "-q"]
    result = CliRunner().invoke(app, [*args, *(extra or ["--beam", "3"])])
    assert result.exit_code == 2 and message in result.stderr, result.output
    assert len(result.stderr.strip().splitlines()) == 1 and not out.exists()


def test_lines_whose_constraints_were_not_all_met_are_named_at_the_end():
    from nmt.commands.translate import OutputOptions, closing_notes

    note = closing_notes(0, OutputOptions(), [3, 7])
    assert note == (
        "warning: 2 lines could not meet all their constraints within the output length cap and got "
        "the hypothesis meeting the most (lines 3, 7)"
    )


def plain_inputs(form: str, lines: list[str], guides: list[dict]) -> str:
    """`lines` as `--input-format form` writes them, each with its `guides` (phrases to include)."""
    rows = zip(lines, guides, strict=True)
    if form == "tsv":
        return "".join("\t".join([line, *g.get("constraints", [])]) + "\n" for line, g in rows)
    return "".join(json.dumps({"text": line, **g}, ensure_ascii=False) + "\n" for line, g in rows)


@pytest.mark.parametrize("form", ["jsonl", "tsv"])
@pytest.mark.parametrize("search", [["--beam", "1"], ["--sample", "--seed", "3"]])
def test_lines_without_constraints_decode_at_any_search_and_only_those_with_need_a_beam(
    run, tmp_path, form, search
):
    """Input lines that carry no constraints were refused at beam 1 and when sampling, as if they
    had some: they decode as plain text does; a line that does carry some is refused, named."""
    source, out = tmp_path / f"in.{form}", tmp_path / "out.txt"
    plain = CliRunner().invoke(
        app, ["translate", "-m", str(run), "-q", *search], input="\n".join(LINES) + "\n"
    )
    assert plain.exit_code == 0, plain.output
    source.write_text(plain_inputs(form, LINES, [{}] * len(LINES)), encoding="utf-8")
    args = ["translate", "-m", str(run), "-i", str(source), "-o", str(out), "-q", "--input-format", form]
    result = CliRunner().invoke(app, [*args, *search])
    assert result.exit_code == 0, result.output
    assert out.read_text(encoding="utf-8") == plain.stdout
    out.unlink()
    guides = [{}, {}, {"constraints": ["04"]}, {}]
    source.write_text(plain_inputs(form, LINES, guides), encoding="utf-8")
    result = CliRunner().invoke(app, [*args, *search])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.stderr == "error: line 3: lexical constraints need beam search; set a beam of 2 or more\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [source.name]
