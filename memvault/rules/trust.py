"""Who may do what: the trust table, enforced by the write gate for every interface (CLI, MCP, Python API).

A source is *trusted* when it matches a pattern of ``[trust] trusted`` (``user:*`` by default), else *untrusted*.
Untrusted sources (an extractor, a scraper, a model behind MCP) may add to memory only where a person reviews it
or where it stays marked: they propose facts (``inbox/``), append episodes (recalled with ``trusted: false``),
and report what they used. They never delete, rewrite trusted memory, add runnable code, or change settings.

The source of a write is the caller's: ``--source`` / ``MEMVAULT_SOURCE`` / ``user:$USER`` on the CLI, the
server's ``--source`` (default ``agent:mcp``) over MCP. What a memory *claims* about its own source (an ingest
line's ``"source"``) is kept as data (``claimed_source``) and never raises trust.
"""
from __future__ import annotations

import enum
import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass

from .errors import UntrustedSource


class Op(enum.Enum):
    """Every operation the gate checks."""

    READ = "read"
    APPEND_EPISODE = "append_episode"
    PROPOSE_FACT = "propose_fact"
    RECORD_USE = "record_use"
    RUN_PROCEDURE = "run_procedure"
    PRUNE = "prune"
    WRITE_FACT = "write_fact"
    DELETE_FACT = "delete_fact"
    REVIEW_INBOX = "review_inbox"
    VERIFY_FACT = "verify_fact"
    ADD_PROCEDURE = "add_procedure"
    PURGE = "purge"
    DEDUP = "dedup"
    EXPIRE = "expire"
    CONFIGURE = "configure"
    SYNC = "sync"
    COMMIT_EDITS = "commit_edits"
    HOOKS = "hooks"
    ALLOW_SECRET = "allow_secret"
    ACCEPT_RETENTION = "accept_retention"


@dataclass(frozen=True)
class Rule:
    op: Op
    what: str            # what the operation is, for people
    commands: str        # where it is reached
    untrusted: str       # "yes", "no", or how it is done instead


#: The table README.md shows (generated from this list; a test fails on drift). Trusted sources may do everything.
RULES: tuple[Rule, ...] = (
    Rule(Op.READ, "recall and read memories", "recall, fact get/list, proc show/list, episode list, MCP reads",
         "yes (untrusted episodes come back marked `trusted: false`)"),
    Rule(Op.APPEND_EPISODE, "append an episode", "episode add, ingest, MCP log_episode", "yes, marked untrusted"),
    Rule(Op.PROPOSE_FACT, "propose a fact", "fact set, ingest, MCP set_fact",
         "yes: lands in `inbox/` (local, not committed) until a person accepts it"),
    Rule(Op.RECORD_USE, "report that a memory was used", "used, MCP used",
         "yes, at most one use per memory per source per day"),
    Rule(Op.RUN_PROCEDURE, "run a committed procedure", "proc run, MCP run_procedure (--allow-run)",
         "yes, committed scripts only (no --allow-dirty)"),
    Rule(Op.PRUNE, "apply the configured retention", "prune",
         "yes (removes only what [retention] says, never shorter than this host has pruned by)"),
    Rule(Op.WRITE_FACT, "write or change a fact in facts/", "fact set/edit, ingest merges", "no: proposed instead"),
    Rule(Op.DELETE_FACT, "delete a fact", "fact rm", "no"),
    Rule(Op.REVIEW_INBOX, "accept or reject a proposal", "accept, reject", "no"),
    Rule(Op.VERIFY_FACT, "mark a fact as still true", "verify", "no"),
    Rule(Op.ADD_PROCEDURE, "add or replace a procedure (runnable code)", "proc add", "no"),
    Rule(Op.PURGE, "purge memories by source", "purge", "no"),
    Rule(Op.DEDUP, "merge duplicate facts", "dedup --apply", "no"),
    Rule(Op.EXPIRE, "remove expired facts", "expire --apply", "no"),
    Rule(Op.CONFIGURE, "change memvault.toml", "reindex --model", "no"),
    Rule(Op.SYNC, "commit, pull and push the vault", "sync", "no"),
    Rule(Op.COMMIT_EDITS, "commit files edited by hand (each checked like a write)", "sync, Vault.commit_edits",
         "no"),
    Rule(Op.HOOKS, "install or remove the git hooks", "hooks install, hooks uninstall", "no"),
    Rule(Op.ALLOW_SECRET, "store text that looks like a secret", "--allow-secret", "no"),
    Rule(Op.ACCEPT_RETENTION, "prune by a [retention] shorter than this host has pruned by",
         "prune --accept-retention", "no"),
)
_BY_OP = {rule.op: rule for rule in RULES}
_ALLOWED_UNTRUSTED = frozenset({Op.READ, Op.APPEND_EPISODE, Op.PROPOSE_FACT, Op.RECORD_USE, Op.RUN_PROCEDURE,
                                Op.PRUNE})


#: The front-matter key ``memvault accept`` records its reviewer in (FactStore.plan_accept): see Policy.vouches.
ACCEPTED_BY = "accepted_by"


@dataclass(frozen=True)
class Policy:
    """``[trust] trusted`` patterns, and the table above."""

    trusted: tuple[str, ...] = ("user:*",)

    def is_trusted(self, source: str | None) -> bool:
        """Whether ``source`` matches a trusted pattern. None is a file a person wrote by hand: trusted."""
        if source is None:
            return True
        return any(fnmatch.fnmatchcase(source, pattern) for pattern in self.trusted)

    def vouches(self, source: str | None, accepted_by: object = None) -> bool:
        """Whether a fact is trusted: its source is, or a trusted source accepted that very text (``accepted_by``
        in its front matter, which only ``memvault accept`` writes and any other change of the fact drops)."""
        return self.is_trusted(source) or (isinstance(accepted_by, str) and bool(accepted_by)
                                           and self.is_trusted(accepted_by))

    def allows(self, op: Op, source: str | None) -> bool:
        return op in _ALLOWED_UNTRUSTED or self.is_trusted(source)

    def require(self, op: Op, source: str | None) -> None:
        """Raise :class:`UntrustedSource` when ``source`` may not do ``op``."""
        if not self.allows(op, source):
            rule = _BY_OP[op]
            raise UntrustedSource(str(source), f"only a trusted source ([trust] trusted = {list(self.trusted)}) may "
                                               f"{rule.what} ({rule.commands})")


def table(rules: Sequence[Rule] = RULES) -> str:
    """The markdown table of who may do what, as README.md shows it."""
    lines = ["| operation | commands | trusted sources | untrusted sources |", "|---|---|---|---|"]
    for rule in rules:
        lines.append(f"| {rule.what} | {rule.commands} | yes | {rule.untrusted} |")
    return "\n".join(lines)
