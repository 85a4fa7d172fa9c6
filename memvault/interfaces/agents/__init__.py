"""Coding agents wired to the vault: runtimes (install, status, uninstall), the settings files they edit
(configfiles), the context a session starts with (context, project), capture of a session's turns (capture,
transcripts), and the command every hook runs (hook). Nothing here is imported by the hook before it needs it."""
