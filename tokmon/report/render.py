"""A report in the format asked for: the one place that picks the writer (text and md,
HTML, JSON, CSV), so that no writer imports another's caller."""

from __future__ import annotations

from tokmon.recording.play import end_of, stream_report, summary_of
from tokmon.recording.reader import Recording, read_recording
from tokmon.recording.window import Window, past_end
from tokmon.report.html import render_html
from tokmon.report.text import export_csv, render_text, report_data
from tokmon.textsafe import dumps


def render_file(
    path: str, fmt: str, target_rate: float | None = None, window: Window | None = None
) -> tuple[str, Recording]:
    """A report of the recording at ``path`` (every part of a rotated run). Text,
    Markdown and JSON fold it as it is read, holding no request; HTML and CSV, which
    draw or list every request, read it whole. ``window``: of a stretch of the run
    (text, Markdown and JSON)."""
    if fmt not in ("text", "md", "json"):
        if window is not None:
            raise ValueError("--from/--to: --format text, md or json")
        rec = read_recording(path)
        return render(rec, fmt, target_rate), rec
    folded = stream_report(path, window)
    rec = folded.rec
    why = past_end(window, end_of(rec)) if window is not None else None
    if why:
        raise ValueError(why)
    if fmt == "json":
        return dumps(summary_of(rec, folded), indent=2) + "\n", rec
    return render_text(report_data(rec, target_rate, folded), md=(fmt == "md")), rec


def render(rec: Recording, fmt: str, target_rate: float | None = None) -> str:
    if fmt == "json":
        return dumps(summary_of(rec), indent=2) + "\n"
    if fmt == "csv":
        return export_csv(rec)
    data = report_data(rec, target_rate)
    if fmt == "html":
        return render_html(rec, data)
    return render_text(data, md=(fmt == "md"))
