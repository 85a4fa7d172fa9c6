#!/usr/bin/env python3
# description: Print days left for every acme TLS certificate and warn when fewer than 30 remain
# tags: tls, certificates, letsencrypt, internal-ca, monitoring

"""Check certificate expiry dates for the acme fleet.

Demo-safe: the inventory is embedded below (kept in sync with facts/tls/*.md);
nothing is read from the network and no files are written.

Usage: check-cert-expiry.py [--warn-days N] [--today YYYY-MM-DD] [--strict]
  --strict  exit 1 when any certificate is inside the warning window
"""

import argparse
import datetime as dt
import sys

CERTS = [
    # (name, where it is used, issuer, expiry date)
    ("*.acme.example", "lb1:/etc/haproxy/certs/acme.example.pem", "Let's Encrypt R11", "2027-02-13"),
    ("db2.acme.internal (replication client)", "db2:/etc/postgresql/16/main/repl.crt", "Acme Internal Issuing CA", "2026-12-20"),
    ("grafana.acme.internal", "mon1:/etc/grafana/tls/grafana.crt", "Acme Internal Issuing CA", "2027-01-09"),
    ("Acme Internal Issuing CA", "offline", "Acme Internal Root CA 2024", "2027-03-01"),
    ("Acme Internal Root CA 2024", "offline", "self-signed", "2034-03-01"),
]


def main(argv=None):
    p = argparse.ArgumentParser(description="Check acme certificate expiry dates.")
    p.add_argument("--warn-days", type=int, default=30)
    p.add_argument("--today", help="reference date YYYY-MM-DD (default: today, UTC)")
    p.add_argument("--strict", action="store_true", help="exit 1 if any certificate needs renewal")
    args = p.parse_args(argv)

    if args.today:
        try:
            today = dt.date.fromisoformat(args.today)
        except ValueError:
            p.error("--today must be YYYY-MM-DD")
    else:
        today = dt.datetime.now(dt.timezone.utc).date()

    print(f"step 1/3: loaded {len(CERTS)} certificates from the embedded inventory (reference date {today})")

    print(f"step 2/3: computing days left (warn under {args.warn_days} days)")
    warnings = 0
    width = max(len(c[0]) for c in CERTS)
    for name, where, issuer, expiry in sorted(CERTS, key=lambda c: c[3]):
        left = (dt.date.fromisoformat(expiry) - today).days
        if left < 0:
            status = "EXPIRED"
        elif left < args.warn_days:
            status = "WARN"
        else:
            status = "ok"
        if status != "ok":
            warnings += 1
        print(f"         {status:<7} {name:<{width}}  {expiry}  {left:>5} days  [{issuer}] {where}")

    print("step 3/3: summary")
    if warnings:
        print(f"         {warnings} certificate(s) need renewal: Let's Encrypt via certbot on lb1, internal ones via the admin")
    else:
        print("         all certificates are outside the warning window")
    print("done: certificate check finished")
    return 1 if (args.strict and warnings) else 0


if __name__ == "__main__":
    sys.exit(main())
