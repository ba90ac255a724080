"""`nmt explore`: one self-contained HTML page to browse what attention does (`page`)."""
