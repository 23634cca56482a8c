"""The Textual dashboard. It draws snapshots from a source; it never measures."""
