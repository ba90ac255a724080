"""`-m hf://user/repo[@revision]`: a release read from the hub library's cache, never the network
(tests/conftest.py sets HF_HUB_OFFLINE=1 and a temporary HF_HOME)."""

import shutil
from pathlib import Path

import pytest

from nmt.errors import NMTError
from nmt.hub import HUB_PATH, resolve_model_path
from tests.ship.conftest import invoke

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def cache_release(release_dir, repo: str) -> None:
    """Lay `release_dir` out as huggingface_hub caches a downloaded snapshot of `repo`."""
    from huggingface_hub import constants
    from huggingface_hub.file_download import repo_folder_name

    folder = Path(constants.HF_HUB_CACHE) / repo_folder_name(repo_id=repo, repo_type="model")
    shutil.copytree(release_dir, folder / "snapshots" / COMMIT)
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text(COMMIT)


@pytest.fixture(scope="module")
def cached(toy_run, tmp_path_factory):
    release = tmp_path_factory.mktemp("hub") / "release"
    invoke("release", toy_run, "-o", release)
    cache_release(release, "nmt-tests/toy")
    return release


def test_hub_paths_parse():
    assert HUB_PATH.match("hf://user/repo")["repo"] == "user/repo"
    match = HUB_PATH.match("hf:/user/repo@v1.0")  # as pathlib.Path leaves it
    assert (match["repo"], match["revision"]) == ("user/repo", "v1.0")
    with pytest.raises(NMTError, match="hf://user/repo or hf://user/repo@revision"):
        resolve_model_path("hf://just-a-name")


def test_translate_from_the_hub_cache_offline(cached, toy_dir, tmp_path):
    a, b, c = tmp_path / "a.txt", tmp_path / "b.txt", tmp_path / "c.txt"
    invoke("translate", "-m", cached, "-i", toy_dir / "test.human", "-o", a, "-q")
    invoke("translate", "-m", "hf://nmt-tests/toy", "-i", toy_dir / "test.human", "-o", b, "-q")
    invoke("translate", "-m", f"hf://nmt-tests/toy@{COMMIT}", "-i", toy_dir / "test.human", "-o", c, "-q")
    assert a.read_bytes() == b.read_bytes() == c.read_bytes()
    assert resolve_model_path("hf://nmt-tests/toy").name == COMMIT


def test_a_model_neither_cached_nor_reachable_is_one_line(cached):
    result = invoke("translate", "-m", "hf://nmt-tests/absent", "-i", "/dev/null", code=2)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "hf://nmt-tests/absent: not in the local hub cache" in lines[0]
