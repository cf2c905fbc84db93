"""The docs site as a person reads it: built by MkDocs, opened in headless Chromium at 1280 px. No code block or
transcript (the doctor's, a fix, a command) runs past the page's edge: each wraps (docs/stylesheets/wrap.css)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, require_tool

PAGES = ["getting-started", "index", "troubleshooting", "fleet"]
"""The pages with the longest transcripts and commands ('index' is the home page)."""
CHECK = """
<script>
window.addEventListener('load', () => {
  const blocks = Array.from(document.querySelectorAll('.md-typeset pre > code'));
  const clipped = blocks.filter(c => c.scrollWidth > c.clientWidth + 1).map(c => c.textContent.slice(0, 60));
  const out = document.createElement('div');
  out.id = 'clip-check';
  out.setAttribute('data-blocks', String(blocks.length));
  out.textContent = JSON.stringify(clipped);
  document.body.appendChild(out);
});
</script>
"""


def _chromium() -> str:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    require_tool(None if browser else "chromium is missing (apt-get install chromium)")
    assert browser
    return browser


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    return out


@pytest.mark.parametrize("page", PAGES)
def test_no_code_block_is_clipped_at_1280_px(site: Path, page: str, tmp_path: Path) -> None:
    import json
    import re

    browser = _chromium()
    html = site / ("index.html" if page == "index" else f"{page}/index.html")
    probe = html.with_name("clip-check.html")
    probe.write_text(html.read_text(encoding="utf-8").replace("</body>", CHECK + "</body>"), encoding="utf-8")
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1280,1000",
        f"--user-data-dir={tmp_path / 'profile'}",
    ]
    dom = subprocess.run([browser, *flags, "--dump-dom", probe.as_uri()], capture_output=True, text=True, timeout=180)
    assert dom.returncode == 0, dom.stderr[-2000:]
    found = re.search(r'<div id="clip-check" data-blocks="(\d+)">(.*?)</div>', dom.stdout, re.DOTALL)
    assert found, dom.stdout[-2000:]
    assert int(found.group(1)) > 0  # the page has code blocks to check
    assert json.loads(found.group(2).replace("&quot;", '"').replace("&amp;", "&")) == [], f"clipped on {page}"
    if page == "getting-started":
        artifacts = ROOT / "test-artifacts"
        artifacts.mkdir(exist_ok=True)
        shot = artifacts / "docs-getting-started.png"
        shot.unlink(missing_ok=True)
        subprocess.run([browser, *flags, f"--screenshot={shot}", probe.as_uri()], capture_output=True, timeout=180)
        assert shot.is_file() and shot.stat().st_size > 10_000
