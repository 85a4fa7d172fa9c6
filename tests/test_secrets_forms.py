"""Secrets in forms the shaped rules did not read: an Azure SAS query string, a wholly URL-encoded connection
string, and a user/password pair written as prose. Each has benign look-alikes that must stay quiet."""
from __future__ import annotations

import pytest

from memvault.rules.secrets import find_secrets, redact

# The signature of a SAS is base64 of an HMAC-SHA256 (44 characters), URL-encoded in the query string.
SAS_FOUND = [
    "?sv=2022-11-02&ss=b&srt=co&sp=rl&se=2026-12-31T00:00:00Z&sig=AbCdEf12%2Bgh%3D",
    "https://acme.blob.core.windows.net/backups/db.tar?sv=2022-11-02&ss=b&srt=co&sp=rl"
    "&se=2026-12-31T00:00:00Z&st=2026-01-01T00:00:00Z&spr=https&sig=k2Jd%2Fq9XbT4mLp0Wz7Rn3Vc8Yh1Ge5Fa6Ks2Du%2BoQiM%3D",
    "AZURE_STORAGE_SAS_TOKEN='sv=2021-08-06&sr=c&sp=racwdl&se=2026-02-01T00%3A00%3A00Z&sig=Zq81mPw0LrT%3D'",
    "BlobEndpoint=https://acme.blob.core.windows.net/;SharedAccessSignature=sv=2022-11-02&ss=b&srt=sco&sp=rl"
    "&se=2026-12-31&sig=Ux7Kd2PqL9mZ%2Bw%3D",
    # sig first, sv later: the order of the parameters is free
    "sas: sig=Ux7Kd2PqL9mZ%2Bw%3D&sv=2022-11-02&sp=r&se=2026-12-31",
]
SAS_QUIET = [
    "sv=2022-11-02",
    "the SAS uses sv=2022-11-02 and expires se=2026-12-31",
    "?sv=2022-11-02&ss=b&srt=co&sp=rl&se=2026-12-31T00:00:00Z&sig=<signature>",
    "?sv=2022-11-02&ss=b&srt=co&sp=rl&se=2026-12-31T00:00:00Z&sig=REDACTED",
    "?sv=2022-11-02&ss=b&srt=co&sp=rl&se=2026-12-31T00:00:00Z&sig=...",
    "?sv=2022-11-02&sp=r&sig=%3Csignature%3E",
    "sig=abc123def456 is not a SAS without its version",
    "the query was ?q=sv&sig=1",
]


@pytest.mark.parametrize("text", SAS_FOUND)
def test_azure_sas_signature_is_found(text):
    findings = find_secrets(text)
    assert [f.kind for f in findings] == ["Azure SAS token"], findings


@pytest.mark.parametrize("text", SAS_QUIET)
def test_sas_look_alikes_are_quiet(text):
    assert find_secrets(text) == []


ENCODED_FOUND = [
    "postgresql%3A%2F%2Fapp%3AS3cr3tPw%40db01%3A5432%2Fprod",
    "DATABASE_URL=postgresql%3A%2F%2Fapp%3AS3cr3tPw%40db01%3A5432%2Fprod",
    "redirect: https://ops.example/connect?dsn=mysql%3a%2f%2froot%3aKq8%21zP2w%40db2%2fshop&x=1",
    # encoded twice (a URL inside a URL)
    "next=redis%253A%252F%252F%253AKx9pQ2rT%2540cache1%253A6379",
    # a form body: password=... URL-encoded
    "body: user%3Dadmin%26password%3DHunter2%2521x",
]
ENCODED_QUIET = [
    "https://login.example.com/authorize?redirect_uri=https%3A%2F%2Fapp.example.com%2Fcallback&state=xyz",
    "https%3A%2F%2Fgrafana.acme.internal%2Fd%2Fabc123%2Foverview%3ForgId%3D1",
    "mailto%3Aops%40acme.example",
    "postgresql%3A%2F%2Fapp%40db01%3A5432%2Fprod",  # a user, no password
    "postgresql%3A%2F%2Fuser%3Apassword%40db01%3A5432%2Fprod",  # the docs' stand-in
    "postgresql%3A%2F%2Fapp%3A%24%7BDB_PASSWORD%7D%40db01%2Fprod",  # ${DB_PASSWORD}
    "the time was 2026-01-01T00%3A00%3A00Z and 100%25 of requests failed",
    "a broken escape %3 and %zz and 50% off",
]


@pytest.mark.parametrize("text", ENCODED_FOUND)
def test_url_encoded_secret_is_found(text):
    findings = find_secrets(text)
    assert len(findings) == 1 and findings[0].kind.endswith("(URL-encoded)"), findings


@pytest.mark.parametrize("text", ENCODED_QUIET)
def test_url_encoded_look_alikes_are_quiet(text):
    assert find_secrets(text) == []


def test_url_encoded_secret_is_redacted_whole():
    text = "dsn postgresql%3A%2F%2Fapp%3AS3cr3tPw%40db01%3A5432%2Fprod end"
    out, found = redact(text)
    assert "S3cr3tPw" not in out and out.startswith("dsn <redacted:") and out.endswith("> end"), out
    assert found[0].kind == "connection string with password (URL-encoded)"


PAIR_FOUND = [
    "login: admin / Hunter2Pass!",
    "Login admin / Hunter2Pass! for the switch",
    "user admin, password Xy7!kq2",
    "user admin password Xy7!kq2",
    "username: root, password: Xy7!kq2 (until rotated)",
    "the creds are deploy / Xy7!kq2.",
    "credentials: admin / 9hV#pL2q",
    "user/pass: admin / Hunter2Pass!",
    "user: postgres and password Xy7!kq2",
]
PAIR_QUIET = [
    "login: admin / see vault",
    "login: admin / (see 1password)",
    "user admin, password stored in vault",
    "user admin, password rotated monthly",
    "user admin, password ${ADMIN_PASSWORD}",
    "user admin, password <redacted>",
    "login page / dashboard",
    "user admin, password 12 characters long",
    "login: sso / okta",
    "user alice / group wheel",
    "user admin, password-less login via ssh keys",
    "the user admin changed the password yesterday",
]


@pytest.mark.parametrize("text", PAIR_FOUND)
def test_user_and_password_pair_in_prose_is_found(text):
    findings = find_secrets(text)
    assert len(findings) == 1 and findings[0].kind in ("password in prose", "password assignment"), findings


@pytest.mark.parametrize("text", PAIR_QUIET)
def test_pair_look_alikes_are_quiet(text):
    assert find_secrets(text) == []


@pytest.mark.parametrize("text", [
    "sig=" * 25_000,  # every match a sig= of one endless query string
    "sv=2022-11-02&" + "sig=a&" * 15_000,
    "%3a" * 33_000,
    ("user admin, " * 8_000),
    ("login: a / " * 9_000),
], ids=["sig", "sig-with-version", "escapes", "user-pairs", "login-pairs"])
def test_hostile_repetition_is_scanned_in_linear_time(text):
    import time

    start = time.process_time()
    find_secrets(text)
    assert time.process_time() - start < 1.0


@pytest.mark.parametrize("text", [
    "jdbc:postgresql://db1:5432/app?user=app&password=%24%7BPW%7D",  # ${PW}
    "https://api.example/x?token=%3Cyour-token%3E",  # <your-token>
    "https://api.example/x?api_key=%7B%7B%20api_key%20%7D%7D",  # {{ api_key }}
])
def test_a_url_encoded_placeholder_is_a_placeholder(text):
    """An assignment in a query string whose value is a placeholder, URL-encoded, was refused as a secret."""
    assert find_secrets(text) == []


def test_a_url_encoded_literal_is_still_a_secret():
    assert [f.kind for f in find_secrets("https://db.example/x?password=Hunter2%21x")] == ["password assignment"]
