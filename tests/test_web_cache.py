"""No page of the web view stays in a real Chromium's disk cache (its own browser and profile: Playwright's sync API
allows one at a time on a thread, and test_web_browser.py's lives for its module)."""
from __future__ import annotations

from web_fixtures import chromium_context, seeded_copy, seeded_template, serve  # noqa: F401 - fixtures


def test_pages_are_not_kept_in_the_browsers_disk_cache(seeded_copy, tmp_path):
    """A page holds the vault's text and this run's CSRF token: none of it may stay on disk in the browser's cache
    after the view stops (a shared machine, a profile synced or backed up)."""
    profile = tmp_path / "profile"
    with serve(seeded_copy(), refresh=False) as served:
        _browse(served, profile)


def _browse(served, profile) -> None:
    marker = "The replica database listens on 10.8.0.5"
    with chromium_context(profile, width=1000) as context:
        page = context.new_page()
        page.goto(f"{served.origin}/?token={served.token}")
        for path in ("/fact/db/replica", "/fact/db/replica?format=json", "/facts", "/inbox"):
            page.goto(served.url + path)
            page.wait_for_load_state("networkidle")
        assert marker in page.goto(served.url + "/fact/db/replica").text()
    kept = [p for p in profile.rglob("*") if p.is_file() and "Cache" in str(p.relative_to(profile))
            and (marker.encode() in p.read_bytes() or served.app.guard.csrf_token().encode() in p.read_bytes())]
    assert not kept, kept
