"""`nmt serve`."""

from __future__ import annotations

from typing import Annotated

import typer

from nmt.cli.app import (
    SPEED,
    STEERING,
    DeviceOption,
    PluginOption,
    PrecisionOption,
    TrustPluginOption,
    app,
    model_option,
    use_plugins,
    user_errors,
)

SERVER = "Server"
ModelsOption = Annotated[
    list[str],
    model_option(
        "Checkpoint or run directory; repeat to serve several, chosen by name per request.", "[NAME=]PATH"
    ),
]
HostOption = Annotated[
    str,
    typer.Option(
        metavar="ADDR", help="Address to listen on (0.0.0.0: every interface).", rich_help_panel=SERVER
    ),
]
PortOption = Annotated[
    int,
    typer.Option(min=0, max=65535, metavar="INT", help="Port (0: any free port).", rich_help_panel=SERVER),
]
MaxBatchOption = Annotated[
    int, typer.Option(min=1, metavar="INT", help="Sentences decoded together at most.", rich_help_panel=SPEED)
]
MaxWaitOption = Annotated[
    float,
    typer.Option(
        min=0, metavar="MS", help="How long an idle worker waits for more requests.", rich_help_panel=SPEED
    ),
]
QueueOption = Annotated[
    int,
    typer.Option(
        min=1, metavar="INT", help="Requests waiting before 503 Retry-After.", rich_help_panel=SERVER
    ),
]
SentencesOption = Annotated[
    int, typer.Option(min=1, metavar="INT", help="Sentences per request.", rich_help_panel=SERVER)
]
CharsOption = Annotated[
    int, typer.Option(min=1, metavar="INT", help="Characters per sentence.", rich_help_panel=SERVER)
]
TimeoutOption = Annotated[
    float,
    typer.Option(
        min=0.001,
        metavar="SECONDS",
        help="Answer 408 when a request's body, or 504 when its translation, takes longer than this.",
        rich_help_panel=SERVER,
    ),
]
ShortlistOption = Annotated[
    list[str] | None,
    typer.Option(
        metavar="[NAME=]PATH",
        help="A lexical shortlist (nmt shortlist) for the model NAME (or the one served); repeatable.",
        rich_help_panel=STEERING,
    ),
]


@app.command()
@user_errors
def serve(
    model: ModelsOption,
    host: HostOption = "127.0.0.1",
    port: PortOption = 8000,
    max_batch: MaxBatchOption = 32,
    max_wait_ms: MaxWaitOption = 2.0,
    queue_size: QueueOption = 256,
    max_sentences: SentencesOption = 64,
    max_chars: CharsOption = 1000,
    timeout: TimeoutOption = 30.0,
    device: DeviceOption = "auto",
    precision: PrecisionOption = None,
    shortlist: ShortlistOption = None,
    plugin: PluginOption = None,
    trust_plugin: TrustPluginOption = False,
) -> None:
    """Serve translations over HTTP, with a live page at / (nmt serve -m runs/toy)."""
    from nmt.serve.requests import Limits
    from nmt.serve.server import ServeOptions
    from nmt.serve.server import serve as run_server

    use_plugins(plugin, trust_plugin)
    limits = Limits(max_sentences=max_sentences, max_chars=max_chars, timeout_s=timeout)
    options = ServeOptions(
        host, port, device, max_batch, max_wait_ms, queue_size, limits, tuple(shortlist or ()), precision
    )
    run_server(model, options)
