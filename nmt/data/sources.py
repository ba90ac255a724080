"""Read parallel text for one split: plain text files, or anything `datasets.load_dataset` reads.

Both paths return the same thing, a list of (source, target) string pairs, so nothing downstream
knows where the data came from.
"""

from __future__ import annotations

from pathlib import Path

from nmt.config import DataConfig
from nmt.errors import NMTError
from nmt.fileio import read_lines

Pairs = list[tuple[str, str]]


def split_name(cfg: DataConfig, split: str) -> str:
    """The configured name of split `train`, `valid` or `test`."""
    return {"train": cfg.train, "valid": cfg.valid, "test": cfg.test}[split]


def text_path(cfg: DataConfig, split: str, lang: str) -> Path:
    return Path(cfg.dir) / f"{split_name(cfg, split)}.{lang}"


def read_parallel(src_path: Path, tgt_path: Path) -> Pairs:
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    if len(src) != len(tgt):
        raise NMTError(
            f"{src_path} has {len(src)} lines but {tgt_path} has {len(tgt)}: "
            "parallel files must be line-aligned"
        )
    return list(zip(src, tgt, strict=True))


def load_split(cfg: DataConfig, split: str) -> Pairs:
    if cfg.format == "text":
        return read_parallel(text_path(cfg, split, cfg.src_lang), text_path(cfg, split, cfg.tgt_lang))
    return _load_hf_split(cfg, split)


def _load_hf_split(cfg: DataConfig, split: str) -> Pairs:
    import datasets
    from datasets.exceptions import DatasetNotFoundError

    path = cfg.hf_path
    looks_local = path.startswith((".", "/", "~")) or Path(path).exists()
    if looks_local and not Path(path).expanduser().exists():
        # A missing relative path would otherwise be taken for a hub id and retried for ~23 s.
        raise NMTError(f"data.hf_path: {path} does not exist")
    name = split_name(cfg, split)
    try:
        ds = datasets.load_dataset(
            str(Path(path).expanduser()) if looks_local else path,
            cfg.hf_name,
            data_files=cfg.hf_data_files,
            split=name,
        )
    except (ConnectionError, DatasetNotFoundError) as e:
        raise NMTError(
            f"data.hf_path: cannot load {path!r} from the Hugging Face hub ({type(e).__name__}); "
            "check the id and your network, or point data.hf_path at a local copy "
            "(set HF_HUB_OFFLINE=1 to fail fast)"
        ) from None
    except ValueError as e:  # datasets reports an unknown split name this way
        raise NMTError(f"data: {path!r} has no split {name!r} ({str(e).splitlines()[0]})") from None
    return dataset_pairs(ds, cfg.src_lang, cfg.tgt_lang, where=f"{path}[{name}]")


def dataset_pairs(ds, src: str, tgt: str, where: str) -> Pairs:
    """Pairs from either common layout: a `translation` dict column, or one column per language."""
    columns = ds.column_names
    if "translation" in columns:
        rows = ds["translation"]
        try:
            return [(row[src], row[tgt]) for row in rows]
        except KeyError as e:
            raise NMTError(f"{where}: translation column has no language {e}") from None
    if src in columns and tgt in columns:
        return list(zip(ds[src], ds[tgt], strict=True))
    raise NMTError(
        f"{where}: cannot find {src!r}/{tgt!r} columns or a 'translation' column "
        f"(columns found: {', '.join(columns)})"
    )
