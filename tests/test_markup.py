"""Inline markup carried across a translation (issue 41, item 3): tags out of the source, back
into the output by the attention's alignment; well-formed in, well-formed out, whatever the
alignment; the words between the tags are exactly the plain translation."""

import re
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from nmt.cli import app
from nmt.errors import NMTError
from nmt.text.markup import TAG, Markup
from nmt.words import WORD

SRC = ["\u2581a", "\u2581b", "\u2581c", "\u2581d", "</s>"]
TGT = ["\u2581w", "\u2581x", "\u2581y", "\u2581z", "</s>"]
TEXT = "w x y z"


def carried(line: str, order: list[int]) -> str:
    """`line` (over the source words a b c d) carried into "w x y z", target word j attending
    to source word order[j]."""
    attention = np.zeros((5, 5))
    for j, i in enumerate(order):
        attention[j, i] = 1.0
    attention[4, 4] = 1.0
    markup = Markup.parse(line, "line 1")
    assert markup.plain == "a b c d"
    return markup.carry(TEXT, attention, SRC, TGT)


@pytest.mark.parametrize(
    ("line", "order", "expected"),
    [
        ("a <b>b c</b> d", [0, 1, 2, 3], "w <b>x y</b> z"),
        ("<b>a b</b> <i>c d</i>", [3, 2, 1, 0], "<i>w x</i> <b>y z</b>"),
        ('<b>a <i class="k">b</i></b> c d', [0, 1, 2, 3], '<b>w <i class="k">x</i></b> y z'),
        ("a {0} b c d", [0, 1, 2, 3], "w {0} x y z"),
        ("a b<br/> c d", [0, 1, 2, 3], "w x<br/> y z"),
        ("a b c d {1}", [0, 1, 2, 3], "w x y z {1}"),
        ("{0} a b c d", [3, 2, 1, 0], "w x y {0} z"),
        ("a <b>b c</b> d", [0, 1, 0, 3], "w <b>x</b> y z"),  # one of its words aligned only
        ("a <b></b>b c d", [0, 1, 2, 3], "w <b></b>x y z"),
    ],
)
def test_tags_go_around_and_before_the_aligned_words(line, order, expected):
    assert carried(line, order) == expected


def test_a_pair_whose_words_no_target_word_attends_to_most_goes_around_their_best_target():
    attention = np.eye(5)
    attention[1, :2] = [0.6, 0.4]  # x attends most to a, then to b; nothing else to b
    markup = Markup.parse("a <b>b</b> c d", "line 1")
    assert markup.carry(TEXT, attention, SRC, TGT) == "w <b>x</b> y z"


def test_parsing_notes_which_words_each_tag_holds():
    markup = Markup.parse("Ein <b>schwarzer <i>Hund</i></b> läuft {0} weg.", "line 1")
    assert markup.plain == "Ein schwarzer Hund läuft weg."
    bold, placeholder = markup.elements
    assert (bold.open, bold.close, bold.first, bold.last) == ("<b>", "</b>", 1, 2)
    assert (bold.children[0].first, bold.children[0].last) == (2, 2)
    assert (placeholder.open, placeholder.close, placeholder.first) == ("{0}", None, 4)
    untouched = "  two  spaces, a < b and {not a placeholder} "
    assert Markup.parse(untouched, "line 1").plain == untouched  # no tag: the line as it is


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("a </b> b", "line 3: unbalanced markup: </b> at character 3 has no opening tag"),
        (
            "<b>a <i>b</b></i>",
            "line 3: unbalanced markup: </b> at character 10 closes <i>, opened at character 6",
        ),
        ("a <b>b c", "line 3: unbalanced markup: <b> at character 3 is never closed"),
    ],
)
def test_unbalanced_markup_is_refused_naming_the_line(line, message):
    with pytest.raises(NMTError, match=re.escape(message)):
        Markup.parse(line, "line 3")


def test_tags_nested_thousands_deep_are_carried():
    deep = 3000
    line = "<b>" * deep + "a b c d" + "</b>" * deep
    assert carried(line, [0, 1, 2, 3]) == "<b>" * deep + "w x y z" + "</b>" * deep


def test_a_quoted_attribute_value_may_hold_a_closing_bracket():
    line = """<a title="x>y">a</a> b <c d='1>2'/> c d"""
    assert carried(line, [0, 1, 2, 3]) == """<a title="x>y">w</a> x <c d='1>2'/> y z"""


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("""a <b class=don't>b</b> c d""", """w <b class=don't>x</b> y z"""),
        ("""<p a="x" '>a b</p> c d""", """<p a="x" '>w x</p> y z"""),
        ("""a <i t='it"s'>b c</i> d""", """w <i t='it"s'>x y</i> z"""),
    ],
)
def test_a_stray_quote_in_a_tag_is_a_character_like_any_other(line, expected):
    # well-formed, carried as before quoted values could hold ">": a quote that closes no value
    # does not stop the tag at its ">"
    assert carried(line, [0, 1, 2, 3]) == expected


def work(line: str) -> int:
    """Lines of nmt.text.markup run, and characters its word pattern reads, to parse `line` and
    carry its tags into eight target words: a count of the work, which a busy machine does not
    change."""
    from nmt.text import markup

    count = 0

    class Reading:
        """The word pattern, counting the characters it reads."""

        def finditer(self, text):
            nonlocal count
            count += len(text)
            return WORD.finditer(text)

        def findall(self, text):
            return list(self.finditer(text))

    def lines(frame, event, arg):
        nonlocal count
        count += event == "line"
        return lines

    def calls(frame, event, arg):
        return lines if frame.f_code.co_filename == markup.__file__ else None

    words = WORD.findall(Markup.parse(line, "line 1").plain)
    src, tgt = [f"\u2581{w}" for w in words] + ["</s>"], [f"\u2581w{j}" for j in range(8)] + ["</s>"]
    attention = np.random.default_rng(0).random((len(tgt), len(src)))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(markup, "WORD", Reading())
        sys.settrace(calls)
        try:
            Markup.parse(line, "line 1").carry(" ".join(f"w{j}" for j in range(8)), attention, src, tgt)
        finally:
            sys.settrace(None)
    return count


@pytest.mark.parametrize(
    "shape",
    [
        lambda n: " ".join(["<b>x</b>"] * n),  # siblings
        lambda n: "<b>" * n + "x " * n + "</b>" * n,  # nested, each pair around every word
        lambda n: " ".join(["x <br/> {0}"] * n),  # standalone tags
        lambda n: " ".join(["""<b t="1>2" c=don't>x</b>"""] * n),  # attributes, quoted and stray quotes
    ],
    ids=["siblings", "nested", "standalone", "attributes"],
)
def test_the_work_of_carrying_grows_as_the_tags(shape):
    """Twice the tags, about twice the work (it grew as their square: 26,000 pairs took 574 s)."""
    assert work(shape(400)) < 2.2 * work(shape(200))


def tag_tree(draw, depth: int, names: list[str]) -> str:
    """Words a..d, in order, with tags drawn around and between them (each tag name once)."""
    parts = []
    for word in "abcd"[: draw(st.integers(1, 4))]:
        kind = draw(st.sampled_from(["word", "pair", "point"] if depth < 3 and names else ["word"]))
        if kind == "pair":
            name = names.pop()
            parts.append(f"<{name}>{word}</{name}>")
        elif kind == "point":
            parts.append(f"{{{names.pop()}}} {word}")
        else:
            parts.append(word)
    return " ".join(parts)


@st.composite
def tagged(draw):
    names = [f"t{i}" for i in range(6)]
    words = [tag_tree(draw, 0, names) for _ in range(draw(st.integers(1, 3)))]
    pair = names.pop() if names and draw(st.booleans()) else None
    line = " ".join(words)
    return f"<{pair}>{line}</{pair}>" if pair else line


def structure(line: str) -> list[tuple[str, str]]:
    """Each tag with the innermost pair around it: what carrying must keep."""
    stack, found = ["root"], []
    for match in TAG.finditer(line):
        closing, name, _, _ = match.groups()
        if name is None:
            found.append((match.group(), stack[-1]))
        elif closing:
            stack.pop()
        else:
            found.append((name, stack[-1]))
            stack.append(name)
    return sorted(found)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(line=tagged(), weights=st.lists(st.floats(0, 1), min_size=50, max_size=50), words=st.integers(1, 6))
def test_whatever_the_alignment_the_output_is_well_formed_around_the_same_text(line, weights, words):
    markup = Markup.parse(line, "line 1")
    source = markup.plain.split()
    text = " ".join(f"w{j}" for j in range(words))
    src_pieces = [f"\u2581{w}" for w in source] + ["</s>"]
    tgt_pieces = [f"\u2581w{j}" for j in range(words)] + ["</s>"]
    attention = np.array(weights[: (words + 1) * len(src_pieces)] or [0.0])
    attention = np.resize(attention, (words + 1, len(src_pieces)))
    out = markup.carry(text, attention, src_pieces, tgt_pieces)
    back = Markup.parse(out, "output")  # balanced and nested, or this raises
    assert back.plain == text
    assert structure(out) == structure(line)


@pytest.fixture(scope="module")
def translator(translating_model):
    from nmt import Translator

    return Translator.load(translating_model.last, device="cpu")


LINES = ["<b>5. März</b> 1990", "Montag, {0} 12. <i>April</i> 2001", "", "<br/>", "3.4.1977"]


def test_the_api_and_the_command_line_carry_tags_around_the_plain_translation(
    translator, translating_model, tmp_path
):
    plain = translator.translate([Markup.parse(line, "").plain for line in LINES], beam=3, nbest=2)
    tagged = translator.translate(LINES, markup=True, beam=3, nbest=2)
    for line, p, t in zip(LINES, plain, tagged, strict=True):
        for plain_text, text in zip(p.texts, t.texts, strict=True):
            assert Markup.parse(text, "output").plain == plain_text
            assert structure(text) == structure(line)
    assert tagged[3].text == "<br/>" and tagged[4].text == plain[4].text
    source, out = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    args = ["translate", "-m", str(translating_model.last), "-i", str(source), "-o", str(out)]
    result = CliRunner().invoke(app, [*args, "--beam", "3", "--markup", "-q"])
    assert result.exit_code == 0, result.output
    assert out.read_text(encoding="utf-8").splitlines() == [t.text for t in tagged]


def test_unbalanced_markup_on_the_command_line_is_one_line_and_writes_nothing(translating_model, tmp_path):
    source, out = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_text("1.1.1990\n<b>2.2.1990</i>\n", encoding="utf-8")
    args = ["translate", "-m", str(translating_model.last), "-i", str(source), "-o", str(out), "-q"]
    result = CliRunner().invoke(app, [*args, "--markup"])
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == (
        "error: line 2: unbalanced markup: </i> at character 12 closes <b>, opened at character 1; "
        "close tags in the reverse order of their opening"
    )
    assert not out.exists()


def test_a_line_of_tags_only_keeps_them_in_the_n_best_output(translating_model, tmp_path):
    source, out = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_text("<br/>\n5. März 1990\n<b></b>\n", encoding="utf-8")
    args = ["translate", "-m", str(translating_model.last), "-i", str(source), "-o", str(out), "-q"]
    result = CliRunner().invoke(app, [*args, "--markup", "--beam", "3", "--nbest", "3"])
    assert result.exit_code == 0, result.output
    rows = [row.split("\t") for row in out.read_text(encoding="utf-8").splitlines()]
    assert [row for row in rows if row[0] != "2"] == [
        ["1", "1", "0.0000", "<br/>"],
        ["3", "1", "0.0000", "<b></b>"],
    ]
    assert [row[1] for row in rows if row[0] == "2"] == ["1", "2", "3"]
