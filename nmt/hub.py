"""`hf://user/repo[@revision]` model paths: a released model on the Hugging Face hub, downloaded
once into the hub library's own cache (`HF_HOME`), so `HF_HUB_OFFLINE=1` works from that cache.

No torch here: the torch-free runtime resolves hub paths too.
"""

from __future__ import annotations

import re
from pathlib import Path

from nmt.errors import NMTError

# "hf://user/repo@rev"; a pathlib.Path collapses the double slash, so "hf:/user/repo" too.
HUB_PATH = re.compile(r"^hf:/{1,2}(?P<repo>[^/@\s]+/[^/@\s]+)(?:@(?P<revision>[^\s]+))?$")


def is_hub_path(path: str | Path) -> bool:
    return str(path).startswith("hf:")


def resolve_model_path(path: str | Path) -> Path:
    """A local path as given; an `hf://` path as the local folder of its cached snapshot."""
    if not is_hub_path(path):
        return Path(path)
    match = HUB_PATH.match(str(path))
    if not match:
        raise NMTError(f"{path}: a hub model is hf://user/repo or hf://user/repo@revision")
    return snapshot(match["repo"], match["revision"])


def snapshot(repo: str, revision: str | None) -> Path:
    """The cached snapshot of `repo`, downloading it when the hub can be reached."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    where = f"hf://{repo}" + (f"@{revision}" if revision else "")
    try:
        return Path(snapshot_download(repo_id=repo, revision=revision))
    except HFValidationError as e:
        raise NMTError(f"{where}: not a valid hub repository name ({e})") from None
    except LocalEntryNotFoundError:
        raise NMTError(
            f"{where}: not in the local hub cache ({hub_cache()}) and the hub cannot be reached "
            "(offline, HF_HUB_OFFLINE=1, or no connection); download it once while online"
        ) from None
    except Exception as e:  # unknown repo or revision, no access, a hub error
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise NMTError(f"{where}: the hub could not provide this model ({reason})") from None


def hub_cache() -> str:
    from huggingface_hub import constants

    return constants.HF_HUB_CACHE
