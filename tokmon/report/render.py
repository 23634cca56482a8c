"""A report in the format asked for: the one place that picks the writer (text and md,
HTML, JSON, CSV), so that no writer imports another's caller."""

from __future__ import annotations

from tokmon.recording.play import summary_of
from tokmon.recording.reader import Recording
from tokmon.report.html import render_html
from tokmon.report.text import export_csv, render_text, report_data
from tokmon.textsafe import dumps


def render(rec: Recording, fmt: str, target_rate: float | None = None) -> str:
    if fmt == "json":
        return dumps(summary_of(rec), indent=2) + "\n"
    if fmt == "csv":
        return export_csv(rec)
    data = report_data(rec, target_rate)
    if fmt == "html":
        return render_html(rec, data)
    return render_text(data, md=(fmt == "md"))
