"""The model card of a release (`README.md`): what the model translates, how it was built and
trained, and how well it does, with the sacreBLEU signatures that make the scores reproducible."""

from __future__ import annotations

from dataclasses import dataclass

from nmt.checkpoint import LoadedModel
from nmt.model.seq2seq import count_parameters
from nmt.version import VERSION


@dataclass
class TestScores:
    source: str  # the test source file
    sentences: int
    beam: int
    bleu: float
    chrf: float
    bleu_signature: str
    chrf_signature: str


def _data(loaded: LoadedModel) -> str:
    d = loaded.config.data
    if d.format == "hf":
        name = f"{d.hf_path}" + (f" ({d.hf_name})" if d.hf_name else "")
        return f"Hugging Face dataset `{name}`, split `{d.train}`"
    return f"text files `{d.dir}/{d.train}.{{{d.src_lang},{d.tgt_lang}}}`"


def _decoder(loaded: LoadedModel) -> str:
    dec = loaded.config.model.decoder
    style = (
        "Luong (RNN step, then attention)" if dec.style == "luong" else "Bahdanau (attention, then RNN step)"
    )
    if dec.style == "luong":
        style += ", input feeding" if dec.input_feeding else ", no input feeding"
    else:
        style += f", {dec.output} output"
    return f"{style}; LSTM {dec.layers} x {dec.hidden}, bridge `{dec.bridge}`"


def _budget(metrics: list[dict]) -> str:
    """The training budget actually spent, from the run's metrics.jsonl."""
    if not metrics:
        return "unknown (no metrics.jsonl next to the checkpoint)"
    steps = max(m.get("step", 0) for m in metrics)
    epochs = max((m["epoch"] for m in metrics if "epoch" in m), default=None)
    seconds = max((m["time"] for m in metrics if "time" in m), default=None)
    parts = [f"{steps} steps"]
    if epochs is not None:
        parts.append(f"{epochs} epochs")
    if seconds is not None:
        parts.append(f"{seconds / 60:.1f} minutes")
    best = [m["valid_bleu"] for m in metrics if "valid_bleu" in m]
    if best:
        parts.append(f"best validation BLEU {max(best):.2f}")
    return ", ".join(parts)


def model_card(
    loaded: LoadedModel,
    metrics: list[dict],
    scores: TestScores | None,
    fp16: bool,
    weights_bytes: int,
    name: str,
) -> str:
    cfg = loaded.config
    lines = [
        f"# {name}: {cfg.data.src_lang} -> {cfg.data.tgt_lang} attentional LSTM translation model",
        "",
        f"Released with nmt {VERSION}: `model.safetensors` (weights only), `config.yaml` (model, "
        "decoding and input settings), the SentencePiece model(s) and this card.",
        "",
        "| | |",
        "|---|---|",
        *(f"| {key} | {value} |" for key, value in _facts(loaded, metrics, fp16, weights_bytes)),
        "",
        "## Test scores",
        "",
        *_scores(scores),
        "",
        "## Use",
        "",
        "```bash",
        f"nmt translate -m {name} -i input.txt -o output.txt --beam 5",
        "```",
        "",
    ]
    return "\n".join(lines)


def _facts(loaded: LoadedModel, metrics: list[dict], fp16: bool, weights_bytes: int) -> list[tuple[str, str]]:
    """The card's table: languages, data, the model's parts, its size and its training budget."""
    cfg, tok = loaded.config, loaded.tokenizers
    m = cfg.model
    return [
        ("languages", f"{cfg.data.src_lang} -> {cfg.data.tgt_lang}"),
        ("data", _data(loaded)),
        ("encoder", f"bidirectional LSTM, {m.encoder.layers} x {m.encoder.hidden} per direction"),
        ("decoder", _decoder(loaded)),
        ("attention", f"`{m.attention.type}`"),
        ("embeddings", f"{m.embedding}" + (", tied with the output layer" if m.tie_embeddings else "")),
        (
            "tokenizer",
            f"SentencePiece {cfg.tokenizer.type}, "
            + (f"joint, {len(tok.src)} pieces" if tok.joint else f"{len(tok.src)} / {len(tok.tgt)} pieces"),
        ),
        ("parameters", f"{count_parameters(loaded.model):,}"),
        ("weights", f"{'fp16' if fp16 else 'fp32'}, {weights_bytes / 1e6:.2f} MB (safetensors)"),
        ("training budget", _budget(metrics)),
    ]


def _scores(scores: TestScores | None) -> list[str]:
    if scores is None:
        return ["Not measured (release with --test-src and --test-ref to add them)."]
    return [
        f"On `{scores.source}` ({scores.sentences} sentences), beam {scores.beam}:",
        "",
        f"- BLEU {scores.bleu:.2f} (`{scores.bleu_signature}`)",
        f"- chrF {scores.chrf:.2f} (`{scores.chrf_signature}`)",
    ]
