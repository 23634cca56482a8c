"""Text from a server is data: strip what a terminal would interpret.

Removes ANSI/VT escape sequences (CSI, OSC — window titles, hyperlinks, clipboard —,
DCS, …) and every other control character except newline and tab, so that neither the
dashboard, the headless output nor a report lets a server drive the user's terminal.
Rich/Textual markup is neutralised where text is displayed (``rich.text.Text``), not here.
"""

from __future__ import annotations

import re

_ESC_SEQ = re.compile(
    r"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC ... BEL or ST
    r"|\x1b[P^_X][^\x1b]*(?:\x1b\\)?"  # DCS, PM, APC, SOS ... ST
    r"|\x1b\[[0-?]*[ -/]*[@-~]"  # CSI
    r"|\x1b[@-Z\\-_]"  # other 2-byte escapes
    r"|\x9b[0-?]*[ -/]*[@-~]"  # 8-bit CSI
    r"|\x9d[^\x07\x9c]*(?:\x07|\x9c)?"  # 8-bit OSC
)
_CTRL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def clean_text(s: str, keep_newlines: bool = True) -> str:
    """Remove escape sequences and control characters from server-supplied text."""
    s = _ESC_SEQ.sub("", s)
    s = _CTRL.sub("", s)
    if not keep_newlines:
        s = s.replace("\n", " ").replace("\t", " ")
    return s
