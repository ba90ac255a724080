"""Model files: training checkpoints, their averages, and release directories.

A checkpoint is one self-contained file with config, weights and tokenizer bytes; only plain
types are stored, so loading uses `torch.load(weights_only=True)`; writes are atomic. Each entry
(config, model, optimizer, ...) has a CRC-32 in `checksums`, computed from the values written
and checked against the values read: a file changed on disk since is refused in one line, and a
reader checks only what it uses (translating: config, model, tokenizers). A release directory
(written by `nmt release`) holds `model.safetensors`, `config.yaml`, the SentencePiece model(s)
and `manifest.json` (their sha256, written last), and loads without any pickle. `load_model`
takes any of them (a checkpoint, a run directory, a release directory, or `hf://user/repo`).
Weights that are not finite are refused wherever they load from.
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from nmt.config import Config, ModelConfig, config_from_dict, load_config, read_with_bases
from nmt.data.tokenizer import TokenizerPair
from nmt.errors import NMTError
from nmt.fileio import atomic_write, mismatch
from nmt.hub import is_hub_path, resolve_model_path
from nmt.jsonvalues import read_json
from nmt.model.seq2seq import Seq2Seq
from nmt.plugins import for_config, require, sha256
from nmt.rundir import BEST, CHECKPOINTS, LAST

FORMAT_VERSION = 1
RELEASE_WEIGHTS, RELEASE_CONFIG, RELEASE_MANIFEST = "model.safetensors", "config.yaml", "manifest.json"
ONNX_MARKER = "encoder.onnx"  # an `nmt export` directory: decoded by the onnx engine, not torch
CHECKSUMS = "checksums"  # {entry: CRC-32 of its value}, written with every checkpoint
TRANSLATING = ("config", "model", "tokenizers", "plugins")  # the entries a translator reads
PLUGINS = "plugins"  # a release's folder of its plugin files (`nmt.plugins`)


@dataclass
class LoadedModel:
    config: Config
    model: Seq2Seq
    tokenizers: TokenizerPair
    state: dict[str, Any]  # the whole checkpoint dict (step, optimiser state, ...)


def save_checkpoint(path: Path, cfg: Config, model: Seq2Seq, tok: TokenizerPair, **extra: Any) -> None:
    state = {
        "format_version": FORMAT_VERSION,
        "config": cfg.to_dict(),
        "model": model.state_dict(),
        "tokenizers": tok.to_state(),
        **extra,
    }
    if cfg.plugins:  # each plugin's name, sha256 and source: what loading the model needs
        state["plugins"] = [plugin.record() for plugin in for_config(cfg.plugins)]
    write_state(path, state)


def write_state(path: Path, state: dict[str, Any]) -> None:
    """Write a checkpoint dict atomically with the checksums of its entries, straight into the
    temp file: serialised into memory first, a checkpoint with its optimiser state (~160 MB for
    the bench model) took that much more memory, which the allocator then kept for the rest of
    the run. A full disk or a file size limit is one line naming `path`."""
    entries = {key: value for key, value in state.items() if key != CHECKSUMS}
    entries[CHECKSUMS] = {key: checksum(value) for key, value in entries.items()}
    atomic_write(path, lambda f: _save(entries, f))


class _KeepingErrors:
    """The file torch.save writes to, keeping the OS error of a failed write: torch's writer
    replaces it by a RuntimeError of its own ("unexpected pos 704 vs 598")."""

    def __init__(self, file: IO[bytes]):
        self.file, self.error = file, None

    def write(self, data) -> int:
        try:
            return self.file.write(data)
        except OSError as e:
            self.error = e
            raise

    def flush(self) -> None:
        self.file.flush()


def _save(state: dict[str, Any], file: IO[bytes]) -> None:
    """torch.save, with the OS error of a failed write raised as itself (atomic_open names the
    file in one line) rather than inside torch's RuntimeError."""
    keeping = _KeepingErrors(file)
    try:
        torch.save(state, keeping)
    except RuntimeError:
        if keeping.error is None:
            raise
        raise keeping.error from None


def checksum(value: Any) -> str:
    """The CRC-32 of a checkpoint entry's contents (tensors by dtype, shape and bytes)."""
    return f"{_fold(value, 0):08x}"


@functools.singledispatch
def _fold(value: Any, crc: int) -> int:
    """`crc` continued over `value`: numbers, strings and None by their repr."""
    return zlib.crc32(repr(value).encode(), crc)


@_fold.register
def _fold_tensor(value: torch.Tensor, crc: int) -> int:
    flat = value.detach().cpu().contiguous().reshape(-1)
    crc = zlib.crc32(f"{flat.dtype}{tuple(value.shape)}".encode(), crc)
    return zlib.crc32(flat.view(torch.uint8).numpy(), crc)


@_fold.register
def _fold_bytes(value: bytes, crc: int) -> int:
    return zlib.crc32(value, zlib.crc32(b"b", crc))


@_fold.register
def _fold_mapping(value: dict, crc: int) -> int:
    for key, item in value.items():
        crc = _fold(item, zlib.crc32(repr(key).encode(), crc))
    return zlib.crc32(b"}", crc)


@_fold.register(list)
@_fold.register(tuple)
def _fold_sequence(value: list | tuple, crc: int) -> int:
    for item in value:
        crc = _fold(item, zlib.crc32(b",", crc))
    return zlib.crc32(b"]", crc)


def verify(state: dict[str, Any], path: Path, entries: Iterable[str] | None = None) -> None:
    """Each of `entries` (all, when None) has the checksum it was written with, and the weights
    are finite. A checkpoint written before checksums is checked for finite weights only."""
    written = state.get(CHECKSUMS)
    if isinstance(written, dict):
        for entry in written if entries is None else entries:
            if entry in written and checksum(state.get(entry)) != written[entry]:
                raise NMTError(
                    f"{path}: damaged: its entry '{entry}' differs from the checksum written with it; "
                    "restore the file from a copy, or use another checkpoint (best.pt, last.pt, step-N.pt); "
                    "edited on purpose? save it with nmt.checkpoint.write_state"
                )
    if entries is None or "model" in entries:
        check_finite(state["model"], path)


def _finite(value: torch.Tensor) -> bool:
    """Whether every element is finite: its least and greatest are (NaN spreads to both). numpy,
    one thread: 4 ms for the bench model's weights, where torch.isfinite(value).all() took 320
    and torch.aminmax 3 to 95 on a busy machine."""
    array = value.detach().float().cpu().numpy()  # no copy for float32 on the CPU
    return bool(np.isfinite(array.min()) and np.isfinite(array.max()))


def check_finite(weights: dict[str, torch.Tensor], where: Path | str) -> None:
    """Weights with NaN or infinity translate every sentence to nothing: refused where they load."""
    for name, value in weights.items():
        if value.is_floating_point() and value.numel() and not _finite(value):
            raise NMTError(
                f"{where}: its weights are not finite ({name} holds NaN or infinity), so it cannot "
                "translate; use an earlier checkpoint of the run"
            )


def resolve_checkpoint(path: Path) -> Path:
    """A run directory means its best checkpoint (or last, if no validation has run yet)."""
    path = Path(path)
    if path.is_dir():
        for name in (BEST, LAST):
            if (path / CHECKPOINTS / name).is_file():
                return path / CHECKPOINTS / name
        raise NMTError(f"{path}: run directory has no {CHECKPOINTS}/{BEST} or {CHECKPOINTS}/{LAST}")
    if not path.is_file():
        raise NMTError(f"{path}: checkpoint not found")
    return path


def read_checkpoint(
    path: Path, device: torch.device | str = "cpu", mmap: bool = False, entries: Iterable[str] | None = None
) -> dict[str, Any]:
    """The checkpoint's contents, checked to be an nmt checkpoint of this format whose `entries`
    (all, when None) are as written (`verify`). `mmap` (CPU only): tensors stay in the file until
    touched, so a decoder never reads the optimiser state (`entries=TRANSLATING`)."""
    path = resolve_checkpoint(path)
    try:
        state = torch.load(path, map_location=device, weights_only=True, mmap=mmap)
    except Exception as e:  # torch raises many types for a file that is not a checkpoint
        raise NMTError(f"{path}: not an nmt checkpoint ({type(e).__name__})") from None
    if not isinstance(state, dict) or "format_version" not in state:
        raise NMTError(f"{path}: not an nmt checkpoint")
    missing = [key for key in ("config", "model", "tokenizers") if key not in state]
    if missing:
        raise NMTError(f"{path}: a damaged nmt checkpoint (no {', '.join(missing)})")
    if state["format_version"] != FORMAT_VERSION:
        raise NMTError(
            f"{path}: checkpoint format {state['format_version']} is not supported by this nmt "
            f"(format {FORMAT_VERSION}); use the nmt version that wrote it"
        )
    verify(state, path, entries)
    return state


def model_weights(state: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The model's weights, without the duplicate `decoder.W_s.*` entries that checkpoints of
    nmt 0.1 stored beside `decoder.output_layer.*` (the same tensors under a second name)."""
    return {k: v for k, v in state["model"].items() if not k.startswith("decoder.W_s.")}


def config_differences(ours: dict, theirs: dict, prefix: str = "") -> Iterator[tuple[str, Any, Any]]:
    """("section.key", ours, theirs) for each setting where a config (as a dict) differs from a
    checkpoint's, in order; a key the checkpoint's lacks (a setting newer than it) is none."""
    for key, value in ours.items():
        other = theirs.get(key, value)
        if isinstance(value, dict) and isinstance(other, dict) and key != "hf_data_files":
            yield from config_differences(value, other, f"{prefix}{key}.")
        elif value != other:
            yield f"{prefix}{key}", value, other


class _Unfilled(TorchFunctionMode):
    """Inside, nothing draws or fills a tensor's values (torch.nn.init, and the tensor methods
    modules fill their parameters with): they keep whatever their memory held."""

    SKIPPED = {getattr(nn.init, name) for name in dir(nn.init) if name.endswith("_") and name[0] != "_"}
    SKIPPED |= {torch.Tensor.uniform_, torch.Tensor.normal_, torch.Tensor.fill_, torch.Tensor.zero_}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in self.SKIPPED:  # each of them fills its first argument, `tensor`
            return args[0] if args else kwargs["tensor"]
        return func(*args, **(kwargs or {}))


def unfilled_model(cfg: ModelConfig, src_vocab: int, tgt_vocab: int) -> Seq2Seq:
    """The model of `cfg` for weights about to be loaded, without drawing initial values that
    loading overwrites at once (0.09 s of every `translate`'s start-up with an 8k vocabulary).
    Built with its values drawn where a buffer is not in its state dict (no load would fill it)."""
    with _Unfilled():
        model = Seq2Seq(cfg, src_vocab, tgt_vocab)
    if {name for name, _ in model.named_buffers()} - model.state_dict().keys():
        return Seq2Seq(cfg, src_vocab, tgt_vocab)
    return model


def load_checkpoint(path: Path, device: torch.device | str = "cpu") -> LoadedModel:
    """A ready model (eval mode, on `device`) with its config and tokenizers; the plugins it
    needs imported as their user allows (`nmt.plugins.require`)."""
    path = resolve_checkpoint(path)
    # on the CPU: mapped to a GPU, all of it would be read; checksums checked last, when the
    # entries are known to make a model (a damaged one that does not says what is wrong)
    state = read_checkpoint(path, mmap=True, entries=())
    if not isinstance(state["config"], dict):
        raise NMTError(f"{path}: a damaged nmt checkpoint (its config is not a mapping)")
    verify(state, path, ("plugins",))  # before any of them may run
    require(state.get("plugins"), str(path))
    cfg = config_from_dict(state["config"], source=f"{path} (its config)")
    try:
        tok = TokenizerPair.from_state(state["tokenizers"])
    except (KeyError, TypeError, RuntimeError, OSError):
        raise NMTError(f"{path}: a damaged nmt checkpoint (its tokenizer cannot be read)") from None
    model = unfilled_model(cfg.model, len(tok.src), len(tok.tgt))
    try:
        model.load_state_dict(model_weights(state))
    except (RuntimeError, TypeError, AttributeError) as e:
        detail = " ".join(str(e).split())[:200]
        raise NMTError(f"{path}: its weights do not match its config ({detail})") from None
    verify(state, path, TRANSLATING)
    model.to(device).eval()
    return LoadedModel(cfg, model, tok, state)


def average_checkpoints(paths: list[Path]) -> dict[str, Any]:
    """A checkpoint whose weights are the mean of the checkpoints' weights (computed in float64).

    Averaging only makes sense between snapshots of one model, so every checkpoint must have the
    first one's model config and tokenizers. The result keeps the first's config and tokenizers
    and no training state, so it translates but does not resume.
    """
    if len(paths) < 2:
        raise NMTError(f"averaging needs at least 2 checkpoints, got {len(paths)}")
    first = read_checkpoint(paths[0], entries=TRANSLATING)
    total = {name: value.double() for name, value in model_weights(first).items()}
    for path in paths[1:]:
        state = read_checkpoint(path, entries=TRANSLATING)
        if state["config"]["model"] != first["config"]["model"]:
            raise NMTError(
                f"{path}: its model config differs from {paths[0]}'s; only snapshots of one model average"
            )
        if state["tokenizers"] != first["tokenizers"]:
            raise NMTError(
                f"{path}: its vocabulary differs from {paths[0]}'s; only snapshots of one model average"
            )
        weights = model_weights(state)
        if weights.keys() != total.keys() or any(weights[k].shape != total[k].shape for k in total):
            raise NMTError(f"{path}: its weights do not match {paths[0]}'s (names or shapes)")
        for name, value in weights.items():
            total[name] += value.double()
    dtypes = {name: value.dtype for name, value in model_weights(first).items()}
    averaged = {name: (value / len(paths)).to(dtypes[name]) for name, value in total.items()}
    recorded = {"plugins": first["plugins"]} if "plugins" in first else {}
    return {
        "format_version": FORMAT_VERSION,
        "config": first["config"],
        "model": averaged,
        "tokenizers": first["tokenizers"],
        "averaged_from": [str(p) for p in paths],
        **recorded,
    }


def is_release(path: Path) -> bool:
    return Path(path).is_dir() and (Path(path) / RELEASE_WEIGHTS).is_file()


def load_release(directory: Path, device: torch.device | str = "cpu") -> LoadedModel:
    """A model from a release directory: YAML, SentencePiece and safetensors, no pickle at all;
    its files checked against its manifest, its weights against its own config and tokenizers.

    fp16 releases are widened back to fp32, the dtype every search runs in.
    """
    directory = Path(directory)
    check_manifest(directory)
    require(release_plugins(directory), str(directory))
    cfg = load_config(directory / RELEASE_CONFIG, run=False)
    tok = TokenizerPair.load(directory)
    weights = _release_weights(directory / RELEASE_WEIGHTS, device)
    model = unfilled_model(cfg.model, len(tok.src), len(tok.tgt))
    _check_fit(directory, weights, model.state_dict())
    check_finite(weights, directory / RELEASE_WEIGHTS)
    model.load_state_dict({k: v.float() for k, v in weights.items()}, strict=False)
    model.to(device).eval()
    return LoadedModel(cfg, model, tok, {})


def release_plugins(directory: Path) -> list[dict[str, str]]:
    """The records of the plugin files a release's config.yaml names (in its `plugins/`, whose
    sha256 the manifest holds)."""
    records = []
    for name in read_with_bases(directory / RELEASE_CONFIG)[0].get("plugins") or []:
        path = Path(name)
        if not (isinstance(name, str) and path.parent == (directory / PLUGINS).resolve() and path.is_file()):
            raise NMTError(f"{directory}: its {RELEASE_CONFIG} names a plugin outside its {PLUGINS}/ folder")
        data = path.read_bytes()
        source = data.decode("utf-8", errors="replace")
        records.append({"name": path.name, "sha256": sha256(data), "source": source, "path": ""})
    return records


def check_manifest(directory: Path) -> None:
    """The files listed in a release's manifest.json (its weights and tokenizers: config.yaml and
    the card are text a user may edit, and are checked by reading them) are as `nmt release`
    wrote them. A release from before manifests has none, and loads as before."""
    path = directory / RELEASE_MANIFEST
    if not path.is_file():
        return
    manifest = read_json(path, {"files": {str: dict}}, fix="make the release again (nmt release)")
    if problem := mismatch(directory, manifest["files"]):
        raise NMTError(
            f"{problem} in {RELEASE_MANIFEST}: the release changed since nmt release wrote it; "
            "download it or make it again"
        )


def _release_weights(path: Path, device: torch.device | str) -> dict[str, torch.Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(path, device=str(device))
    except (SafetensorError, OSError) as e:
        raise NMTError(f"{path}: not a readable safetensors file ({e})") from None


def _check_fit(directory: Path, weights: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
    """The release's weights are those of the model its config.yaml and tokenizers describe:
    the same names (tied ones stored once) and shapes."""
    tied = {name for name in expected if name not in weights and _shares_storage(name, weights, expected)}
    missing = set(expected) - set(weights) - tied
    unknown = set(weights) - set(expected)
    if missing or unknown:
        raise NMTError(
            f"{directory}: the weights do not fit the model of its {RELEASE_CONFIG} "
            f"(missing {sorted(missing)[:3]}, unexpected {sorted(unknown)[:3]})"
        )
    for name, value in weights.items():
        if value.shape != expected[name].shape:
            raise NMTError(
                f"{directory / RELEASE_WEIGHTS}: {name} has the shape {tuple(value.shape)}, but the "
                f"model of its {RELEASE_CONFIG} and tokenizers needs {tuple(expected[name].shape)}"
            )


def _shares_storage(name: str, weights: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> bool:
    """Whether parameter `name` is tied to one that the weights do hold (tied embeddings)."""
    pointer = expected[name].data_ptr()
    return any(expected[other].data_ptr() == pointer for other in weights if other in expected)


def weights_file(path: Path | str) -> Path:
    """The file that holds the weights of whatever a user gives as `-m` (as `load_model` reads
    it): a checkpoint file, a run directory's best checkpoint, a release's weights."""
    local = resolve_model_path(path)
    return local / RELEASE_WEIGHTS if is_release(local) else resolve_checkpoint(local)


def load_model(path: Path | str, device: torch.device | str = "cpu") -> LoadedModel:
    """Whatever a user gives as `-m`: a checkpoint file, a run directory (its best checkpoint), a
    release directory, or `hf://user/repo[@revision]` (a release on the hub, cached)."""
    local = resolve_model_path(path)
    if is_release(local):
        return load_release(local, device)
    if (local / ONNX_MARKER).is_file():
        raise NMTError(f"{path}: is an ONNX export; decode it with --engine onnx")
    if is_hub_path(path):
        raise NMTError(f"{path}: the hub repository holds no {RELEASE_WEIGHTS}; is it an nmt release?")
    return load_checkpoint(local, device)
