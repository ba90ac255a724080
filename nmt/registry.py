"""One way to choose an implementation by its config name.

A class that lists `Registry` among its bases is a root with a registry of its own; each subclass
declared with a name (`class Dot(Attention, name="dot")`) registers there, so a config value
picks a class without an if/else chain, and adding one is a subclass and nothing else.
"""

from __future__ import annotations

from typing import Any, ClassVar


class Registry:
    registry: ClassVar[dict[str, type]]

    def __init_subclass__(cls, name: str | None = None, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        if Registry in cls.__bases__:
            cls.registry = {}
        if name:
            cls.registry[name] = cls

    @classmethod
    def build(cls, name: str, *args: Any, **kwargs: Any):
        """An instance of the subclass registered as `name`."""
        return cls.registry[name](*args, **kwargs)
