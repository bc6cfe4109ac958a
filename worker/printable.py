"""Server text made safe for a terminal: the one function every human-readable view goes through.

A server's ``statusMessage``, result text, error message or input prompt may carry terminal control
sequences (``ESC[…``, BEL, CR that overwrites a line, NUL) or Unicode bidirectional controls that reorder
what the reader sees (U+202E). Human-readable output renders them as visible escapes (``\\x1b``,
``\\u202e``); ``--json`` output is never passed through here and stays byte-exact.
"""

from __future__ import annotations

import re
from typing import Any

#: Bidirectional formatting controls (ALM, LRM, RLM, LRE…RLO, LRI…PDI).
_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_UNSAFE = re.compile(f"[\x00-\x1f\x7f-\x9f{_BIDI}]")
_UNSAFE_KEEP_NL = re.compile(f"[\x00-\x09\x0b-\x1f\x7f-\x9f{_BIDI}]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group(0))
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def printable(text: Any, *, multiline: bool = False) -> str:
    """``text`` with C0/C1 controls, DEL and bidi controls shown as escapes.

    ``multiline`` keeps ``\\n`` (a result's text); one-line fields (status lines, names, messages) escape it.
    ``None`` is shown as the empty string; anything else as its ``str``.
    """
    if text is None:
        return ""
    s = text if isinstance(text, str) else str(text)
    return (_UNSAFE_KEEP_NL if multiline else _UNSAFE).sub(_escape, s)


__all__ = ["printable"]
