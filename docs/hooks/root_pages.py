"""MkDocs hook (mkdocs.yml `hooks:`): pages whose text is a file of the repository root.

A page whose Markdown is the line `<!-- include README.md -->` (docs/index.md) or
`<!-- include CHANGELOG.md -->` (docs/changelog.md) gets that file's text, with its links
rewritten for the page's place in docs/: `docs/X` becomes X relative to the page, a root file
that is itself a page (README.md, CHANGELOG.md) becomes that page, and a link to any other root
file (LICENSE, CITATION.cff) becomes its plain text, since the site does not carry it. So the
README stays the one source of the home page, and its links work both on GitHub and in the site.
Links are rewritten before MkDocs validates them, so `mkdocs build --strict` still checks them.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

INCLUDE = re.compile(r"^<!-- include (\S+) -->\s*$")
LINK = re.compile(r"(!?)\[([^\]]*)\]\(([^)\s]+)\)")
ROOT_PAGES = {"README.md": "index.md", "CHANGELOG.md": "changelog.md"}  # root file -> its page


def on_page_markdown(markdown, page, config, files):
    match = INCLUDE.match(markdown.strip())
    if not match:
        return markdown
    root = Path(config.config_file_path).parent
    text = (root / match.group(1)).read_text(encoding="utf-8")
    here = posixpath.dirname(page.file.src_uri)

    def rewrite(m: re.Match) -> str:
        bang, label, target = m.groups()
        if re.match(r"[a-z][a-z0-9+.-]*:|#", target):  # a URL or an anchor of this page
            return m.group(0)
        path, sep, anchor = target.partition("#")
        if path.startswith("docs/"):
            path = path[len("docs/") :]
        elif path in ROOT_PAGES:
            path = ROOT_PAGES[path]
        else:
            return label  # a repository file the site does not carry
        return f"{bang}[{label}]({posixpath.relpath(path, here or '.')}{sep}{anchor})"

    return LINK.sub(rewrite, text)
