"""scripts/check_docs.py: a clean page passes; a console error, a missing or fake figure, and a
resource from outside the site each fail the page that has them (needs Debian's chromium)."""

import base64
import importlib.util
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGD4DwABBAEAwS2OUAAAAABJRU5ErkJggg=="
)

pytestmark = pytest.mark.skipif(shutil.which("chromium") is None, reason="needs chromium")


def _check_docs():
    spec = importlib.util.spec_from_file_location("check_docs", ROOT / "scripts" / "check_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _page(directory: Path, body: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "index.html").write_text(
        f'<html><head><link rel="icon" href="/ok.png"></head><body>{body}</body></html>'
    )


def test_clean_pages_pass_and_each_fault_fails_its_page(tmp_path, capsys):
    (tmp_path / "ok.png").write_bytes(PNG)
    (tmp_path / "fake.png").write_text("not an image")
    _page(tmp_path, '<img src="ok.png"><p>fine</p>')
    _page(tmp_path / "console", '<script>console.error("boom")</script>')
    _page(tmp_path / "missing", '<img src="../gone.png">')
    _page(tmp_path / "fake", '<img src="../fake.png">')
    _page(tmp_path / "outside", '<script src="https://cdn.example.org/x.js"></script>')
    assert _check_docs().main([f"--site={tmp_path}", "--budget_ms=1000"]) == 1
    out = capsys.readouterr().out
    failed = {
        line.split()[1].rstrip(":").split("/", 3)[3] for line in out.splitlines() if line.startswith("FAIL")
    }
    assert failed == {"console/", "missing/", "fake/", "outside/"}, out
    assert '"boom"' in out and "HTTP 404: /gone.png" in out and "not an image: /fake.png" in out
    assert "outside the site: https://cdn.example.org/x.js" in out
    assert "5 page(s)" in out
