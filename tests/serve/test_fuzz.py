"""Fuzzing `nmt serve` (issue 42): thousands of generated hostile requests sent to a real server
process on 127.0.0.1. Each body gets 200 or the 4xx JSON error `parse_translate` gives it in
process, and each request head 200 or a 4xx; nothing else (no 500, no dropped connection), no
traceback in the server's log, and the server still translates a normal request afterwards."""

import contextlib
import http.client
import json
import signal
import socket
import time
from urllib.parse import quote, urlsplit

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nmt.decode.translator import Translator
from nmt.errors import NMTError
from nmt.serve.batcher import Job, job_steering
from nmt.serve.requests import Limits, RequestError, TranslateRequest, parse_translate
from tests.serve.hostile import MAX_CHARS, MAX_SENTENCES, hostile_bodies, valid_requests
from tests.serve.test_server import running_server

BODIES, VALID, HEADS = 2500, 200, 300  # examples per fuzz test
FUZZ = settings(deadline=None, database=None, suppress_health_check=list(HealthCheck))


class Connection(http.client.HTTPConnection):
    """A keep-alive connection with Nagle's algorithm off (else 40 ms a request, docs/serving.md)."""

    def connect(self) -> None:
        super().connect()
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def translate(self, body: bytes) -> tuple[int, dict]:
        """(status, decoded JSON answer) of `POST /translate` with `body`."""
        self.request("POST", "/translate", body, {"Content-Type": "application/json"})
        response = self.getresponse()
        return response.status, json.loads(response.read())


@pytest.fixture(scope="module")
def server(model, tmp_path_factory):
    log = tmp_path_factory.mktemp("fuzz-log") / "serve.log"
    limits = ("--max-sentences", str(MAX_SENTENCES), "--max-chars", str(MAX_CHARS))
    # One OpenMP thread: requests come one at a time, and two threads spinning on a busy 2-core
    # machine made the fuzz 2-3 times slower (26 s against 10 s for the hostile bodies).
    with running_server(model, log, *limits, env={"OMP_NUM_THREADS": "1"}) as server:
        yield server
        server.process.send_signal(signal.SIGINT)
        assert server.process.wait(30) == 0, log.read_text()
    assert "Traceback" not in log.read_text(), log.read_text()


@pytest.fixture()
def connection(server):
    address = urlsplit(server.url)
    connection = Connection(address.hostname, address.port, timeout=60)
    yield connection
    connection.close()


@pytest.fixture(scope="module")
def contract(server, model) -> tuple[Limits, dict[str, int], Translator]:
    """The server's limits and each model's default beam, as `GET /info` publishes them, and
    its model, which alone knows whether a prefix or phrase leaves room under the output cap."""
    info = server.get("/info")[2]
    limits = Limits(**{k: v for k, v in info["limits"].items() if k in Limits.__dataclass_fields__})
    beams = {m["name"]: m["decode"]["beam"] for m in info["models"]}
    return limits, beams, Translator.load(model, device="cpu")


def expected(
    body: bytes, limits: Limits, beams: dict[str, int], translator: Translator
) -> tuple[int, TranslateRequest | None]:
    """The status a body must get, and its request when that is 200."""
    if len(body) > limits.max_body_bytes:
        return 413, None
    try:
        req = parse_translate(body, limits, beams)
    except RequestError as e:
        return e.status, None
    job = Job(req.settings, req.sentences, print, req.prefixes, req.constraints)
    try:
        job_steering(job, translator.configured(**req.settings.decoding()))
    except NMTError:
        return 422, None
    return 200, req


def assert_answered(status: int, answer: dict, want: int, req: TranslateRequest | None) -> None:
    assert status == want, answer
    if req is None:
        assert list(answer) == ["error"] and answer["error"]
    else:
        assert len(answer["translations"]) == len(req.sentences)


def test_hostile_bodies_get_200_or_a_4xx_with_a_reason(connection, contract):
    normal = b'{"text": "Sonntag, 12. M\\u00e4rz 1989", "beam": 2}'
    before = connection.translate(normal)

    @settings(FUZZ, max_examples=BODIES)
    @given(hostile_bodies())
    def one(body):
        assert_answered(*connection.translate(body), *expected(body, *contract))

    start = time.monotonic()
    one()
    print(f"{BODIES} hostile bodies in {time.monotonic() - start:.1f} s")
    assert before[0] == 200 and connection.translate(normal) == before


@settings(FUZZ, max_examples=VALID)
@given(valid_requests())
def test_well_formed_requests_are_translated(connection, contract, body):
    want, req = expected(body, *contract)
    assert want == 200
    assert_answered(*connection.translate(body), want, req)


METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD", "BREW", "G\x00T"]
PATHS = ["/translate", "/", "/health", "/info", "/heatmap.js", "/nope", "//translate", "/translate/", "/%ff"]
LENGTHS = ["abc", "-1", "1e3", "+5", " 5", "0x10", "99999999999999999999999", "²", ""]


@st.composite
def heads(draw) -> bytes:
    """A request with an odd method, path, Content-Type, Content-Length or Transfer-Encoding."""
    method = draw(st.sampled_from(METHODS))
    path = draw(st.sampled_from(PATHS) | st.text(max_size=20).map(lambda t: "/" + quote(t, safe="/?=&%")))
    body = draw(valid_requests() | hostile_bodies())
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", "Connection: close"]
    if draw(st.booleans()):
        lines.append(
            f"Content-Type: {draw(st.sampled_from(['text/plain', 'application/json; charset=latin-1', '']))}"
        )
    framing = draw(st.sampled_from(["length", "odd length", "short length", "chunked", "bad chunk", "none"]))
    if framing == "length":
        lines.append(f"Content-Length: {len(body)}")
    elif framing == "odd length":
        lines.append(f"Content-Length: {draw(st.sampled_from(LENGTHS))}")
    elif framing == "short length":
        lines.append(f"Content-Length: {len(body) // 2}")
    elif framing in ("chunked", "bad chunk"):
        lines.append("Transfer-Encoding: chunked")
        size = f"{len(body):x}" if framing == "chunked" else "zz"
        body = size.encode() + b"\r\n" + body + b"\r\n0\r\n\r\n"
    head = "\r\n".join(lines).encode("latin-1", "replace") + b"\r\n\r\n"
    return head + body


def exchange(server, raw: bytes) -> bytes:
    """What the server answers to `raw` on a new connection, until it closes it (a reset after
    the answer, when bytes it did not read were left, still counts as answered)."""
    address = urlsplit(server.url)
    chunks = []
    with socket.create_connection((address.hostname, address.port), timeout=60) as sock:
        sock.sendall(raw)
        with contextlib.suppress(ConnectionResetError):
            while chunk := sock.recv(65536):
                chunks.append(chunk)
    return b"".join(chunks)


def test_hostile_request_heads_get_200_or_a_4xx(server, connection):
    @settings(FUZZ, max_examples=HEADS)
    @given(heads())
    def one(raw):
        answer = exchange(server, raw)
        assert answer.startswith(b"HTTP/1.1 "), (raw[:300], answer[:300])
        status = int(answer[9:12])
        assert status == 200 or 400 <= status < 500, (raw[:300], answer[:300])

    one()
    assert connection.translate(b'{"text": "5.6.1990"}')[0] == 200
