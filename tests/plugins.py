"""The example plugins of docs/plugins (location-aware and coverage attention, both stateful),
imported into the test process for the tests of plugins and stateful attention."""

from pathlib import Path

from nmt import plugins

EXAMPLES = Path(__file__).resolve().parents[1] / "docs" / "plugins"
STATEFUL = {"location": EXAMPLES / "location.py", "coverage": EXAMPLES / "coverage.py"}


def load_examples() -> list[str]:
    """Both examples imported (once a process); their attention names."""
    for path in STATEFUL.values():
        plugins.load_file(path)
    return sorted(STATEFUL)
