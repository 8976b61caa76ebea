"""The self-contained HTML report of a run: `write_report` (page), its data (sections, games)."""
