"""`nmt serve` as a client sees it: a real server process on a free loopback port, real HTTP.

Answers must equal `nmt translate`'s byte for byte under concurrent clients; every error is one
JSON object; a full queue, a timeout and a stop by signal behave as documented.
"""

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nmt.cli import app
from nmt.config import TEMPERATURES

runner = CliRunner()


@dataclass
class Server:
    process: subprocess.Popen
    url: str
    log: Path

    def post(self, body, path="/translate"):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        return request(urllib.request.Request(self.url + path, data=data, method="POST"))

    def get(self, path):
        return request(urllib.request.Request(self.url + path))


def request(req):
    """(status, headers, decoded JSON body) for any status."""
    try:
        with urllib.request.urlopen(req, timeout=60) as response:
            return response.status, response.headers, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, e.headers, json.loads(e.read())


def wait_for_log(log: Path, pattern: str, process: subprocess.Popen, seconds: float) -> re.Match:
    """The first match of `pattern` in the server's log, polled while the server lives."""
    deadline = time.monotonic() + seconds
    while not (found := re.search(pattern, log.read_text())):
        assert process.poll() is None, log.read_text()
        assert time.monotonic() < deadline, f"no {pattern!r} in the log:\n{log.read_text()}"
        time.sleep(0.05)
    return found


@contextlib.contextmanager
def running_server(model: Path, log: Path, *options: str, env: dict[str, str] | None = None):
    """A server subprocess on a free port (`env`: more environment variables); stopped (and
    reaped) at the end whatever happens."""
    command = [sys.executable, "-m", "nmt", "serve", "-m", str(model), "--port", "0", "--device", "cpu"]
    environment = {**os.environ, **(env or {})}
    with open(log, "w") as err:
        process = subprocess.Popen(
            [*command, *options], stdout=subprocess.DEVNULL, stderr=err, env=environment
        )
    try:
        found = wait_for_log(log, r"on (http://\S+) ", process, seconds=120)
        yield Server(process, found.group(1), log)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.fixture(scope="module")
def server(model, tmp_path_factory):
    log = tmp_path_factory.mktemp("serve-log") / "serve.log"
    with running_server(model, log, "--max-sentences", "8", "--max-chars", "200") as server:
        yield server
        server.process.send_signal(signal.SIGINT)  # Ctrl-C: a clean stop too
        assert server.process.wait(30) == 0, log.read_text()


@pytest.fixture(scope="module")
def lines(toy_dir):
    long = " ".join(["Montag, 5. März 2001"] * 6)  # over data.max_len: translated truncated
    return (toy_dir / "test.human").read_text().splitlines()[:30] + ["", long]


def cli_translate(model, lines, *args):
    result = runner.invoke(app, ["translate", "-m", str(model), "-q", *args], input="\n".join(lines) + "\n")
    assert result.exit_code == 0, result.output
    return result.stdout


def test_concurrent_answers_equal_nmt_translate_byte_for_byte(server, model, lines):
    greedy = cli_translate(model, lines)
    nbest = cli_translate(model, lines, "--beam", "3", "--nbest", "2")

    def one(index_and_settings):
        index, settings = index_and_settings
        status, _, body = server.post({"text": lines[index], **settings})
        assert status == 200, body
        return index, settings, body["translations"][0]

    jobs = [(i, {}) for i in range(len(lines))] + [(i, {"beam": 3, "nbest": 2}) for i in range(len(lines))]
    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(one, jobs[::2] + jobs[1::2]))  # greedy and beam requests interleaved
    by_greedy = {i: t for i, s, t in answers if not s}
    by_beam = {i: t for i, s, t in answers if s}
    assert "".join(by_greedy[i]["text"] + "\n" for i in range(len(lines))) == greedy
    served_nbest = "".join(
        f"{i + 1}\t{rank}\t{h['score']:.4f}\t{h['text']}\n"
        for i in range(len(lines))
        for rank, h in enumerate(by_beam[i]["nbest"], 1)
    )
    assert served_nbest == nbest
    assert by_greedy[len(lines) - 1]["truncated"] and not by_greedy[0]["truncated"]


def test_sampled_answers_equal_nmt_translate_sampling_whatever_the_batch(server, model, lines):
    """A sentence's samples follow from the seed and its text: one request a sentence, sent at
    once beside greedy ones, gives what `nmt translate --sample` gives for the whole file."""
    sampling = {"sample": True, "seed": 5, "nbest": 2, "temperature": 1.5}
    expected = cli_translate(model, lines, "--sample", "--seed", "5", "--nbest", "2", "--temperature", "1.5")

    def one(job):
        index, settings = job
        status, _, body = server.post({"text": lines[index], **settings})
        assert status == 200, body
        return index, settings, body["translations"][0]

    jobs = [(i, sampling) for i in range(len(lines))] + [(i, {}) for i in range(len(lines))]
    with ThreadPoolExecutor(16) as pool:
        answers = [(i, t) for i, s, t in pool.map(one, jobs[::2] + jobs[1::2]) if s]
    served = "".join(
        f"{i + 1}\t{rank}\t{h['score']:.4f}\t{h['text']}\n"
        for i, t in sorted(answers, key=lambda it: it[0])
        for rank, h in enumerate(t["nbest"], 1)
    )
    assert served == expected


SAMPLING_EXTREMES = [  # every end of the ranges the command line and the server both accept
    {"temperature": TEMPERATURES[0]},
    {"temperature": TEMPERATURES[1]},
    {"top_p": 1e-300},
    {"top_p": 5e-324},
    {"temperature": TEMPERATURES[0], "top_p": 5e-324, "top_k": 1000},
]


@pytest.mark.parametrize("extreme", SAMPLING_EXTREMES)
def test_every_accepted_sampling_extreme_answers_as_nmt_translate(server, model, lines, extreme):
    """`"temperature": 1e-45` and `"top_p": 1e-300` were accepted and answered 500 (NaN in the
    sampler): each accepted extreme decodes, as the command line does with the same values."""
    options = [x for key, value in extreme.items() for x in (f"--{key.replace('_', '-')}", repr(value))]
    expected = cli_translate(model, lines[:8], "--sample", "--seed", "6", *options)
    status, _, body = server.post({"texts": lines[:8], "sample": True, "seed": 6, **extreme})
    assert status == 200, body
    assert "".join(t["text"] + "\n" for t in body["translations"]) == expected


@pytest.mark.parametrize("temperature", [1e-45, 5e-324, 1e308, TEMPERATURES[0] / 2, TEMPERATURES[1] * 2])
def test_a_temperature_the_command_line_refuses_the_server_refuses(server, model, temperature):
    result = runner.invoke(
        app, ["translate", "-m", str(model), "--sample", "--temperature", repr(temperature)], input="x\n"
    )
    assert result.exit_code == 2 and "decode.temperature: must be in [0.001, 100]" in result.stderr
    status, _, body = server.post({"text": "x", "sample": True, "temperature": temperature})
    assert status == 422 and "temperature: must be at least 0.001 and at most 100" in body["error"], body


def test_prefixed_answers_equal_nmt_translate_with_prefixes(server, model, lines, tmp_path):
    """Prefixes ride with their sentences through the shared pool, beside unprefixed requests."""
    chosen = [line for line in lines[:12] if line]
    prefixes = ["20" if i % 3 == 0 else "" for i in range(len(chosen))]
    source, starts = tmp_path / "in.txt", tmp_path / "prefixes.txt"
    source.write_text("".join(line + "\n" for line in chosen), encoding="utf-8")
    starts.write_text("".join(p + "\n" for p in prefixes), encoding="utf-8")
    result = runner.invoke(
        app, ["translate", "-m", str(model), "-i", str(source), "--prefixes", str(starts), "-q"]
    )
    assert result.exit_code == 0, result.output
    status, _, body = server.post({"texts": chosen[:6], "prefixes": prefixes[:6]})
    assert status == 200, body
    with ThreadPoolExecutor(4) as pool:
        singles = list(
            pool.map(lambda i: server.post({"text": chosen[i], "prefix": prefixes[i]}), range(6, len(chosen)))
        )
    served = [t["text"] for t in body["translations"]] + [b["translations"][0]["text"] for _, _, b in singles]
    assert "".join(text + "\n" for text in served) == result.stdout
    assert all(text.startswith(p) for text, p in zip(served, prefixes, strict=True))
    status, _, body = server.post({"text": chosen[0], "prefix": "2001 " * 40})
    assert status == 422 and "sentence 1: the prefix has" in body["error"]
    # An empty sentence is answered empty whatever its prefix, as `nmt translate` answers it.
    status, _, body = server.post({"texts": ["", chosen[0]], "prefixes": ["2001 " * 40, ""]})
    assert status == 200 and body["translations"][0]["text"] == "", body


def test_constrained_answers_equal_nmt_translate_with_constraints(server, model, lines, tmp_path):
    """Constraints ride with their sentences through the shared pool, beside plain requests; the
    phrases appear in every answer, those to avoid in none."""
    chosen = [line for line in lines[:12] if line]
    guides = [{"constraints": ["19"], "avoid": ["-0"]} if i % 3 == 0 else {} for i in range(len(chosen))]
    source, constraints = tmp_path / "in.txt", tmp_path / "constraints.jsonl"
    source.write_text("".join(line + "\n" for line in chosen), encoding="utf-8")
    constraints.write_text("".join(json.dumps(g) + "\n" for g in guides), encoding="utf-8")
    expected = cli_translate(model, chosen, "--constraints", str(constraints), "--beam", "4")
    lists = {key: [g.get(key, []) for g in guides[:6]] for key in ("constraints", "avoid")}
    status, _, body = server.post({"texts": chosen[:6], "beam": 4, **lists})
    assert status == 200, body
    with ThreadPoolExecutor(4) as pool:
        singles = list(
            pool.map(lambda i: server.post({"text": chosen[i], "beam": 4, **guides[i]}), range(6, 12))
        )
    served = [t["text"] for t in body["translations"]] + [b["translations"][0]["text"] for _, _, b in singles]
    assert "".join(text + "\n" for text in served) == expected
    assert all("19" in text and "-0" not in text for text, g in zip(served, guides, strict=True) if g)
    status, _, body = server.post({"text": chosen[0], "beam": 4, "constraints": ["1999 " * 30]})
    assert status == 422 and "sentence 1: the constraints (and prefix) need" in body["error"]
    # Sentences without phrases take any search, as lines without constraints in nmt translate.
    status, _, body = server.post({"texts": chosen[:2], "constraints": [[], []], "beam": 1})
    assert status == 200 and "".join(t["text"] + "\n" for t in body["translations"]) == cli_translate(
        model, chosen[:2], "--beam", "1"
    )
    assert server.post({"text": chosen[0], "avoid": [], "sample": True, "seed": 1})[0] == 200


def test_tagged_answers_equal_nmt_translate_with_markup(server, model, lines):
    """Tags are taken out before the shared pool and put back by each answer's attention, as
    `nmt translate --markup` does; unbalanced markup is a 422 naming the text."""
    chosen = [f"<b>{line}</b> {{0}}" if i % 2 else line for i, line in enumerate(lines[:8]) if line]
    expected = cli_translate(model, chosen, "--markup")
    status, _, body = server.post({"texts": chosen, "markup": True})
    assert status == 200, body
    served = [t["text"] for t in body["translations"]]
    assert "".join(text + "\n" for text in served) == expected
    assert all(text.count("<b>") == text.count("</b>") == 1 for text in served[1::2])
    status, _, body = server.post({"texts": ["a <b>b", "c"], "markup": True})
    assert (
        status == 422 and body["error"] == "texts[0]: unbalanced markup: <b> at character 3 is never closed"
    )


def test_a_shortlisted_model_answers_as_nmt_translate_with_its_shortlist(
    translating_model, lines, toy_dir, tmp_path
):
    """A model that writes dates (the server's own toy model is too short-trained to write
    anything) served with a shortlist that changes some of them."""
    model, shortlist = translating_model.last, tmp_path / "shortlist.npz"
    build = ["shortlist", "-m", str(model), "--src", str(toy_dir / "train.human"), "--frequent", "0"]
    result = runner.invoke(
        app, [*build, "--tgt", str(toy_dir / "train.iso"), "--best", "2", "-o", str(shortlist)]
    )
    assert result.exit_code == 0, result.output
    expected = cli_translate(model, lines, "--shortlist", str(shortlist), "--beam", "3")
    assert expected != cli_translate(model, lines, "--beam", "3")
    with running_server(model, tmp_path / "serve.log", "--shortlist", str(shortlist)) as server:
        status, _, body = server.post({"texts": lines, "beam": 3})
    assert status == 200, body
    assert "".join(t["text"] + "\n" for t in body["translations"]) == expected
    serve = ["serve", "-m", str(model), "--port", "0", "--device", "cpu", "--shortlist"]
    result = runner.invoke(app, [*serve, f"other={shortlist}"])
    assert result.exit_code == 2 and result.stderr.strip() == (
        f"error: --shortlist other={shortlist}: no model named 'other' (served: run)"
    )


def test_a_request_with_several_texts_keeps_their_order(server, model, lines):
    status, _, body = server.post({"texts": lines[:8]})
    assert status == 200
    assert [t["text"] + "\n" for t in body["translations"]] == cli_translate(model, lines[:8]).splitlines(
        True
    )


def test_attention_comes_by_word_when_asked(server):
    status, _, body = server.post({"text": "12. März 1989", "attention": True})
    assert status == 200 and not body["translations"][0]["truncated"]
    attention = body["translations"][0]["attention"]
    assert attention["source"] == ["12", ".", "März", "1989", "</s>"]
    assert len(attention["weights"]) == len(attention["target"])
    assert all(abs(sum(row) - 1) < 1e-2 for row in attention["weights"])
    assert "attention" not in server.post({"text": "5.6.1990"})[2]["translations"][0]


@pytest.mark.parametrize(
    "body,status,fragment",
    [
        (b'{"text": ', 400, "not valid JSON"),
        (b'"text"', 400, "must be a JSON object"),
        ({"text": 5}, 422, "text: must be a string"),
        ({"texts": ["a", 1]}, 422, "texts[1]: must be a string"),
        ({"text": "a", "beam": "2"}, 422, "beam: must be an integer"),
        ({"text": "a", "model": "other"}, 422, "no model named 'other'"),
        ({"text": "a", "colour": 1}, 422, "unknown field 'colour'"),
        ({"texts": ["a"] * 9}, 413, "9 sentences, at most 8"),
        ({"text": "a" * 201}, 413, "text: 201 characters, at most 200"),
        (b"x" * 200_000, 413, "request body"),
        # Each of these answered 500 before (issue 42): RecursionError, ValueError, TypeError.
        (b"[" * 5000 + b"]" * 5000, 400, "nests arrays and objects more than 8 deep"),
        (b'{"text": "a", "beam": ' + b"9" * 5000 + b"}", 422, "an integer of 5000 digits"),
        ({"text": "\ud800"}, 422, "text: a lone surrogate (U+D800) at character 0"),
        ({"texts": ["5.6.1990", "7.8.1991 \udc00"]}, 422, "texts[1]: a lone surrogate (U+DC00)"),
        # What else a hostile client sends: each refused with its reason.
        ({"text": "a\x00b"}, 422, "text: the control character (U+0000) at character 1"),
        (b'{"text": "a", "text": "b"}', 422, "duplicate field 'text'"),
        (b'{"text": "a", "beam": NaN}', 400, "NaN is not a JSON number"),
        (b'{"text": "a", "beam": 1e400}', 422, "beam: must be an integer"),
        (b'{"text": "a", "nbest": 2.0}', 422, "nbest: must be an integer"),
        ({"text": "a", "max_len": True}, 422, "max_len: must be an integer"),
        ('{"text": "a"}'.encode("utf-16"), 400, "not UTF-8 (byte 0xff at 0"),
        ({"texts": ["a"] * 5000}, 413, "the request body is 25011 bytes"),
        ({"texts": [""] * 2000}, 413, "texts: 2000 sentences, at most 8"),
        ({"text": "a", **{f"field{i}": i for i in range(1000)}}, 422, "unknown field 'field0'"),
    ],
)
def test_bad_requests_get_one_json_error(server, body, status, fragment):
    got, _, answer = server.post(body)
    assert got == status and list(answer) == ["error"] and fragment in answer["error"]


def test_odd_but_harmless_requests_are_translated(server):
    body = {"texts": ["", " \t ", "x" * 200, "\U0001f600" * 50, "\u202e5.6.1990\u200b"]}
    status, _, answer = server.post(body)
    assert status == 200 and len(answer["translations"]) == 5
    assert answer["translations"][0]["text"] == answer["translations"][1]["text"] == ""  # empty, blank
    assert server.post(b'\xef\xbb\xbf{"text": "5.6.1990"}')[0] == 200  # a byte order mark, RFC 8259 allows


def test_a_body_that_never_ends_is_answered_408(model, tmp_path):
    with running_server(model, tmp_path / "slow-body.log", "--timeout", "0.5") as slow:
        address = urllib.parse.urlsplit(slow.url)
        with socket.create_connection((address.hostname, address.port), timeout=4) as sock:
            sock.sendall(b'POST /translate HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"text": ')
            answer = b""  # and nothing more: the body never ends
            while chunk := sock.recv(65536):  # until the server closes (before uvicorn's 5-s keep-alive)
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 408 ") and b"connection: close" in answer.lower()
        assert json.loads(answer.split(b"\r\n\r\n", 1)[1]) == {
            "error": "the request body did not arrive within 0.5 s"
        }
        assert slow.post({"text": "5.6.1990"})[0] == 200


def test_unknown_routes_and_methods_are_json_errors_too(server):
    assert server.get("/nope")[:3:2] == (404, {"error": "GET /nope: Not Found"})
    assert server.get("/translate")[:3:2] == (405, {"error": "GET /translate: Method Not Allowed"})
    # Not a redirect to a URL made from the client's Host header.
    assert server.post({"text": "a"}, "/translate/")[:3:2] == (404, {"error": "POST /translate/: Not Found"})


def test_health_info_page_and_log_lines(server):
    assert server.get("/health")[2]["status"] == "ok"
    info = server.get("/info")[2]
    assert info["default_model"] == "run" and info["models"][0]["src_lang"] == "human"
    assert info["limits"]["max_sentences"] == 8 and info["models"][0]["parameters"] > 0
    assert info["models"][0]["precision"] == "fp32"  # NMT_PRECISION, as the log says:
    assert "run: precision: fp32 (NMT_PRECISION=fp32)" in server.log.read_text()
    with urllib.request.urlopen(server.url + "/") as page:
        html = page.read().decode()
    assert '<script src="heatmap.js">' in html and "http" not in html.split("<script>")[1]  # no CDN
    with urllib.request.urlopen(server.url + "/heatmap.js") as js:
        assert "var NMTHeatmap" in js.read().decode()  # the explorer's heatmap module
    server.post({"texts": ["5.6.1990", "7.8.1991"]})
    # The line is written once the response has gone out, so the client can read the log first.
    wait_for_log(server.log, r"POST /translate 200 2 sentences [\d.]+ ms", server.process, seconds=10)


def test_a_full_queue_answers_503_and_a_slow_request_504(model, tmp_path):
    options = ("--max-wait-ms", "1500", "--queue-size", "1", "--timeout", "0.5")
    with running_server(model, tmp_path / "slow.log", *options) as slow:
        first: list = []
        waiting = threading.Thread(target=lambda: first.append(slow.post({"text": "5.6.1990"})))
        waiting.start()
        while slow.get("/health")[2]["waiting"] < 1:
            time.sleep(0.02)
        status, headers, body = slow.post({"text": "7.8.1991"})
        assert status == 503 and headers["Retry-After"] == "1" and "busy" in body["error"]
        waiting.join()
        assert first[0][0] == 504 and "longer than 0.5 s" in first[0][2]["error"]


def test_sigterm_finishes_the_request_in_flight_and_exits_0(model, tmp_path):
    expected = cli_translate(model, ["5.6.1990"])
    with running_server(model, tmp_path / "stop.log", "--max-wait-ms", "1000") as slow:
        answer: list = []
        in_flight = threading.Thread(target=lambda: answer.append(slow.post({"text": "5.6.1990"})))
        in_flight.start()
        while slow.get("/health")[2]["waiting"] < 1:
            time.sleep(0.02)
        slow.process.send_signal(signal.SIGTERM)
        in_flight.join()
        assert slow.process.wait(30) == 0
        assert answer[0][0] == 200 and answer[0][2]["translations"][0]["text"] + "\n" == expected
        assert "stopped" in slow.log.read_text()


def test_a_busy_port_and_a_missing_checkpoint_are_one_line_errors(model, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = runner.invoke(app, ["serve", "-m", str(model), "--port", str(port)])
    assert result.exit_code == 2 and f"cannot listen on 127.0.0.1:{port}" in result.stderr
    result = runner.invoke(app, ["serve", "-m", str(tmp_path / "missing.pt"), "--port", "0"])
    assert result.exit_code == 2 and "checkpoint not found" in result.stderr
    assert "Traceback" not in result.output


def test_the_live_page_in_a_real_browser(server):
    # Type a sentence: the translation, the n-best list and the explorer's heatmap appear.
    from tests.explore.test_page import chromium

    browser = chromium()
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    expected = server.post({"text": "5.6.1990", "beam": 5, "nbest": 5, "attention": True})[2]["translations"][
        0
    ]
    driver = browser(1200, 900, console_log=True)
    try:
        driver.get(server.url + "/")
        WebDriverWait(driver, 20).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#model option"))
        driver.find_element(By.ID, "source").send_keys("5.6.1990")
        WebDriverWait(driver, 30).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#heatmap td.cell"))
        assert driver.find_element(By.ID, "translation").text == expected["text"]
        assert len(driver.find_elements(By.CSS_SELECTOR, "#nbest-list tr")) == len(expected["nbest"])
        words = expected["attention"]
        cells = driver.find_elements(By.CSS_SELECTOR, "#heatmap td.cell")
        assert len(cells) == len(words["source"]) * len(words["target"])
        assert [th.text for th in driver.find_elements(By.CSS_SELECTOR, "#heatmap th.tgt")] == words["target"]
        # Type a target prefix: the rest follows it, with its n-best list and attention.
        steered = server.post(
            {"text": "5.6.1990", "prefix": "1991", "beam": 5, "nbest": 5, "attention": True}
        )
        steered = steered[2]["translations"][0]
        assert steered["text"].startswith("1991") and steered["text"] != expected["text"]
        driver.find_element(By.ID, "prefix").send_keys("1991")
        WebDriverWait(driver, 30).until(
            lambda d: d.find_element(By.ID, "translation").text == steered["text"]
        )
        WebDriverWait(driver, 30).until(
            lambda d: (
                [th.text for th in d.find_elements(By.CSS_SELECTOR, "#heatmap th.tgt")]
                == steered["attention"]["target"]
            )
        )
        assert not [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    finally:
        driver.quit()
