"""The latest answers of one kind, kept by what they were asked, the least recently used going first: the models the
catalogue has loaded, the shares of a recipe's 1,000 draws, a forward pass walked one step at a time. Bounded by
count and by bytes, so that no run of questions can make the app hold more than its ceiling (docs/limits.md)."""
from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any


class Kept(OrderedDict):
    """At most `most` answers by key, newest last, and at most `max_bytes` of them as `size` counts an answer's
    bytes: an answer bigger than that alone is answered, not kept. `make` runs outside the lock: a slow answer (a
    download, 1,000 draws) must not hold up the answers already kept; two threads asking for the same new key may
    both make it."""

    def __init__(self, most: int, max_bytes: int | None = None, size: Callable[[Any], int] = lambda answer: 0):
        super().__init__()
        self.most, self.max_bytes, self.size, self.lock = most, max_bytes, size, threading.Lock()
        self.sizes: dict[Hashable, int] = {}

    @property
    def bytes(self) -> int:
        """The bytes of the answers kept now, as `size` counts them."""
        return sum(self.sizes.values())

    def kept(self, key: Hashable, make: Callable[[], Any]) -> Any:
        """The answer kept under `key`, or `make()`'s, kept now where it fits."""
        with self.lock:
            if key in self:
                self.move_to_end(key)
                return self[key]
        answer = make()
        size = self.size(answer)
        if self.max_bytes is not None and size > self.max_bytes:
            return answer
        with self.lock:
            self[key], self.sizes[key] = answer, size
            self.move_to_end(key)
            while len(self) > self.most or (self.max_bytes is not None and self.bytes > self.max_bytes):
                oldest, _ = self.popitem(last=False)
                del self.sizes[oldest]
        return answer


class ByVisitor:
    """Answers computed for one visitor, kept for that visitor alone (a forward pass, a training step's gradients):
    every key begins with the visitor, given apart from what was asked, so that no caller can write a key that leaves
    them out and another visitor's question never finds them. None stands for this host's own calls (a script, a
    test), which share their answers. Bounded as `Kept` bounds, over every visitor together."""

    def __init__(self, most: int, max_bytes: int | None = None, size: Callable[[Any], int] = lambda answer: 0):
        self._kept = Kept(most, max_bytes, size)

    def kept(self, visitor: str | None, asked: tuple, make: Callable[[], Any]) -> Any:
        """The answer kept for `visitor` under `asked`, or `make()`'s, kept now for them alone."""
        if visitor is not None and not isinstance(visitor, str):
            raise TypeError(f"a visitor is their identity (a str) or None, not {type(visitor).__name__}")
        return self._kept.kept((None if visitor is None else str(visitor), asked), make)

    @property
    def bytes(self) -> int:
        return self._kept.bytes

    def items(self) -> list[tuple[tuple, Any]]:
        """((visitor, asked), answer) for every answer kept, the oldest first."""
        with self._kept.lock:
            return list(self._kept.items())
