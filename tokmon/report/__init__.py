"""Reports of a recording: text, Markdown, JSON, CSV and a self-contained HTML page."""
