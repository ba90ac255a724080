"""The toy model every server test serves, trained once for the whole session."""

import pytest

from tests.test_end_to_end import train_toy


@pytest.fixture(scope="session")
def model(toy_dir, tmp_path_factory):
    return train_toy(
        toy_dir, tmp_path_factory.mktemp("serve") / "run", "train.max_steps=40", "data.max_len=12"
    )
