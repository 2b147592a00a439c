"""Claude Code settings: scopes, precedence, process environment."""

from __future__ import annotations

import json
from pathlib import Path

from llamafleet.settings import Client, classify, group_clients, load_settings


def test_classify_scopes() -> None:
    assert classify("/etc/claude-code/managed-settings.json") == "managed"
    assert classify("/home/alice/.claude/settings.json") == "user"
    assert classify("/root/.claude/settings.json") == "user"
    assert classify("/home/alice/src/app/.claude/settings.json") == "project"
    assert classify("/home/alice/src/app/.claude/settings.local.json") == "local"


def test_precedence_managed_local_project_user_env() -> None:
    files = [
        load_settings(
            "/home/a/.claude/settings.json",
            '{"env": {"A": "user", "B": "user", "C": "user", "D": "user"}}',
        ),
        load_settings(
            "/p/.claude/settings.json", '{"env": {"A": "project", "B": "project", "C": "project"}}'
        ),
        load_settings("/p/.claude/settings.local.json", '{"env": {"A": "local", "B": "local"}}'),
        load_settings("/etc/claude-code/managed-settings.json", '{"env": {"A": "managed"}}'),
    ]
    c = Client(files=files, process_env={"A": "proc", "E": "proc"})
    got = {k: c.env(k).value for k in "ABCDE"}  # type: ignore[union-attr]
    assert got == {"A": "managed", "B": "local", "C": "project", "D": "user", "E": "proc"}


def test_invalid_json_keeps_position() -> None:
    sf = load_settings("s.json", '{\n  "env": {,}\n}')
    assert sf.data is None and sf.error_line == 2


def test_line_of_nested_key() -> None:
    sf = load_settings("s.json", '{\n "model": "x",\n "env": {\n  "model": 1,\n  "K": "v"\n }\n}')
    assert sf.line_of("env", "K") == 5
    assert sf.line_of("model") == 2


def test_several_user_files_are_several_clients() -> None:
    files = [
        load_settings("/home/a/.claude/settings.json", "{}"),
        load_settings("/home/b/.claude/settings.json", "{}"),
        load_settings("/etc/claude-code/managed-settings.json", "{}"),
    ]
    clients = group_clients(files, {})
    assert len(clients) == 2
    assert all(any(f.scope == "managed" for f in c.files) for c in clients)


def test_explicit_mode_is_used_instead_of_stat(tmp_path: Path) -> None:
    from llamafleet.engine import Inputs, add_file, run

    path = tmp_path / "settings.json"
    text = '{"env": {"ANTHROPIC_AUTH_TOKEN": "k"}}'
    path.write_text(text)
    path.chmod(0o600)
    assert load_settings(str(path), text).mode == 0o600  # default: from the file
    assert load_settings(str(path), text, mode=0o100644).mode == 0o644  # st_mode: bits taken
    assert load_settings(str(path), text, mode=None).mode is None  # unknown: not stat'ed
    assert load_settings(str(tmp_path / "nowhere.json"), text, mode=0o640).mode == 0o640
    # CC008 follows the mode given by an in-process caller (a 0600 scratch copy of a 0644 file)
    for mode, fired in ((0o644, True), (0o600, False), (None, False)):
        inputs = Inputs()
        add_file(inputs, str(path), text, kind="settings", scope="user", mode=mode)
        ids = [f.id for f in run(inputs, only=["CC008"]).findings]
        assert ids == (["CC008"] if fired else []), mode


def test_environment_of_a_script_is_the_lowest_precedence() -> None:
    from llamafleet.readers.common import EnvValue
    from llamafleet.settings import env_settings
    from llamafleet.values import Unresolved

    user = load_settings("/home/a/.claude/settings.json", '{"env": {"A": "user"}}', mode=None)
    env = env_settings(
        "claude.sh", {"A": EnvValue("env", 3), "B": EnvValue("$TOKEN", 4, unknown=True)}
    )
    (c,) = group_clients([env, user], {})
    assert c.env("A").value == "user"  # type: ignore[union-attr]
    b = c.env("B")
    assert b is not None and isinstance(b.value, Unresolved) and b.line == 4


def test_each_environment_is_a_client_with_the_user_settings() -> None:
    from llamafleet.readers.common import EnvValue
    from llamafleet.settings import env_settings

    user = load_settings("/home/a/.claude/settings.json", '{"env": {"U": "1"}}', mode=None)
    one = env_settings("compose.yaml", {"A": EnvValue("1", 2)}, "compose.yaml (service a)")
    two = env_settings("compose.yaml", {"A": EnvValue("2", 9)}, "compose.yaml (service b)")
    clients = group_clients([user, one, two], {})
    assert [(c.name, c.env("A").value, c.env("U").value) for c in clients] == [  # type: ignore[union-attr]
        ("compose.yaml (service a)", "1", "1"),
        ("compose.yaml (service b)", "2", "1"),
    ]


def test_an_unresolved_or_invalid_base_url_is_not_third_party() -> None:
    for url in ("${BASE}", "http://[::1:8080", "http://h:99999"):
        sf = load_settings("s.json", json.dumps({"env": {"ANTHROPIC_BASE_URL": url}}), mode=None)
        if url.startswith("$"):
            from llamafleet.readers.common import EnvValue
            from llamafleet.settings import env_settings

            sf = env_settings("x.sh", {"ANTHROPIC_BASE_URL": EnvValue(url, 1, unknown=True)})
        (c,) = group_clients([sf], {})
        assert not c.is_third_party(), url


def test_deep_json_is_refused_with_its_position() -> None:
    sf = load_settings("s.json", '{"env": ' + "[" * 500 + "]" * 500 + "}", mode=None)
    assert sf.data is None and sf.error is not None and "nested deeper than" in sf.error
    assert sf.error_line == 1
