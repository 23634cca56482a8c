"""Themes are data: ``themes/*.toml``, each checked and turned into a Textual Theme."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from textual.theme import Theme

REQUIRED = ("name", "primary")
COLOUR_KEYS = (
    "primary",
    "secondary",
    "accent",
    "foreground",
    "background",
    "surface",
    "panel",
    "success",
    "warning",
    "error",
    "boost",
)
_HEX = re.compile(r"^#(?:[0-9a-fA-F]{3}|[0-9a-fA-F]{6}|[0-9a-fA-F]{8})$")
DEFAULT = "tokmon-dark"


class ThemeError(ValueError):
    pass


def theme_dirs() -> list[Path]:
    here = Path(__file__).resolve().parent.parent
    # Inside the wheel: tokmon/themes; in a source checkout: ./themes beside tokmon/.
    return [p for p in (here / "themes", here.parent / "themes") if p.is_dir()]


def load_theme_file(path: Path) -> Theme:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise ThemeError(f"cannot read theme {path}: {e.strerror or e}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ThemeError(f"theme {path.name} is not valid TOML: {e}") from None
    for k in REQUIRED:
        if k not in data:
            raise ThemeError(f"theme {path.name} has no {k!r}")
    unknown = set(data) - set(COLOUR_KEYS) - {"name", "dark", "variables"}
    if unknown:
        raise ThemeError(
            f"theme {path.name}: unknown {'key' if len(unknown) == 1 else 'keys'} "
            f"{', '.join(sorted(unknown))}"
        )
    kw: dict[str, object] = {"name": str(data["name"]), "dark": bool(data.get("dark", True))}
    for k in COLOUR_KEYS:
        if k in data:
            v = data[k]
            if not isinstance(v, str) or not _HEX.match(v):
                raise ThemeError(f"theme {path.name}: {k} must be a #rrggbb colour, got {v!r}")
            kw[k] = v
    if isinstance(data.get("variables"), dict):
        kw["variables"] = {str(a): str(b) for a, b in data["variables"].items()}
    return Theme(**kw)  # type: ignore[arg-type]


def builtin_themes() -> tuple[list[Theme], list[str]]:
    """All shipped themes, and a message for each file that could not be loaded."""
    themes, errors = [], []
    seen: set[str] = set()
    for d in theme_dirs():
        for f in sorted(d.glob("*.toml")):
            try:
                t = load_theme_file(f)
            except ThemeError as e:
                errors.append(str(e))
                continue
            if t.name not in seen:
                seen.add(t.name)
                themes.append(t)
    return themes, errors


def check_theme(name: str) -> None:
    """Raise ThemeError unless ``name`` is a shipped theme, one of Textual's, or a theme
    file that loads: a bad --theme is bad input, refused before the run starts."""
    if name.endswith(".toml"):
        load_theme_file(Path(name))
        return
    from textual.theme import BUILTIN_THEMES

    names = {t.name for t in builtin_themes()[0]} | set(BUILTIN_THEMES)
    if name not in names:
        raise ThemeError(
            f"unknown theme {name!r}: one of {', '.join(sorted(names))}, or a .toml file"
        )
