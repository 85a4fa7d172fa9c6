#!/usr/bin/env python3
# description: Bump the YYYYMMDDNN serial of the acme.internal zone file and check it increased
# tags: dns, bind, zone, internal

"""Bump the SOA serial of the internal zone acme.internal.

Demo-safe: writes a copy of the zone (as served by BIND on ns1, 10.8.0.3) into a scratch
directory (MEMVAULT_DEMO_ROOT or a fresh temp dir) and edits that copy only. On ns1 the
follow-up would be `named-checkzone acme.internal db.acme.internal` and `rndc reload acme.internal`.

Usage: bump-zone-serial.py [--today YYYYMMDD]
"""

import argparse
import datetime as dt
import os
import re
import shutil
import sys
import tempfile

ZONE = """\
$TTL 3600
@       IN SOA  ns1.acme.internal. hostmaster.acme.internal. (
                2026111802 ; serial
                3600       ; refresh
                900        ; retry
                1209600    ; expire
                300 )      ; negative cache ttl
        IN NS   ns1.acme.internal.
ns1     IN A    10.8.0.3
bastion IN A    10.8.0.2
db1     IN A    10.8.0.4
db2     IN A    10.8.0.5
cache1  IN A    10.8.0.6
lb1     IN A    10.8.0.10
web1    IN A    10.8.0.11
web2    IN A    10.8.0.12
web3    IN A    10.8.0.13
mon1    IN A    10.8.0.20
grafana IN CNAME mon1
db      IN CNAME db1
"""

SERIAL_RE = re.compile(r"^(\s*)(\d{10})(\s*;\s*serial)", re.M)


def next_serial(old, today):
    base = int(today + "00")
    return base + 1 if old < base else old + 1


def main(argv=None):
    p = argparse.ArgumentParser(description="Bump the acme.internal zone serial (demo copy).")
    p.add_argument("--today", help="date as YYYYMMDD (default: today, UTC)")
    args = p.parse_args(argv)
    today = args.today or dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d")
    if not re.fullmatch(r"\d{8}", today):
        p.error("--today must be YYYYMMDD")

    demo_root = os.environ.get("MEMVAULT_DEMO_ROOT")
    root = demo_root or tempfile.mkdtemp(prefix="bump-zone-serial-")
    try:
        zdir = os.path.join(root, "bump-zone-serial", "etc", "bind", "zones")
        os.makedirs(zdir, exist_ok=True)
        path = os.path.join(zdir, "db.acme.internal")
        if not os.path.exists(path):
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(ZONE)
        print(f"step 1/3: reading zone copy {path}")
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        m = SERIAL_RE.search(text)
        if not m:
            print("no serial line found", file=sys.stderr)
            return 1
        old = int(m.group(2))
        new = next_serial(old, today)
        print(f"         current serial {old}")

        print(f"step 2/3: writing new serial {new}")
        text = SERIAL_RE.sub(lambda mm: f"{mm.group(1)}{new}{mm.group(3)}", text, count=1)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)

        print("step 3/3: verifying the serial increased")
        with open(path, encoding="utf-8") as fh:
            check = int(SERIAL_RE.search(fh.read()).group(2))
        if check <= old:
            print(f"serial did not increase ({old} -> {check})", file=sys.stderr)
            return 1
        print(f"         {old} -> {check} ok; next on ns1: named-checkzone, then rndc reload acme.internal")
    finally:
        if not demo_root:
            shutil.rmtree(root, ignore_errors=True)
    print("done: zone serial bumped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
