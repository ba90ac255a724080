"""`nmt serve`."""

from __future__ import annotations

from typing import Annotated

import typer

from nmt.cli.app import DeviceOption, PrecisionOption, app, model_option, user_errors


@app.command()
@user_errors
def serve(
    model: Annotated[
        list[str],
        model_option(
            "Checkpoint or run directory; repeat to serve several, chosen by name per request.", "[NAME=]PATH"
        ),
    ],
    host: Annotated[
        str, typer.Option(metavar="ADDR", help="Address to listen on (0.0.0.0: every interface).")
    ] = "127.0.0.1",
    port: Annotated[
        int, typer.Option(min=0, max=65535, metavar="INT", help="Port (0: any free port).")
    ] = 8000,
    max_batch: Annotated[
        int, typer.Option(min=1, metavar="INT", help="Sentences decoded together at most.")
    ] = 32,
    max_wait_ms: Annotated[
        float, typer.Option(min=0, metavar="MS", help="How long an idle worker waits for more requests.")
    ] = 2.0,
    queue_size: Annotated[
        int, typer.Option(min=1, metavar="INT", help="Requests waiting before 503 Retry-After.")
    ] = 256,
    max_sentences: Annotated[int, typer.Option(min=1, metavar="INT", help="Sentences per request.")] = 64,
    max_chars: Annotated[int, typer.Option(min=1, metavar="INT", help="Characters per sentence.")] = 1000,
    timeout: Annotated[
        float,
        typer.Option(
            min=0.001,
            metavar="SECONDS",
            help="Answer 408 when a request's body, or 504 when its translation, takes longer than this.",
        ),
    ] = 30.0,
    device: DeviceOption = "auto",
    precision: PrecisionOption = None,
    shortlist: Annotated[
        list[str] | None,
        typer.Option(
            metavar="[NAME=]PATH",
            help="A lexical shortlist (nmt shortlist) for the model NAME (or the one served); repeatable.",
        ),
    ] = None,
) -> None:
    """Serve translations over HTTP, with a live page at / (nmt serve -m runs/toy)."""
    from nmt.serve.requests import Limits
    from nmt.serve.server import ServeOptions
    from nmt.serve.server import serve as run_server

    limits = Limits(max_sentences=max_sentences, max_chars=max_chars, timeout_s=timeout)
    options = ServeOptions(
        host, port, device, max_batch, max_wait_ms, queue_size, limits, tuple(shortlist or ()), precision
    )
    run_server(model, options)
