from __future__ import annotations

import json
from pathlib import Path

import pytest

from memvault.secrets import SecretFinding, describe, find_secrets, shannon_entropy

EXAMPLE_VAULT = Path(__file__).resolve().parents[1] / "vault"

POSITIVES = [
    ("private key block", "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEAu1SU1L\n-----END RSA PRIVATE KEY-----"),
    ("private key block", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----"),
    ("private key block", "-----BEGIN EC PRIVATE KEY-----"),
    ("private key block", "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBg\n-----END PRIVATE KEY-----"),
    ("private key block", "-----BEGIN PGP PRIVATE KEY BLOCK-----\nlQOYBF\n-----END PGP PRIVATE KEY BLOCK-----"),
    ("AWS access key id", "the deploy user has key AKIAIOSFODNN7EXAMPLE in ~/.aws/credentials"),
    ("AWS access key id", "session ASIAY34FZKBOKMUTVV7A expires in 1h"),
    ("AWS secret access key", "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
    ("GitHub token", "export GH=ghp_16C7e42F292c6912E7710c838347Ae178B4a"),
    ("GitHub token", "gho_16C7e42F292c6912E7710c838347Ae178B4a"),
    ("GitHub token", "ghs_16C7e42F292c6912E7710c838347Ae178B4a"),
    ("GitHub token", "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz"),
    ("Slack token", "bot token xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"),
    ("Slack token", "xoxp-123456789012-1234567890123-1234567890123-0123456789abcdef"),
    ("Stripe secret key", "STRIPE=sk_live_4eC39HqLyjWDarjtT1zdp7dc"),
    ("Google API key", "maps key AIzaSyA-1234567890abcdefghijklmnopqrstu"),
    ("JWT", "Authorization: Bearer eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0."
            "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"),
    ("password assignment", "password=hunter2"),
    ("password assignment", "DB_PASSWORD='S3cr3t!x'"),
    ("password assignment", "passwd: hunter2"),
    ("password assignment", "pwd=Tr0ub4dor&3"),
    ("password assignment", "password: changeme"),
    ("password assignment", 'config {"password": "hunter22"}'),
    ("password assignment", "Server=db1;User Id=app;Password=hunter2;Database=acme"),
    ("password assignment", "pg_basebackup --password=Kx9mQ2vL -h db1"),
    ("generic API key assignment", "secret=abc123def"),
    ("generic API key assignment", "token=f00ba4d2"),
    ("generic API key assignment", "api_key=sk-abcdef123456"),
    ("generic API key assignment", "STATUSPAGE_API_KEY: 'a8f3kd93kf02'"),
    ("connection string with password", "DATABASE_URL=postgres://app:Sup3rS3cret@db1.acme.internal:5432/acme_shop"),
    ("connection string with password", "redis://:s3cr3tpw@cache1:6379/0"),
    ("high-entropy token", "the webhook signing key is 8fJ2kLm9Qx7Rt4Vb1Nz6Hy3Wp5Cs0Dg2Ea8Uo"),
    ("high-entropy token", "restic key: Zx4Qp8Lm2Vn7Bc1Kj9Hg3Fd6Sa5Rt0YwEu"),
]


@pytest.mark.parametrize("kind,text", POSITIVES, ids=[f"{k}-{i}" for i, (k, _) in enumerate(POSITIVES)])
def test_positive_kinds(kind, text):
    findings = find_secrets(text)
    assert [f.kind for f in findings] == [kind], findings


NEGATIVES = [
    "The primary PostgreSQL 16.4 server is db1 (db1.acme.internal, 10.8.0.4) listening on port 5432.",
    "the data directory is /var/lib/postgresql/16/main on a 500 GB volume",
    "the password is stored in vault at secret/db/primary",
    "rotate the API key monthly",
    "pg_dump --format=custom -Fc acme_shop > /var/backups/pg/acme_shop.dump",
    "15 3 * * * postgres /usr/local/bin/pg-nightly.sh >> /var/log/pg-nightly.log 2>&1",
    "deployed commit 4f1c2a9e8b7d6c5f4e3d2c1b0a9f8e7d6c5b4a3f, blob e69de29bb2d1d6434b8b29ae775ad8c2e48c5391",
    "sha256 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "episode 01M6AJDMR03A2Q0TG67D1K8G0R recorded the restore test",
    "request id 550e8400-e29b-41d4-a716-446655440000 failed",
    "https://github.com/acme/shop/commit/4f1c2a9e8b7d6c5f4e3d2c1b0a9f8e7d6c5b4a3f",
    "base64 of the header is dGhpcyBpcyBzaG9ydA==",
    "password=<password>",
    "password=${DB_PASSWORD}",
    "PGPASSWORD=$PGPASSWORD pg_dump acme_shop",
    "PGPASSWORD=$(cat /run/secrets/pg) psql",
    "password=***",
    "password=xxx",
    "token=...",
    "password = {{ vault_pg_password }}",
    "password: vault:secret/db/primary",
    "postgres://app:${PGPASSWORD}@db1.acme.internal/acme_shop",
    "postgres://user:password@host/db is the URL format",
    "ssh://git@github.com/acme/shop.git",
    "http://lb1.acme.internal:8404/stats",
    "Secret: the plan is to rotate the certificate before it expires.",
    "token: see the team password manager",
    "grep root /etc/passwd: no match",
    "secret_name=db-primary token_ttl=300 password_file=/etc/pg/pw max_tokens=4096",
    "PWD=/home/deploy/releases/v2.15.1",
    "password=true",
    "if password == expected: return",
    "log_min_duration_statement=250ms and max_standby_streaming_delay=15min",
    "HighRequestLatencyWarningThreshold2Exceeded fired on web_backend",
    "/usr/lib/python3/dist-packages/acme_shop/reports/export_orders_v2.py",
    "nginx-1.26.0-r1-x86_64-linux-gnu-openssl3-static",
    "tls_private_key: /etc/ssl/private/acme.example.key",
    "key-only auth, no passwords, and root login is disabled everywhere",
    "receive LSN = replay LSN 0/5A3F2C10",
    "feature flag reports_orders_v2=false",
]


@pytest.mark.parametrize("text", NEGATIVES)
def test_ops_text_is_not_a_secret(text):
    assert find_secrets(text) == []


def _example_texts():
    texts = []
    for path in sorted((EXAMPLE_VAULT / "facts").rglob("*.md")):
        content = path.read_text()
        body = content.split("---", 2)[2] if content.startswith("---") else content
        texts.append((str(path.relative_to(EXAMPLE_VAULT)), body))
    for path in sorted((EXAMPLE_VAULT / "episodes").glob("*.jsonl")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if line.strip():
                texts.append((f"{path.name}:{number}", json.loads(line)["text"]))
    return texts


def test_example_vault_has_no_findings():
    texts = _example_texts()
    assert len(texts) > 100
    flagged = {name: describe(find_secrets(text)) for name, text in texts if find_secrets(text)}
    assert flagged == {}


def test_whole_example_files_have_no_findings():
    # Front matter, JSON keys (ids, times, meta) and procedure scripts are stored in git too.
    paths = [p for p in EXAMPLE_VAULT.rglob("*") if p.is_file() and ".git" not in p.parts]
    flagged = {str(p): describe(find_secrets(p.read_text())) for p in paths if find_secrets(p.read_text())}
    assert flagged == {}


def test_line_numbers_and_order():
    text = "first line\nsecond\npassword=hunter2 and AKIAIOSFODNN7EXAMPLE\n\n-----BEGIN PRIVATE KEY-----\nabc\n"
    findings = find_secrets(text)
    assert [(f.kind, f.line) for f in findings] == [
        ("password assignment", 3),
        ("AWS access key id", 3),
        ("private key block", 5),
    ]


def test_excerpt_is_redacted():
    [finding] = find_secrets("key AKIAIOSFODNN7EXAMPLE")
    assert finding == SecretFinding("AWS access key id", "AKIA… (20 chars)", 1)
    [short] = find_secrets("password=hunter2")
    assert short.excerpt == "h… (7 chars)"  # a short value shows less than four characters
    assert "hunter2" not in describe([short])


def test_one_secret_is_reported_once():
    # The AWS secret is also a high-entropy run and an assignment to a *key name: one finding, the specific one.
    findings = find_secrets("aws_secret_access_key=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
    assert [f.kind for f in findings] == ["AWS secret access key"]
    findings = find_secrets("GITHUB_TOKEN=ghp_16C7e42F292c6912E7710c838347Ae178B4a")
    assert [f.kind for f in findings] == ["GitHub token"]


def test_describe():
    findings = find_secrets("AKIAIOSFODNN7EXAMPLE\npassword=hunter2")
    assert describe(findings) == (
        "looks like a secret: AWS access key id on line 1 (AKIA… 20 chars), password assignment on line 2 (h… 7 chars)"
    )
    assert describe([]) == "no secrets found"


def test_entropy():
    assert shannon_entropy("") == 0.0
    assert shannon_entropy("aaaa") == 0.0
    assert shannon_entropy("abcd") == pytest.approx(2.0)
    # Hex can never reach the threshold, which is why commit ids and digests are safe even without the id rule.
    assert shannon_entropy("0123456789abcdef" * 4) == pytest.approx(4.0)


def test_high_entropy_requires_letters_and_digits_and_length():
    assert find_secrets("Zx4Qp8Lm2Vn7Bc1Kj9Hg3Fd6Sa5Rt0Y") == []  # 31 characters
    assert find_secrets("ZxQpLmVnBcKjHgFdSaRtYwEuIoPaSdFgHjKl") == []  # no digit
