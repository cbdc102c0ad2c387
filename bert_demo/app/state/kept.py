"""The latest answers of one kind, kept by what they were asked, the least recently used going first: the models the
catalogue has loaded, the shares of a recipe's 1,000 draws, a forward pass walked one step at a time."""
from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any


class Kept(OrderedDict):
    """At most `most` answers by key, newest last. `make` runs outside the lock: a slow answer (a download, 1,000
    draws) must not hold up the answers already kept; two threads asking for the same new key may both make it."""

    def __init__(self, most: int):
        super().__init__()
        self.most, self.lock = most, threading.Lock()

    def kept(self, key: Hashable, make: Callable[[], Any]) -> Any:
        """The answer kept under `key`, or `make()`'s, kept now."""
        with self.lock:
            if key in self:
                self.move_to_end(key)
                return self[key]
        answer = make()
        with self.lock:
            self[key] = answer
            while len(self) > self.most:
                self.popitem(last=False)
        return answer
