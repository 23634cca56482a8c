"""Everything tokmon writes for a person or a program passes through here.

Text from a server or a file is data. ``clean_text`` removes ANSI/VT escape sequences
(CSI, OSC -- window titles, hyperlinks, clipboard --, DCS, …) and every other control
character except newline and tab, and replaces every registered secret (the API key,
URL credentials, custom header values) with ``<redacted>``, so that neither the
dashboard, the headless output nor a report lets a server drive the user's terminal or
echo a key back into a file.

The sinks below are the only places tokmon writes text: ``say`` (the terminal),
``write_text`` (report and summary files), ``dumps`` (strict JSON) and ``csv_cell``.
They clean what they write, whole, so a string that came from a server cannot reach an
output by a path that forgot to clean it; ``tests/test_hostile.py`` keeps every other
``print`` and ``sys.std*.write`` out of the package. Rich/Textual markup is neutralised
where text is displayed (``rich.text.Text``), not here.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import shutil
import stat
import sys
import textwrap
from pathlib import Path
from typing import IO, Any

_ESC_SEQ = re.compile(
    r"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC ... BEL or ST
    r"|\x1b[P^_X][^\x1b]*(?:\x1b\\)?"  # DCS, PM, APC, SOS ... ST
    r"|\x1b\[[0-?]*[ -/]*[@-~]"  # CSI
    r"|\x1b[@-Z\\-_]"  # other 2-byte escapes
    r"|\x9b[0-?]*[ -/]*[@-~]"  # 8-bit CSI
    r"|\x9d[^\x07\x9c]*(?:\x07|\x9c)?"  # 8-bit OSC
)
_CTRL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_SURROGATE = re.compile("[\ud800-\udfff]")
REDACTED = "<redacted>"
# Shorter values are too likely to be ordinary text to scrub everywhere (they are still
# redacted where they are known to be secret: headers, the command line, settings).
MIN_SECRET = 6
_SECRETS: list[str] = []


def valid(obj: Any) -> Any:
    """``obj`` (parsed JSON) with every lone UTF-16 surrogate in its strings and keys
    replaced by U+FFFD: valid JSON may escape one (``"m\\ud800x"``), and such a string can
    be neither encoded nor read back from a recording. Applied once, where text from a
    server or a file enters (``loads``)."""
    if isinstance(obj, str):
        return _SURROGATE.sub("\ufffd", obj)
    if isinstance(obj, dict):
        return {valid(k): valid(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [valid(v) for v in obj]
    return obj


def might_hold_surrogates(raw: str | bytes) -> bool:
    """Whether JSON text may hold an escaped surrogate (a cheap test before ``valid``;
    text decoded from UTF-8 holds no raw one)."""
    if isinstance(raw, bytes):
        return b"\\ud" in raw or b"\\uD" in raw
    return "\\ud" in raw or "\\uD" in raw


# every control character but the newline, each as one visible character: a tab as a
# space, the rest (ESC among them, so no sequence survives) as U+FFFD
_VISIBLE = {c: "\ufffd" for c in (*range(0x20), *range(0x7F, 0xA0))} | {0x0A: None, 0x09: " "}
del _VISIBLE[0x0A]


def visible(s: str) -> str:
    """``s`` with every control character made one visible character, so the text keeps
    its length (the styled spans of a drawn line stay where they were) and nothing in it
    can drive a terminal: the dashboard's last gate, whatever a string's source (a live
    run, a replay, an attached view's frame). Secrets are scrubbed where text is made."""
    return s.translate(_VISIBLE)


def add_secret(value: str | None) -> None:
    """Scrub ``value`` from every output of this process from now on."""
    if value and len(value) >= MIN_SECRET and value not in _SECRETS:
        _SECRETS.append(value)
        _SECRETS.sort(key=len, reverse=True)  # a longer secret first: it may hold another


def scrub(s: str) -> str:
    for sec in _SECRETS:
        if sec in s:
            s = s.replace(sec, REDACTED)
    return s


def clean_text(s: str, keep_newlines: bool = True) -> str:
    """Remove escape sequences, control characters and secrets from untrusted text."""
    s = _ESC_SEQ.sub("", s)
    s = _CTRL.sub("", s)
    if _SECRETS:
        s = scrub(s)
    if not keep_newlines:
        s = s.replace("\n", " ").replace("\t", " ")
    return s


def say(text: str = "", *, err: bool = False, flush: bool = False, fit: bool = False) -> None:
    """Write one message (a line, or lines) to the terminal, cleaned. With ``fit``, lines
    wider than a terminal are wrapped at its width on word boundaries (the terminal
    would cut them mid-word: `exac` / `t in 100%`); to a pipe or a file they stay whole."""
    stream = sys.stderr if err else sys.stdout
    text = clean_text(text)
    if fit and stream.isatty():
        text = fit_lines(text, shutil.get_terminal_size().columns)
    stream.write(text + "\n")
    if flush:
        stream.flush()


def fit_lines(text: str, width: int) -> str:
    """Each line wider than `width` wrapped on word boundaries, continued under its own
    indent plus two; a word longer than the width stays whole (textwrap: the standard
    library's word wrapping, with no word broken and no hyphen split)."""
    out: list[str] = []
    for line in text.split("\n"):
        if len(line) <= width:
            out.append(line)
            continue
        indent = line[: len(line) - len(line.lstrip(" "))]
        out += textwrap.wrap(
            line,
            width=max(20, width),
            subsequent_indent=indent + "  ",
            break_long_words=False,
            break_on_hyphens=False,
        )
    return "\n".join(out)


def write_out(text: str) -> None:
    """Write a whole document (a report, an export) to standard output, cleaned."""
    sys.stdout.write(clean_text(text))


FILE_MODE = 0o600  # recordings hold prompts, summaries servers' details: the user's alone
_mode = [FILE_MODE]


def share_with_group(on: bool) -> None:
    """``--group-readable``: files created 0640 from now on."""
    _mode[0] = 0o640 if on else FILE_MODE


# what tokmon's own text files hold early: a file without any is not replaced
_OURS = (b"tokmon", b"rid,arm,", b"t_s,kind,", b"section,")


def open_private(path: str | Path, *, append: bool, replace_any: bool = False) -> IO[bytes]:
    """A file tokmon writes (a recording, a summary, a report, a server's log): created
    0600, never through a symbolic link placed where it is asked to write (O_NOFOLLOW),
    only a regular file; an existing file is replaced only if it is tokmon's or
    ``replace_any`` (the user said so: ``--overwrite``). Raises OSError with the reason in
    words."""
    flags = os.O_CREAT | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
    # (read too when replacing: what is there is looked at before it is truncated)
    flags |= os.O_WRONLY | os.O_APPEND if append else os.O_RDWR
    try:
        fd = os.open(path, flags, _mode[0])
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise OSError(
                errno.ELOOP, f"{path} is a symbolic link; tokmon writes through none"
            ) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, f"{path} is not a regular file")
        if not append:
            if st.st_size and not replace_any and not _looks_ours(fd):
                raise OSError(
                    errno.EEXIST,
                    f"{path} exists and is not tokmon's: remove it or choose another name",
                )
            os.ftruncate(fd, 0)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "ab" if append else "wb", buffering=0)


def _looks_ours(fd: int) -> bool:
    head = os.pread(fd, 65536, 0)
    if head.startswith(b"PAR1"):  # a Parquet export: its metadata, ours, is at its end
        tail = os.pread(fd, 65536, max(0, os.fstat(fd).st_size - 65536))
        return b"tokmon" in tail
    return any(m in head for m in _OURS)


def write_text(path: str | Path, text: str) -> None:
    """Write a text file (a report, a summary), cleaned (``open_private``). Raises
    OSError."""
    with open_private(path, append=False) as f:
        f.write(clean_text(text).encode("utf-8"))


def finite(obj: Any, notes: list[str] | None = None, path: str = "") -> Any:
    """``obj`` with every non-finite float replaced by None (named in ``notes``)."""
    if isinstance(obj, float):
        if math.isfinite(obj):
            return obj
        if notes is not None:
            notes.append(path or "value")
        return None
    if isinstance(obj, dict):
        return {k: finite(v, notes, f"{path}.{k}" if path else str(k)) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v, notes, f"{path}[{i}]") for i, v in enumerate(obj)]
    return obj


def dumps(obj: Any, indent: int | None = None, compact: bool = False) -> str:
    """Strict JSON (RFC 8259): no NaN or Infinity -- they become null, and a top-level
    object says which (``"nonfinite"``); every non-ASCII or control character escaped, so
    that printing the file cannot drive a terminal; secrets scrubbed."""
    sep = (",", ":") if compact else None
    try:  # the usual case, at C speed: a recording writes a line per request
        text = json.dumps(obj, indent=indent, separators=sep, allow_nan=False, default=str)
    except ValueError:  # a NaN or an infinity somewhere: find and name them
        notes: list[str] = []
        obj = finite(obj, notes)
        if isinstance(obj, dict):
            obj["nonfinite"] = notes
        text = json.dumps(obj, indent=indent, separators=sep, allow_nan=False, default=str)
    return scrub(text) if _SECRETS else text


_FORMULA = ("=", "+", "-", "@")


def csv_cell(v: Any) -> Any:
    """A CSV cell that a spreadsheet will not run: text that begins like a formula gets a
    leading apostrophe (OWASP's advice); numbers stay numbers."""
    if not isinstance(v, str):
        return v
    v = clean_text(v, keep_newlines=False)  # a tab or CR before a formula goes too
    if v.lstrip().startswith(_FORMULA):
        return "'" + v
    return v
