"""Agent transcripts read as turns: what the person asked, what the agent answered, the commands it ran with
their exit status, and the files it changed. One reader per runtime's format (docs/agents.md cites each):

- **Claude Code**: JSONL at the hook's ``transcript_path``; ``user``/``assistant`` lines wrapping an Anthropic
  Messages ``message``, ``tool_use`` blocks on assistant lines and ``tool_result`` blocks (paired by
  ``tool_use_id``) on user lines, ``isCompactSummary``/``isMeta``/``isSidechain`` lines that are not prompts.
- **Codex CLI**: the rollout JSONL (``{"timestamp", "type", "payload"}`` lines): ``turn_context`` and
  ``event_msg``/``user_message`` open a turn, ``agent_message``/``task_complete`` carry the answer,
  ``function_call``/``exec_command_end``/``function_call_output`` the commands, ``apply_patch`` the files.
- **Gemini CLI**: the chat recording, JSONL (a metadata line, message records that a later record with the same
  id replaces, ``$rewindTo`` and ``$set`` records) or the older single JSON document ``{"messages": [...]}``;
  its own ``<session_context>`` and ``<hook_context>`` text in user records is not the person's prompt.

A turn's ``id`` is the runtime's own id of the prompt's message (Claude Code's line ``uuid``, Codex's
``turn_id``, Gemini's message ``id``): what makes capture idempotent. Readers parse only; nothing here writes.
"""
from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...rules import jsontext
from ...rules.fsread import TooLong, bounded_lines

RUNTIMES = ("claude-code", "codex", "gemini")
_EXIT = re.compile(r"(?:^|\n)\s*(?:Exit code|Exit Code|Process exited with code)[: ]\s*(-?\d+)")
_NOT_PROMPTS = ("<command-name>", "<command-message>", "<local-command-stdout>", "<local-command-caveat>",
                "<local-command-stderr>", "[Request interrupted by user", "<task-notification>")
_CODEX_SCAFFOLDING = ("<environment_context>", "<user_instructions>", "<permissions instructions>", "# AGENTS.md",
                      "<user_shell_command>", "<turn_aborted>")
_GEMINI_SETUP, _HOOK_OPEN, _HOOK_CLOSE = "<session_context>", "<hook_context>", "</hook_context>"
_FILE_TOOLS = {"Edit", "Write", "MultiEdit", "NotebookEdit", "write_file", "replace", "edit"}
_SHELL_TOOLS = {"Bash", "shell", "exec_command", "container.exec", "local_shell", "run_shell_command"}
_PATCH_FILE = re.compile(r"^\*\*\* (?:Update|Add|Delete) File: (.+)$", re.MULTILINE)


@dataclass
class Command:
    """A command the agent ran, and how it ended (``exit_code`` None when the transcript does not say)."""

    command: str
    exit_code: int | None = None
    failed: bool = False

    def status(self) -> str:
        if self.exit_code is not None:
            return f"exit {self.exit_code}"
        return "failed" if self.failed else "status unknown"


@dataclass
class Turn:
    """One exchange: a prompt and everything the agent did until the next prompt."""

    id: str
    prompt: str
    at: str | None = None
    answer: str = ""
    commands: list[Command] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    cwd: str | None = None
    #: Whether the turn is over (another prompt followed, or the runtime marked its end).
    complete: bool = False
    #: Byte offset of the turn's first line in the transcript (where a later capture resumes).
    start: int = 0
    _calls: dict[str, Command] = field(default_factory=dict, repr=False)
    _answer_id: str | None = field(default=None, repr=False)

    def add_file(self, path: Any) -> None:
        """Note a changed file (a relative one is taken from the turn's working directory)."""
        if not isinstance(path, str) or not path.strip():
            return
        path = path.strip()
        if not os.path.isabs(path) and self.cwd:
            path = os.path.normpath(os.path.join(self.cwd, path))
        if path not in self.files:
            self.files.append(path)


@dataclass
class Transcript:
    """The turns read from a transcript (from a byte offset), and what it says about its session."""

    turns: list[Turn]
    session_id: str | None = None
    cwd: str | None = None
    #: Byte offset just past the last line read (the whole file was read when it equals its size).
    end: int = 0
    problems: list[str] = field(default_factory=list)
    #: The read stopped at ``end`` (the first line of a turn) because it had read ``max_bytes``: read on from there.
    more: bool = False


def read(runtime: str, path: Path | str, start: int = 0, *, max_bytes: int | None = None) -> Transcript:
    """The turns of ``path`` from byte ``start`` (a line start) on, in the format of ``runtime``. Lines that are
    not JSON (a half-written last line) are skipped and counted in ``problems``; a file that cannot be read
    raises OSError.

    The file is read line by line (memory holds one line and the turns, never the file). With ``max_bytes``, a
    JSONL transcript is read in pieces: the read stops at the first turn that starts past ``max_bytes`` from
    ``start``, says so in ``more``, and ``end`` is where the next read starts (Gemini's recording, rewritten
    whole by its runtime, is always read whole, each record reduced to what a turn keeps as it is read)."""
    path = Path(path)
    if runtime == "claude-code":
        return _claude(path, start, max_bytes)
    if runtime == "codex":
        return _codex(path, start, max_bytes)
    if runtime == "gemini":
        return _gemini(path)
    raise ValueError(f"unknown runtime {runtime!r} (known: {', '.join(RUNTIMES)})")


# ------------------------------------------------------------------------------------------------ lines
#: The first bytes of a zstd frame: Codex compresses rollouts to ``.jsonl.zst`` (codex-rs/rollout/src/compression.rs).
ZST_MAGIC = b"\x28\xb5\x2f\xfd"
#: Largest rollout read once decompressed: a few KiB of zstd can claim gigabytes (a file made to exhaust the disk
#: or the clock, never a session someone had).
ZST_MAX_BYTES = 512 << 20
#: Compressed bytes handed to the decompressor at a time: what one call returns is bounded by this many times
#: zstd's largest ratio (an RLE block: 128 KiB from 4 bytes), so a bomb is caught within a few MiB of the cap.
_ZST_STEP = 256


def _zst_lines(path: Path, start: int) -> Iterator[bytes]:
    """The lines of a zstd-compressed transcript from byte ``start`` of its decompressed text. The whole file is
    first decompressed once without keeping it (a stream, never the file in memory) to check it is complete and
    under :data:`ZST_MAX_BYTES`: a truncated or corrupt rollout raises OSError naming it before a single line is
    given, so a capture never stores the first half of a damaged session."""
    for _ in _zst_chunks(path):
        pass
    skip, tail = start, b""
    for chunk in _zst_chunks(path):
        if skip:
            cut = min(skip, len(chunk))
            chunk, skip = chunk[cut:], skip - cut
        lines = (tail + chunk).split(b"\n")
        tail = lines.pop()
        for line in lines:
            yield line + b"\n"
    if tail:
        yield tail


def _zst_chunks(path: Path) -> Iterator[bytes]:
    """Decompressed pieces of ``path`` (frames one after another, as ``zstd`` writes them), each at most a few
    MiB; OSError naming the file when it is not zstd, stops inside a frame, or grows past :data:`ZST_MAX_BYTES`."""
    new, error = _zstd()
    total = 0
    with open(path, "rb") as f:
        decompressor, pending = new(), b""
        while True:
            data = pending or f.read(_ZST_STEP)
            pending = b""
            if not data:
                break
            try:
                piece = decompressor.decompress(data)
            except error as exc:
                raise OSError(f"{path}: not a readable zstd file ({exc})") from None
            total += len(piece)
            if total > ZST_MAX_BYTES:
                raise OSError(f"{path}: decompresses to more than {ZST_MAX_BYTES >> 20} MiB; not read (a rollout "
                              f"that large is not a session: decompress it yourself if it is)")
            if piece:
                yield piece
            if decompressor.eof:  # a frame ended: what follows it is the next frame
                pending, decompressor = decompressor.unused_data, new()
                if not pending:
                    data = f.read(_ZST_STEP)
                    if not data:
                        return
                    pending = data
    raise OSError(f"{path}: the zstd file ends inside a frame (truncated?); not read")


def _zstd() -> tuple[Any, type[Exception]]:
    """A factory of zstd decompressors with ``decompress``, ``eof`` and ``unused_data`` (the standard library's
    on Python 3.14 and later, else the ``zstandard`` package), and the error they raise. Imported here: only a
    compressed rollout pays for it."""
    try:
        from compression import zstd  # type: ignore[import-not-found]  # Python 3.14+
        return zstd.ZstdDecompressor, zstd.ZstdError
    except ImportError:
        pass
    try:
        import zstandard
    except ImportError:
        raise OSError("reading a .jsonl.zst rollout needs the zstandard package (pip install zstandard)") from None
    return (lambda: zstandard.ZstdDecompressor().decompressobj()), zstandard.ZstdError


def _lines(path: Path, start: int, out: Transcript) -> Iterator[tuple[int, dict[str, Any]]]:
    """(offset, object) for each complete JSON line from ``start``, read one line at a time; ``out.end`` follows
    the end of the last complete line. A last line without its newline is left for the next read (the runtime is
    still writing it). A line past :data:`MAX_LINE` (a tool's output of a 50 MB log) is skipped piece by piece and
    named in ``problems``, never held: parsing it took several times its size at every hook run."""
    out.end = start
    with open(path, "rb") as f:
        compressed = f.read(4) == ZST_MAGIC
        f.seek(start)
        offset = start
        for raw in (_zst_lines(path, start) if compressed else bounded_lines(f, MAX_LINE)):
            if isinstance(raw, TooLong):  # a line too long to read: its length, its newline included
                if not raw.ended:
                    return  # unfinished: read again later
                line_at, offset = offset, offset + raw
                out.end = offset
                out.problems.append(f"{path.name}: byte {line_at}: a line of {raw} bytes, too long to read "
                                    f"(over {MAX_LINE >> 20} MiB): skipped")
                continue
            if not raw.endswith(b"\n"):
                return  # unfinished: read again later
            line_at, offset = offset, offset + len(raw)
            out.end = offset
            if not raw.strip():
                continue
            try:
                obj = jsontext.parse(raw)
            except (ValueError, UnicodeDecodeError):
                obj = None
            if not isinstance(obj, dict):
                out.problems.append(f"{path.name}: byte {line_at}: not a JSON object")
                continue
            yield line_at, obj


#: The longest transcript line read (a longer one is skipped, see :func:`_lines`).
MAX_LINE = 16 << 20


def _past(out: Transcript, start: int, offset: int, max_bytes: int | None) -> bool:
    """Whether a turn opening at ``offset`` starts past the piece this read may take (and another turn came
    before it, so every read makes progress)."""
    return max_bytes is not None and offset - start >= max_bytes and bool(out.turns)


def _text(content: Any) -> str:
    """The text of a message's content: a string, or the text blocks/parts of a list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, dict) and isinstance(block.get("text"), str) and block.get("type") in (
                    None, "text", "input_text", "output_text"):
                parts.append(block["text"])
        return "\n".join(p for p in parts if p)
    return ""


def _exit_code(text: str) -> int | None:
    m = _EXIT.search(text[:4000])
    return int(m.group(1)) if m else None


def _close(turns: list[Turn]) -> None:
    if turns:
        turns[-1].complete = True


# ------------------------------------------------------------------------------------------------ Claude Code
def _claude(path: Path, start: int, max_bytes: int | None = None) -> Transcript:
    out = Transcript([])
    turn: Turn | None = None
    for offset, obj in _lines(path, start, out):
        kind = obj.get("type")
        out.session_id = out.session_id or _str(obj.get("sessionId"))
        out.cwd = _str(obj.get("cwd")) or out.cwd
        if obj.get("isSidechain") or kind not in ("user", "assistant"):
            continue
        message = obj.get("message") if isinstance(obj.get("message"), dict) else {}
        content = message.get("content")
        if kind == "user":
            blocks = content if isinstance(content, list) else []
            for block in blocks:
                if isinstance(block, dict) and block.get("type") == "tool_result" and turn is not None:
                    call = turn._calls.get(str(block.get("tool_use_id")))
                    if call is not None:
                        result = _text(block.get("content")) if not isinstance(block.get("content"), str) \
                            else block["content"]
                        call.exit_code = _exit_code(result)
                        call.failed = bool(block.get("is_error"))
                        if call.exit_code is None and not call.failed:
                            call.exit_code = 0
            if obj.get("isCompactSummary") or obj.get("isMeta"):
                continue
            if any(isinstance(b, dict) and b.get("type") == "tool_result" for b in blocks):
                continue  # the harness talking, not the person
            prompt = _text(content).strip()
            if not prompt or prompt.startswith(_NOT_PROMPTS):
                continue
            if _past(out, start, offset, max_bytes):
                return _stop(out, offset)
            _close(out.turns)
            turn = Turn(id=_str(obj.get("uuid")) or _hash(prompt, obj.get("timestamp")), prompt=prompt,
                        at=_str(obj.get("timestamp")), cwd=_str(obj.get("cwd")), start=offset)
            out.turns.append(turn)
        elif turn is not None:
            msg_id = _str(message.get("id")) or _str(obj.get("uuid"))
            for block in content if isinstance(content, list) else [{"type": "text", "text": content}]:
                if not isinstance(block, dict):
                    continue
                if block.get("type") == "text" and isinstance(block.get("text"), str) and block["text"].strip():
                    if turn._answer_id == msg_id:
                        turn.answer += "\n" + block["text"]
                    else:
                        turn.answer, turn._answer_id = block["text"], msg_id
                elif block.get("type") == "tool_use":
                    _tool_use(turn, str(block.get("id")), block.get("name"), block.get("input"))
    return _finish(out)


def _tool_use(turn: Turn, call_id: str, name: Any, args: Any) -> None:
    args = args if isinstance(args, dict) else {}
    if name in _SHELL_TOOLS:
        command = args.get("command", args.get("cmd"))
        if isinstance(command, list):
            command = _argv(command)
        if isinstance(command, str) and command.strip():
            call = Command(command.strip())
            turn.commands.append(call)
            turn._calls[call_id] = call
    elif name in _FILE_TOOLS:
        turn.add_file(args.get("file_path") or args.get("notebook_path") or args.get("path"))
    elif name == "apply_patch":
        patch = args.get("input") if isinstance(args.get("input"), str) else ""
        for m in _PATCH_FILE.finditer(patch):
            turn.add_file(m.group(1).strip())


def _argv(argv: list[Any]) -> str:
    """``["bash", "-lc", "cargo test"]`` -> ``cargo test``; any other argv joined by spaces."""
    words = [str(a) for a in argv]
    if len(words) == 3 and words[0].rsplit("/", 1)[-1] in ("bash", "sh", "zsh") and words[1] in ("-lc", "-c"):
        return words[2]
    return " ".join(words)


# ------------------------------------------------------------------------------------------------ Codex
def _codex(path: Path, start: int, max_bytes: int | None = None) -> Transcript:
    out = Transcript([])
    turn: Turn | None = None
    turn_id: str | None = None  # from turn_context/task_started, for the next prompt
    opening: int | None = None  # where the lines that open the next turn begin (its turn_context)
    for offset, obj in _lines(path, start, out):
        kind, payload = obj.get("type"), obj.get("payload")
        if not isinstance(payload, dict):
            continue
        ptype = payload.get("type")
        if kind == "session_meta":
            out.session_id = _str(payload.get("id")) or out.session_id
            out.cwd = _str(payload.get("cwd")) or out.cwd
        elif kind == "turn_context" or (kind == "event_msg" and ptype in ("task_started", "turn_started")):
            given = _str(payload.get("turn_id"))
            out.cwd = _str(payload.get("cwd")) or out.cwd
            if turn is not None and not turn.complete and given is not None and given == turn.id:
                continue  # the open turn's context again (after a compaction): nothing opens here
            if opening is None or (given and turn_id and given != turn_id):  # another turn's lines begin here
                opening = offset
            turn_id = given or turn_id
        elif kind == "event_msg" and ptype == "user_message":
            prompt = (_str(payload.get("message")) or "").strip()
            if prompt and not prompt.startswith(_CODEX_SCAFFOLDING):
                if turn is not None and not turn.complete and turn.prompt == prompt and turn._answer_id == "mirror":
                    turn._answer_id = None  # the response_item mirror of this same prompt opened it already
                    continue
                if _past(out, start, offset, max_bytes):
                    return _stop(out, offset if opening is None else opening)
                turn = _codex_turn(out, turn_id, prompt, obj, offset if opening is None else opening)
                turn_id, opening = None, None
        elif kind == "response_item" and ptype == "message" and payload.get("role") == "user":
            prompt = _text(payload.get("content")).strip()
            if prompt and not prompt.startswith(_CODEX_SCAFFOLDING) and (turn is None or turn.prompt != prompt
                                                                         or turn.complete):
                if _past(out, start, offset, max_bytes):
                    return _stop(out, offset if opening is None else opening)
                turn = _codex_turn(out, turn_id, prompt, obj, offset if opening is None else opening)
                turn._answer_id, opening = "mirror", None
        elif turn is None:
            continue
        elif kind == "event_msg" and ptype == "agent_message":
            turn.answer = _str(payload.get("message")) or turn.answer
        elif kind == "response_item" and ptype == "message" and payload.get("role") == "assistant":
            turn.answer = _text(payload.get("content")) or turn.answer
        elif kind == "event_msg" and ptype in ("task_complete", "turn_complete"):
            turn.answer = _str(payload.get("last_agent_message")) or turn.answer
            turn.complete = True
        elif kind == "response_item" and ptype in ("function_call", "custom_tool_call"):
            args: Any = payload.get("arguments", payload.get("input"))
            if isinstance(args, str) and payload.get("name") != "apply_patch":
                try:
                    args = jsontext.parse(args)
                except ValueError:
                    args = {}
            if payload.get("name") == "apply_patch" and isinstance(args, str):
                args = {"input": args}
            _tool_use(turn, str(payload.get("call_id")), payload.get("name"), args)
        elif kind == "response_item" and ptype == "local_shell_call":
            action = payload.get("action") if isinstance(payload.get("action"), dict) else {}
            _tool_use(turn, str(payload.get("call_id")), "local_shell", {"command": action.get("command")})
        elif kind == "event_msg" and ptype == "exec_command_end":
            call = turn._calls.get(str(payload.get("call_id")))
            if call is not None and isinstance(payload.get("exit_code"), int):
                call.exit_code = payload["exit_code"]
        elif kind == "response_item" and ptype in ("function_call_output", "custom_tool_call_output"):
            call = turn._calls.get(str(payload.get("call_id")))
            if call is not None and call.exit_code is None:
                call.exit_code = _codex_exit(payload.get("output"))
        elif kind == "event_msg" and ptype == "patch_apply_end":
            changes = payload.get("changes")
            for name in changes if isinstance(changes, dict) else ():
                turn.add_file(name)
    _finish(out)
    if opening is not None:  # a turn's opening lines read, its prompt not yet written: read them again next time
        out.end = min(out.end, opening)
    return out


def _codex_turn(out: Transcript, turn_id: str | None, prompt: str, obj: dict[str, Any], offset: int) -> Turn:
    """A new turn, starting at ``offset``: the first of the lines that open it (its ``turn_context`` and
    ``task_started``), not its prompt's, so a read resumed there (the turn was not over) learns Codex's
    ``turn_id`` again: resumed at the prompt, the turn got a hash for an id, and a later read of the rollout from
    its start (archived, compressed, captures.db rebuilt) stored it a second time under Codex's."""
    _close(out.turns)
    turn = Turn(id=turn_id or _hash(prompt, obj.get("timestamp")), prompt=prompt, at=_str(obj.get("timestamp")),
                cwd=out.cwd, start=offset)
    out.turns.append(turn)
    return turn


def _codex_exit(output: Any) -> int | None:
    """The exit code in a function_call_output: ``{"metadata": {"exit_code": N}}`` (as JSON text or an object),
    or a line "Exit code: N" / "Process exited with code N"."""
    if isinstance(output, dict):
        output = output.get("content", output)
    if isinstance(output, str):
        try:
            parsed = jsontext.parse(output)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            meta = parsed.get("metadata")
            if isinstance(meta, dict) and isinstance(meta.get("exit_code"), int):
                return int(meta["exit_code"])
            output = str(parsed.get("output", ""))
        return _exit_code(output)
    return None


# ------------------------------------------------------------------------------------------------ Gemini
#: Largest Gemini recording in the older one-document format read (it is parsed whole; the JSONL format is not).
GEMINI_DOCUMENT_BYTES = 256 << 20
#: The arguments of a tool call a turn reads (:func:`_tool_use`): the rest (a file's whole new text) is dropped.
_TOOL_ARGS = ("command", "cmd", "file_path", "notebook_path", "path", "input")


def _gemini(path: Path) -> Transcript:
    """A Gemini chat recording, read whole (records replace earlier ones by id, and rewinds cut the tail). Each
    record is reduced to what a turn keeps as it is read (:func:`_gemini_slim`): Gemini records every tool call's
    whole output, and a recording of hundreds of MB was held as bytes and as parsed records at once."""
    out = Transcript([])
    size = path.stat().st_size
    if _one_document(path):  # the older format: one JSON document
        if size > GEMINI_DOCUMENT_BYTES:
            raise OSError(f"{path}: a Gemini recording of {size >> 20} MiB in the older one-document format; not "
                          f"read (over {GEMINI_DOCUMENT_BYTES >> 20} MiB)")
        try:
            doc = jsontext.parse(path.read_bytes().strip())
        except (ValueError, UnicodeDecodeError):
            doc = None
        if isinstance(doc, dict) and isinstance(doc.get("messages"), list):
            out.session_id = _str(doc.get("sessionId"))
            return _gemini_turns(out, _gemini_messages(doc["messages"]), size)
    messages: dict[str, dict[str, Any]] = {}
    for _, obj in _lines(path, 0, out):
        if isinstance(obj.get("$rewindTo"), str):
            target, found = obj["$rewindTo"], False
            for mid in list(messages):
                found = found or mid == target
                if found:
                    del messages[mid]
            if not found:
                messages.clear()
        elif isinstance(obj.get("$set"), dict):
            if isinstance(obj["$set"].get("messages"), list):
                messages = _gemini_messages(obj["$set"]["messages"])
        elif "id" in obj and "type" in obj:
            messages[str(obj["id"])] = _gemini_slim(obj)
        elif "sessionId" in obj:
            out.session_id = _str(obj.get("sessionId"))
            messages.update(_gemini_messages(obj.get("messages") or []))
    return _gemini_turns(out, messages, size)


def _one_document(path: Path) -> bool:
    """Whether ``path`` is one JSON document (the older format) rather than JSON lines: it starts with ``{`` and
    no later line does. Read in pieces, never whole."""
    with open(path, "rb") as f:
        chunk = f.read(1 << 16).lstrip()
        if not chunk.startswith(b"{"):
            return False
        previous = b""
        while chunk:
            if b"\n{" in previous + chunk:
                return False
            previous, chunk = chunk[-1:], f.read(1 << 16)
    return True


def _gemini_messages(items: Any) -> dict[str, dict[str, Any]]:
    """A list of records by id, each reduced (:func:`_gemini_slim`)."""
    if not isinstance(items, list):
        return {}
    return {str(m.get("id")): _gemini_slim(m) for m in items if isinstance(m, dict)}


def _gemini_slim(m: dict[str, Any]) -> dict[str, Any]:
    """What a turn keeps of a Gemini record: its type, time and text, and each tool call's name, the arguments a
    turn reads, its status and the exit code in its output (the output itself is dropped)."""
    calls = []
    for call in m.get("toolCalls") if isinstance(m.get("toolCalls"), list) else []:
        if not isinstance(call, dict):
            continue
        args = call.get("args") if isinstance(call.get("args"), dict) else {}
        calls.append({"id": call.get("id"), "name": call.get("name"), "status": call.get("status"),
                      "args": {k: v for k, v in args.items() if k in _TOOL_ARGS},
                      "exit": _result_exit(call.get("result"))})
    content = _gemini_prompt(m.get("content")) if m.get("type") == "user" else _text(m.get("content"))
    return {"type": m.get("type"), "timestamp": m.get("timestamp"), "content": content, "toolCalls": calls}


def _result_exit(result: Any) -> int | None:
    """The exit code a recorded tool result states: the first text in it that says one, at its start or its end
    (Gemini writes the code after the output: "Output: ...\\nExit Code: 1"). Read in place, never copied whole."""
    stack = [result]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            code = _exit_code(value)
            if code is None:
                code = _exit_code(value[-4000:])
            if code is not None:
                return code
        elif isinstance(value, dict):
            stack.extend(reversed(list(value.values())))
        elif isinstance(value, list):
            stack.extend(reversed(value))
    return None


def _gemini_turns(out: Transcript, messages: dict[str, dict[str, Any]], size: int) -> Transcript:
    turn: Turn | None = None
    for mid, m in messages.items():
        if m.get("type") == "user":
            prompt = m["content"].strip()
            if not prompt or prompt.startswith("/"):
                continue
            _close(out.turns)
            turn = Turn(id=mid, prompt=prompt, at=_str(m.get("timestamp")))
            out.turns.append(turn)
        elif m.get("type") == "gemini" and turn is not None:
            text = m["content"].strip()
            if text:
                turn.answer = text
            for call in m["toolCalls"]:
                _tool_use(turn, str(call.get("id")), call.get("name"), call.get("args"))
                command = turn._calls.get(str(call.get("id")))
                if command is not None:
                    command.exit_code = call["exit"]
                    command.failed = call.get("status") == "error"
    out.end = size
    return out


def _gemini_prompt(content: Any) -> str:
    """What the person typed in a Gemini ``user`` record. Gemini CLI records its own setup message (the
    ``<session_context>`` block: directory listing, GEMINI.md, MCP server instructions) as a user message, and
    the SessionStart hooks' context (memvault's own block among it) as ``<hook_context>...</hook_context>``: in
    front of the prompt under ``gemini -p``, a user message of its own in an interactive session. Neither is the
    person's (Gemini itself skips both when it shows a session: ``isIgnoredUserContent``, gemini-cli 0.61)."""
    parts = content if isinstance(content, list) else [content]
    kept = []
    for part in parts:
        text = _text([part]).strip()
        if text.startswith(_GEMINI_SETUP):
            return ""
        while text.startswith(_HOOK_OPEN):
            end = text.find(_HOOK_CLOSE)
            text = "" if end < 0 else text[end + len(_HOOK_CLOSE):].lstrip()
        kept.append(text)
    return "\n".join(t for t in kept if t).strip()


# ------------------------------------------------------------------------------------------------ helpers
def _finish(out: Transcript) -> Transcript:
    """Where the next read starts: the first line of the first turn that is not over (it may still grow), else
    the end of the last complete line read (``out.end``, kept by :func:`_lines`)."""
    open_turns = [t for t in out.turns if not t.complete]
    if open_turns:
        out.end = open_turns[0].start
    return out


def _stop(out: Transcript, offset: int) -> Transcript:
    """A piece read: the turns before ``offset`` are over (another one starts there), and the next read starts
    at ``offset``."""
    _close(out.turns)
    out.end, out.more = offset, True
    return out


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _hash(text: str, stamp: Any) -> str:
    return "h" + hashlib.sha1(f"{stamp}\0{text}".encode()).hexdigest()[:20]
