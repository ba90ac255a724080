"""`nmt serve` as a function: load the models, bind the address, run uvicorn until a signal.

SIGTERM and Ctrl-C stop accepting connections, let uvicorn finish the requests in flight, drain
the batcher, and return normally (exit code 0).
"""

from __future__ import annotations

import logging
import signal
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from nmt.errors import NMTError
from nmt.serve.requests import Limits

if TYPE_CHECKING:
    from nmt.decode.translator import Translator


@dataclass(frozen=True)
class ServeOptions:
    host: str = "127.0.0.1"  # loopback: other machines only with an explicit --host
    port: int = 8000  # 0: any free port (the line on stderr says which)
    device: str = "auto"
    max_batch: int = 32
    max_wait_ms: float = 2.0
    queue_size: int = 256
    limits: Limits = Limits()
    shortlists: tuple[str, ...] = ()  # `[NAME=]PATH`: a lexical shortlist for a served model
    precision: str | None = None  # auto (None), fp32, bf16 or int8: every model's (nmt.model.precision)


def with_shortlists(translators: dict[str, Translator], specs: tuple[str, ...]) -> dict[str, Translator]:
    """`translators` with the shortlist of each `--shortlist` value: `NAME=PATH` for the model
    of that name, or a PATH alone when one model is served."""
    out = dict(translators)
    for spec in specs:
        name, path = name_and_path(spec)
        if name is None:
            if len(out) > 1:
                raise NMTError(f"--shortlist {spec}: {len(out)} models are served; say which: NAME=PATH")
            name = next(iter(out))
        if name not in out:
            raise NMTError(f"--shortlist {spec}: no model named {name!r} (served: {', '.join(out)})")
        out[name] = out[name].shortlisted(Path(path))
    return out


def name_and_path(spec: str) -> tuple[str | None, str]:
    """A `[NAME=]PATH` value: (NAME, PATH), or (None, the value) when it names nothing (no "=",
    or a "/" before it: a path holding "=")."""
    name, sep, path = spec.partition("=")
    return (name, path) if sep and name and "/" not in name else (None, spec)


def model_names(specs: list[str]) -> dict[str, str]:
    """name -> path for each `-m` value: `NAME=PATH`, or a PATH named after its run directory
    (runs/toy and runs/toy/checkpoints/best.pt are both "toy"); repeated names get "-2", "-3"."""
    named: dict[str, str] = {}
    for spec in specs:
        name, path = name_and_path(spec)
        if name is None:
            p = Path(path)
            name = p.parent.parent.name if p.parent.name == "checkpoints" else (p.stem or p.name)
        base, k = name, 2
        while name in named:
            name, k = f"{base}-{k}", k + 1
        named[name] = path
    return named


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound here so that a busy port is one clear error.

    Its protocol is IPPROTO_TCP, not 0: asyncio turns Nagle's algorithm off (TCP_NODELAY) only
    on connections whose protocol says TCP. With Nagle on, the response body waited for the
    client's delayed ACK of the headers, 40 ms on every keep-alive request."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # Linux: accepted sockets inherit it
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise NMTError(f"serve: cannot listen on {host}:{port}: {e.strerror or e}") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def serve(models: list[str], options: ServeOptions) -> None:
    try:
        import uvicorn
    except ImportError:
        raise NMTError("serve: needs the serve extra: pip install 'nmt[serve]'") from None
    from nmt.decode.translator import load_translator
    from nmt.serve.app import build_app
    from nmt.serve.batcher import Batcher

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    log = logging.getLogger("nmt.serve")
    named = model_names(models)
    sock = bind(options.host, options.port)  # first: a busy port fails before minutes of loading
    try:
        translators = {
            # auto weighs int8 only without shortlists, which cut the output layer int8 replaces
            name: load_translator([path], {}, options.device, options.precision, not options.shortlists)
            for name, path in named.items()
        }
        translators = with_shortlists(translators, options.shortlists)
        for name, translator in translators.items():
            log.info(f"{name}: {translator.precision.why}")
    except BaseException:
        sock.close()
        raise
    batcher = Batcher(translators, options.max_batch, options.max_wait_ms, options.queue_size)
    app = build_app(translators, options.limits, batcher)
    host, port = sock.getsockname()[:2]
    url_host = f"[{host}]" if ":" in host else host
    log.info(f"serving {', '.join(translators)} on http://{url_host}:{port} (Ctrl-C stops)")
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")
    # uvicorn re-raises the signal that stopped it once it has shut down gracefully; with these
    # handlers in place that is a no-op, so a stop by SIGTERM or Ctrl-C returns and exits 0.
    previous = {sig: signal.signal(sig, lambda *_: None) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sock.close()
    log.info("stopped")
