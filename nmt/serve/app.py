"""The Starlette application: routes, JSON errors, one log line per request.

Handlers never decode: they check the request, queue it on the `Batcher` and await its future,
so the event loop stays free for other clients. Every error is one JSON object {"error": "..."}.
"""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import asynccontextmanager
from dataclasses import asdict
from pathlib import Path

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from nmt.assets import heatmap_js
from nmt.decode.translator import Translator
from nmt.errors import NMTError
from nmt.serve.batcher import Batcher, QueueFullError
from nmt.serve.requests import Limits, RequestError, TranslateRequest, parse_translate, translation_json
from nmt.version import VERSION

log = logging.getLogger("nmt.serve")
PAGE = Path(__file__).with_name("page.html")


def error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


class RequestLog:
    """ASGI middleware: `METHOD PATH STATUS N sentences MS ms`, one line per request."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start, status = time.perf_counter(), [500]

        async def send_and_note(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        finally:
            sentences = scope.get("state", {}).get("sentences", 0)
            ms = (time.perf_counter() - start) * 1000
            log.info(f"{scope['method']} {scope['path']} {status[0]} {sentences} sentences {ms:.1f} ms")


def build_app(translators: dict[str, Translator], limits: Limits, batcher: Batcher) -> Starlette:
    """The server for `translators` (name -> translator; the first is the default)."""

    default_beams = {name: t.cfg.beam for name, t in translators.items()}

    async def translate(request: Request) -> Response:
        try:
            body = await read_body(request, limits.max_body_bytes, limits.timeout_s)
            req = parse_translate(body, limits, default_beams)
        except RequestError as e:  # after a 408 the rest of the body may still come: not a request
            return error(e.status, str(e), {"Connection": "close"} if e.status == 408 else None)
        request.state.sentences = len(req.sentences)
        if not req.sentences:
            return JSONResponse({"model": req.settings.model, "translations": []})
        return await translations(req, batcher, limits.timeout_s)

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok", "waiting": batcher.waiting})

    async def info(request: Request) -> Response:
        return JSONResponse(server_info(translators, limits, batcher))

    @asynccontextmanager
    async def lifespan(app: Starlette):
        batcher.start()
        try:
            yield
        finally:
            await asyncio.to_thread(batcher.close)  # in-flight requests are answered first

    app = Starlette(
        routes=[
            Route("/", page, methods=["GET"]),
            Route("/heatmap.js", heatmap, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
            Route("/info", info, methods=["GET"]),
            Route("/translate", translate, methods=["POST"]),
        ],
        exception_handlers={HTTPException: http_error, Exception: server_error},
        lifespan=lifespan,
    )
    # /translate/ is an unknown path (404), not a redirect built from the client's Host header.
    app.router.redirect_slashes = False
    app.add_middleware(RequestLog)
    return app


async def read_body(request: Request, max_bytes: int, timeout_s: float) -> bytes:
    """The request's body, refused (413) past `max_bytes` as soon as that shows, and (408) when
    it has not all come within `timeout_s`: a client that stops sending holds no handler."""
    length = request.headers.get("content-length")
    if length and length.isdigit() and int(length) > max_bytes:
        raise RequestError(413, f"the request body is {length} bytes, at most {max_bytes}")
    body = bytearray()  # not bytes: += on bytes copies the whole body for every chunk
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in request.stream():
                body += chunk
                if len(body) > max_bytes:
                    raise RequestError(413, f"the request body is over {max_bytes} bytes")
    except ClientDisconnect:
        raise RequestError(400, "the client disconnected before sending the whole body") from None
    except TimeoutError:
        raise RequestError(408, f"the request body did not arrive within {timeout_s:g} s") from None
    return bytes(body)


async def translations(req: TranslateRequest, batcher: Batcher, timeout_s: float) -> Response:
    """The request's sentences queued on the batcher and their translations awaited: the JSON
    answer, or the error of a full queue (503), a timeout (504) or a failed decoding."""
    try:
        job, future = batcher.submit(req.settings, req.sentences, req.prefixes, req.constraints)
    except QueueFullError as e:
        return error(503, f"the server is busy ({e}); retry shortly", {"Retry-After": "1"})
    try:
        results = await asyncio.wait_for(future, timeout_s)
    except TimeoutError:
        job.abandoned = True
        why = f"the translation took longer than {timeout_s:g} s; send fewer sentences"
        return error(504, why)
    except NMTError as e:
        return error(422, str(e))
    except Exception as e:  # the worker logged the traceback
        return error(500, f"internal error while decoding ({type(e).__name__})")
    if req.markups:
        translator = batcher.translators[req.settings.model]
        results = [translator.carried(m, t) for m, t in zip(req.markups, results, strict=True)]
    n = req.settings.nbest
    body = [translation_json(t, n, req.attention) for t in results]
    return JSONResponse({"model": req.settings.model, "translations": body})


def server_info(translators: dict[str, Translator], limits: Limits, batcher: Batcher) -> dict:
    """`GET /info`: the version, every model with its decode settings, the limits and batching."""
    models = [
        {"name": name, **asdict(t.info), "decode": asdict(t.cfg), "precision": t.precision.name}
        for name, t in translators.items()
    ]
    batching = {"max_batch": batcher.max_batch, "max_wait_ms": batcher.max_wait_ms}
    return {
        "version": VERSION,
        "default_model": next(iter(translators)),
        "models": models,
        "limits": {**limits.to_dict(), "queue_size": batcher.queue_size},
        "batching": batching,
    }


async def page(request: Request) -> Response:
    return HTMLResponse(PAGE.read_text(encoding="utf-8"))


async def heatmap(request: Request) -> Response:
    return Response(heatmap_js(), media_type="text/javascript")  # the explorer's heatmap


async def http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return error(exc.status_code, f"{request.method} {request.url.path}: {exc.detail}", exc.headers)


async def server_error(request: Request, exc: Exception) -> Response:
    log.exception(f"{request.method} {request.url.path} failed")
    return error(500, f"internal error ({type(exc).__name__})")
