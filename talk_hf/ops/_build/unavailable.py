"""The error every step of finding, checking, building and loading a compiled backend raises."""

from __future__ import annotations


class ExtensionUnavailable(RuntimeError):
    """A compiled backend cannot be used here; ``reason`` says why, ``fix`` what to do."""

    def __init__(self, kind: str, reason: str, fix: str):
        self.kind, self.reason, self.fix = kind, reason, fix
        super().__init__(f"the talk_hf {kind} extension is unavailable: {reason}. Fix: {fix}")
