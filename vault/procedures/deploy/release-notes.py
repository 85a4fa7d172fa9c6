#!/usr/bin/env python3
# description: Build markdown release notes for an acme-shop release from its change log
# tags: deploy, release, acme-shop

"""Generate release notes for an acme-shop release.

Demo-safe: the change log is embedded below instead of calling git on the app repo;
the notes are written to a scratch directory (MEMVAULT_DEMO_ROOT or a fresh temp dir)
and printed.

Usage: release-notes.py [VERSION]   (default v2.15.1; known: v2.14.3, v2.15.0, v2.15.1)
"""

import os
import shutil
import sys
import tempfile

CHANGES = {
    "v2.14.3": [
        ("fix", "OPS-38", "Retry Redis connection on cache1 failover instead of returning 500"),
        ("chore", None, "Bump gunicorn to 22.0"),
    ],
    "v2.15.0": [
        ("feat", "OPS-41", "Orders report can be filtered by date range"),
        ("feat", None, "New payment webhook endpoint on :8443 behind lb1"),
        ("fix", None, "Session cookie now marked SameSite=Lax"),
        ("migration", None, "Add column orders.refunded_at (nullable, backwards compatible)"),
    ],
    "v2.15.1": [
        ("fix", "OPS-57", "Route /reports/orders queries to the db2 replica"),
        ("fix", None, "/healthz also checks the Redis connection on cache1"),
        ("chore", None, "Log slow requests over 2 s with request id"),
    ],
}
ORDER = ["v2.14.3", "v2.15.0", "v2.15.1"]
SECTIONS = [("feat", "Features"), ("fix", "Fixes"), ("migration", "Database migrations"), ("chore", "Maintenance")]


def main(argv):
    if len(argv) > 1:
        print("usage: release-notes.py [VERSION]", file=sys.stderr)
        return 2
    version = argv[0] if argv else "v2.15.1"
    if version not in CHANGES:
        print(f"unknown version {version}; known: {', '.join(ORDER)}", file=sys.stderr)
        return 2
    idx = ORDER.index(version)
    previous = ORDER[idx - 1] if idx > 0 else "(first tracked release)"

    print(f"step 1/3: collecting changes {previous}..{version}")
    changes = CHANGES[version]
    print(f"         {len(changes)} changes")

    print("step 2/3: rendering markdown")
    lines = [f"# acme-shop {version}", "", f"Previous release: {previous}", ""]
    for kind, title in SECTIONS:
        items = [c for c in changes if c[0] == kind]
        if not items:
            continue
        lines.append(f"## {title}")
        for _, ticket, text in items:
            lines.append(f"- {text}" + (f" ({ticket})" if ticket else ""))
        lines.append("")
    if any(c[0] == "migration" for c in changes):
        lines += ["Run migrations once from web1 before the rolling restart.", ""]
    notes = "\n".join(lines)

    demo_root = os.environ.get("MEMVAULT_DEMO_ROOT")
    root = demo_root or tempfile.mkdtemp(prefix="release-notes-")
    try:
        outdir = os.path.join(root, "release-notes")
        os.makedirs(outdir, exist_ok=True)
        path = os.path.join(outdir, f"RELEASE-{version}.md")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(notes)
        print(f"step 3/3: wrote {path}")
        print()
        print(notes)
    finally:
        if not demo_root:
            shutil.rmtree(root, ignore_errors=True)
    print("done: release notes ready")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
