"""memvault.toml is validated once, against the settings declared in memvault.rules.config; nothing else reads it."""
from __future__ import annotations

import tomllib

import pytest

from memvault.rules import config
from memvault.rules.errors import ConfigError


def load_text(tmp_path, text):
    path = tmp_path / "memvault.toml"
    path.write_text(text)
    return config.load(path)


def test_the_template_is_valid_and_states_the_defaults(tmp_path):
    cfg = load_text(tmp_path, config.template())
    assert cfg == config.Config(path=tmp_path / "memvault.toml")
    raw = tomllib.loads(config.template())
    for section, key, _default, _help in config.settings():
        if section in raw and key in raw[section]:
            assert config.from_dict({section: {key: raw[section][key]}}) == config.Config()


@pytest.mark.parametrize("text, words", [
    ("[recall]\nsemantic_weigth = 0.4\n", ["[recall]", "semantic_weigth", "did you mean 'semantic_weight'"]),
    ("[recal]\nhalf_life = '30d'\n", ["unknown section [recal]", "did you mean [recall]"]),
    ("[recall]\nhalf_life = 30\n", ["half_life", "age like 30d"]),
    ("[recall]\nhalf_life = '0d'\n", ["half_life"]),
    ("[recall]\ncandidates = 5000\n", ["candidates", "between 1 and 4096"]),
    ("[recall]\nweights = { relevance = -1 }\n", ["weights", "relevance"]),
    ("[recall]\nweights = { novelty = 1 }\n", ["unknown factor 'novelty'"]),
    ("[episodes]\ntrack_in_git = 'yes'\n", ["track_in_git", "true or false"]),
    ("[trust]\ntrusted = 'user:*'\n", ["trusted", "list of source patterns"]),
    ("[limits]\nfact_bytes = '64 lots'\n", ["fact_bytes", "size like 64KiB"]),
    ("[index]\nbackend = 'mysql'\n", ["backend", "sqlite, postgres"]),
    ("[retention]\nRaw = '30d'\n", ["'Raw' is not an episode kind"]),
    ("[facts]\nstale_factor = nan\n", ["stale_factor", "must be a number"]),
    ("[embedding]\nmodel = ''\n", ["model", "non-empty"]),
    ("[episodes\n", ["invalid TOML"]),
    # A pushed commit's hostile values: each is refused by name, none crashes a command or turns a limit off.
    ("[limits]\nfact_bytes = '" + "9" * 400 + "GiB'\n", ["fact_bytes", "size like 64KiB"]),
    ("[limits]\nfact_bytes = '0.5'\n", ["fact_bytes", "at least 1 byte"]),
    ("[limits]\nfact_bytes = 99999999999999999999\n", ["fact_bytes", "at most"]),
    ("[capture]\nsession_bytes = '1e9GiB'\n", ["session_bytes"]),
    ("[recall]\nfield_weights = { key = 1e308 }\n", ["field_weights", "key", "at most"]),
    ("[recall]\nweights = { relevance = 1e308, importance = 1e308 }\n", ["weights", "at most"]),
    ("[embedding]\ndaemon_idle = '9999999999y'\n", ["daemon_idle", "at most"]),
    ("[capture]\nextractor_timeout = '9999999999y'\n", ["extractor_timeout", "at most"]),
    ("[recall]\nrescan_interval = '9999999999y'\n", ["rescan_interval", "at most"]),
    ("[retention]\ndefualt = '1d'\n", ["[retention]", "defualt", "did you mean 'default'"]),
    # The hook that reads it gives up on more than an hour (and on a day, a unit it did not know), using 3 s.
    ("[agents]\ntime_limit = '1d'\n", ["time_limit", "at most 1h"]),
    ("[agents]\nprompt_time_limit = '2h'\n", ["prompt_time_limit", "at most 1h"]),
    # A model name with a control character reached Hugging Face's URL builder: InvalidURL, exit 70 from recall.
    ('[embedding]\nmodel = "org/na\\nme"\n', ["model", "control character"]),
    ('[recall]\nreranker = "org/re\\u0000r"\n', ["reranker", "control character"]),
    ('[trust]\ntrusted = ["user:*\\nother sources: none"]\n', ["trusted", "control character"]),
    # 50,000 trusted patterns (639 KB) made a recall over 40 episodes take 2 minutes instead of 0.8 s.
    ("[trust]\ntrusted = [" + ", ".join(f"'a:x{i}*'" for i in range(1001)) + "]\n", ["trusted", "at most 1000"]),
])
def test_a_bad_setting_is_one_line_naming_the_file_and_the_key(tmp_path, text, words):
    with pytest.raises(ConfigError) as info:
        load_text(tmp_path, text)
    message = str(info.value)
    assert "memvault.toml" in message and "\n" not in message
    for word in words:
        assert word in message


def test_values_are_converted_once(tmp_path):
    cfg = load_text(tmp_path, "[recall]\nhalf_life = '12h'\nrescan_interval = '0s'\n[limits]\nfact_bytes = '2KiB'\n"
                              "[retention]\nalert = '7d'\n")
    assert cfg.recall.half_life == 12 * 3600 and cfg.recall.rescan_interval == 0
    assert cfg.limits.fact_bytes == 2048
    assert cfg.retention.max_age("alert") == 7 * 86400 and cfg.retention.max_age("other") == 90 * 86400


def test_non_utf8_config_is_a_clear_error(tmp_path):
    (tmp_path / "memvault.toml").write_bytes(b"[recall]\n# caf\xe9\n")
    with pytest.raises(ConfigError, match="not UTF-8"):
        config.load(tmp_path / "memvault.toml")


@pytest.mark.parametrize("url", ["postgresql://memvault:hunter2@db.internal/memvault",
                                 "postgresql://db.internal/memvault?password=hunter2", "mysql://db/x"])
def test_an_index_url_with_a_password_or_another_scheme_is_refused(tmp_path, url):
    with pytest.raises(ConfigError, match=r"\[index\] url"):
        load_text(tmp_path, f'[index]\nbackend = "postgres"\nurl = "{url}"\n')
    cfg = load_text(tmp_path, '[index]\nbackend = "postgres"\nurl = "postgresql://memvault@db.internal/memvault"\n')
    assert cfg.index.url.endswith("/memvault") and cfg.index.backend == "postgres"


@pytest.mark.parametrize("shared", ["embedding = 'x'\n", "[[embedding]]\nmodel = 'x'\n", "recall = 3\n"])
def test_a_shared_section_that_is_not_a_table_is_named_beside_this_hosts_settings(tmp_path, shared):
    """local.toml's [embedding] or [recall] is laid over memvault.toml's: a pushed ``embedding = 'x'`` was merged as
    a table (TypeError, exit 70 from every command) instead of being named."""
    path = tmp_path / "memvault.toml"
    path.write_text(shared)
    local = config.local_path(path)
    local.parent.mkdir(parents=True, exist_ok=True)
    local.write_text("[embedding]\nmodel = 'all-MiniLM-L6-v2'\n[recall]\nrerank_candidates = 5\n")
    with pytest.raises(ConfigError) as info:
        config.load(path)
    assert "memvault.toml" in str(info.value) and "must be a table" in str(info.value)


@pytest.mark.parametrize("value, seconds", [("0.01d", 864.0), ("1h", 3600.0), ("90s", 90.0), ("0.5m", 30.0)])
def test_the_session_hook_reads_every_time_limit_the_config_accepts(tmp_path, value, seconds):
    """The agent hook reads [agents] time_limit itself (no memvault import, for speed): an age the config accepts
    must be the one it uses, not its 3 s default."""
    from memvault.interfaces.agents import hook

    (tmp_path / "memvault.toml").write_text(f"[agents]\ntime_limit = '{value}'\n")
    assert load_text(tmp_path, f"[agents]\ntime_limit = '{value}'\n").agents.time_limit == seconds
    assert hook._time_limit(str(tmp_path), "session-start") == seconds


def test_a_blank_extractor_in_local_toml_is_no_extractor(tmp_path):
    """``extractor = "  "`` was kept: shlex split it to nothing and subprocess.run([]) raised IndexError, out of
    every capture (the hook caught only OSError and ValueError)."""
    path = tmp_path / "memvault.toml"
    path.write_text("")
    local = config.local_path(path)
    local.parent.mkdir(parents=True, exist_ok=True)
    local.write_text("[capture]\nextractor = '  '\n")
    assert config.load(path).capture.extractor is None
