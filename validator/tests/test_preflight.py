"""The in-process preflight (llamafleet.preflight) that the roles' action plugin calls: items of
texts checked together (units, the units of a client's server, Claude Code settings with their
scope and mode), skip and config, bad input, the refusal's wording; the per-instance `ignore:`
mapping rendered into units and inline facts; the action plugin in a real playbook."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from conftest import playbook_results, run_playbook
from llamafleet.errors import InputError
from llamafleet.facts import FactsError, apply_facts
from llamafleet.preflight import PreflightError, check_items, instance_ignores, refusal

ROOT = Path(__file__).resolve().parents[2]
NO_CACHE = "[Service]\nRestart=on-failure\nExecStart=/x/llama-server -m /m.gguf --cache-ram 0\n"
SYMMETRIC = "[Service]\nExecStart=/x/llama-server -m /m.gguf -ctk turbo3 -ctv turbo3\n"


def test_ignores_render_one_comment_per_rule_sorted() -> None:
    got = instance_ignores({"ls010": "both turbo3 on purpose", "LS003": " cache on disk "}, "main")
    assert got == [
        "llamafleet: ignore-file[LS003] cache on disk",
        "llamafleet: ignore-file[LS010] both turbo3 on purpose",
    ]
    assert instance_ignores(None) == [] and instance_ignores({}) == []


@pytest.mark.parametrize(
    ("ignore", "needle"),
    [
        (["LS010"], "must be a mapping"),
        ({"XX999": "why"}, "not a rule id"),
        ({"LS010]\n[Service": "x"}, "not a rule id"),
        ({"LS010": ""}, "needs a reason"),
        ({"LS010": 3}, "needs a reason"),
        ({"LS010": "ok\nExecStartPre=+/bin/sh"}, "one line"),
    ],
)
def test_bad_ignores_are_refused_with_the_instance_named(ignore: object, needle: str) -> None:
    with pytest.raises(PreflightError) as err:
        instance_ignores(ignore, "main")
    assert needle in str(err.value) and "instance main" in str(err.value)


def test_an_ignore_comment_suppresses_the_rule_in_that_unit_only() -> None:
    comment = "# " + instance_ignores({"LS010": "measured: fine on this model"}, "a")[0] + "\n"
    checked = check_items(
        [
            {"name": "a", "path": "llama-server-a.service", "text": comment + SYMMETRIC},
            {"name": "b", "path": "llama-server-b.service", "text": SYMMETRIC},
        ],
        fail_on="warning",
    )
    ids = {c.name: [f["id"] for f in c.findings] for c in checked}
    assert "LS010" not in ids["a"] and checked[0].suppressed >= 1
    assert "LS010" in ids["b"]


def test_findings_refuse_at_the_threshold_and_the_message_names_the_build() -> None:
    text = "[Service]\nExecStart=/x/llama-server -m /m.gguf --cache-ram 0\n"
    checked = check_items([{"name": "main", "path": "u.service", "text": text}], fail_on="warning")
    assert checked[0].refused
    msg = refusal(checked, "instance", "b9079-ef8c15dbd6-cpu-0123456789", "Use ignore:.")
    assert msg.startswith(
        "llamafleet check refused instance main for build b9079-ef8c15dbd6-cpu-0123456789"
    )
    assert "fix:" in msg and msg.endswith("Use ignore:.")
    # below the threshold: no refusal, no message
    info_only = check_items([{"name": "main", "path": "u.service", "text": text}], fail_on="error")
    assert not any(c.refused for c in info_only) or refusal(info_only, "instance")


def test_the_help_fact_is_inline_and_a_path_is_refused() -> None:
    help_text = (
        "-ctk,  --cache-type-k TYPE  KV cache data type for K\n  allowed values: f16, q8_0\n"
    )
    facts = apply_facts(
        {"build_manifest": {"help_text": help_text, "help_file": "/opt/x/help.txt"}}
    )
    assert facts.has_turbo is False
    for bad in (
        {"help_file": "/opt/llama.cpp/current/llama-server.help.txt"},
        {"gguf": "/srv/m.gguf"},
        {"build_manifest": "/opt/llama.cpp/current/manifest.json"},
    ):
        with pytest.raises(FactsError, match="name files"):
            apply_facts(bad, source="facts of main")


def test_bad_items_and_threshold_are_input_errors() -> None:
    with pytest.raises(InputError):
        check_items([{"name": "x"}])
    with pytest.raises(InputError):
        check_items([{"name": "x", "text": SYMMETRIC}], fail_on="fatal")


def _settings(url: str = "http://10.0.0.5:8080", key: str = "k") -> str:
    return json.dumps(
        {
            "env": {
                "ANTHROPIC_BASE_URL": url,
                "ANTHROPIC_AUTH_TOKEN": key,
                "CLAUDE_CODE_ATTRIBUTION_HEADER": "0",
            }
        },
        indent=2,
    )


def _unit(host: str, port: int) -> str:
    return (
        "[Service]\nRestart=on-failure\nExecStart=/x/llama-server -m /m.gguf --cache-ram 4096 "
        f"--host {host} --port {port} --api-key-file /etc/llamafleet/keys/k.key\n"
    )


def _ids(checked: Any) -> set[str]:
    return {f["id"] for f in checked.findings}


def test_the_texts_of_an_item_are_checked_together() -> None:
    """A client's settings with every unit of its server: the cross-file rules find the unit the
    URL's port reaches among them, and say so when none does."""
    units = [
        {"path": "gpu1:/etc/systemd/system/llama-server-a.service", "text": _unit("::", 8080)},
        {
            "path": "gpu1:/etc/systemd/system/llama-server-b.service",
            "text": _unit("0.0.0.0", 8081),
            "kind": "unit",
        },
    ]

    def xc001(url: str, texts: list[dict[str, Any]]) -> list[dict[str, Any]]:
        item = {
            "name": "c",
            "texts": texts,
            "settings": [{"path": "s.json", "text": _settings(url)}],
        }
        (checked,) = check_items([item], skip=["cc010"])
        assert checked.name == "c" and checked.path == "c"
        return [f for f in checked.findings if f["id"] == "XC001"]

    assert xc001("http://10.0.0.5:8081", units) == []  # the second unit
    assert xc001("http://10.0.0.5:8080", units) == []  # the first
    (miss,) = xc001("http://10.0.0.5:9999", units)
    assert miss["file"] == "s.json"
    assert ":8080" in miss["message"] and ":8081" in miss["message"]  # both servers named
    # one unit only (what the audit checked before): the user of the other is reported wrongly
    assert xc001("http://10.0.0.5:8081", units[:1]) != []
    # a text and texts together: the same as texts alone
    first = {"name": "c", "path": units[0]["path"], "text": units[0]["text"], "kind": "unit"}
    item = {**first, "texts": units[1:], "settings": [{"text": _settings("http://h:8081")}]}
    (both,) = check_items([item], skip=["CC010"])
    assert "XC001" not in _ids(both) and both.path == units[0]["path"]


def test_a_wildcard_server_is_named_by_the_clients_host_in_the_fix() -> None:
    """XC001's fix for a server listening on [::] (or 0.0.0.0) names the address the client used,
    never the wildcard: a connection to [::] is no URL for another machine."""
    for host in ("[::]", "::", "0.0.0.0"):
        item = {
            "name": "c",
            "texts": [{"path": "u.service", "text": _unit(host, 8080)}],
            "settings": [{"path": "s.json", "text": _settings("http://10.0.0.5:9999")}],
        }
        (checked,) = check_items([item], skip=["CC010"])
        (xc001,) = [f for f in checked.findings if f["id"] == "XC001"]
        assert "http://10.0.0.5:8080" in xc001["fix"], (host, xc001)


def test_skip_and_config(tmp_path: Path) -> None:
    item = {"name": "alice", "settings": [{"path": "s.json", "text": _settings()}]}
    (found,) = check_items([item])
    assert "CC010" in _ids(found)  # plain http beyond loopback
    (skipped,) = check_items([item], skip=["CC010"])
    assert "CC010" not in _ids(skipped)
    assert check_items([item], skip=[" cc010 "])[0].findings == skipped.findings
    config = tmp_path / ".llamafleet.yaml"
    config.write_text("skip: [CC010]\n")
    (configured,) = check_items([item], config_path=str(config))
    assert configured.findings == skipped.findings
    config.write_text("skip: [CC010\n")
    with pytest.raises(PreflightError, match=r"\.llamafleet\.yaml"):
        check_items([item], config_path=str(config))


def test_the_settings_mode_reaches_cc008() -> None:
    """CC008 (a key others may read) needs the file's permission bits on its host."""

    def cc008(mode: Any) -> list[dict[str, Any]]:
        sf = {"path": "/home/a/.claude/settings.json", "text": _settings(), "mode": mode}
        (found,) = check_items([{"name": "a", "settings": [sf]}])
        return [f for f in found.findings if f["id"] == "CC008"]

    assert cc008(None) == [] and cc008("") == [] and cc008(0o600) == [] and cc008("0600") == []
    assert len(cc008(0o644)) == 1 and cc008("0644") == cc008(0o644)
    assert "0644" in cc008("644")[0]["message"]
    for bad in ("rw-r--r--", 0o17777, True):
        with pytest.raises(PreflightError, match="mode"):
            cc008(bad)


@pytest.mark.parametrize(
    ("items", "kw", "message"),
    [
        ({"name": "x"}, {}, "items must be a list"),
        ("x", {}, "items must be a list"),
        (["x"], {}, "each item must be a mapping"),
        ([{"name": "x"}], {}, "no text to check"),
        ([{"name": "x", "text": "a", "extra": 1}], {}, "item x: unknown key"),
        ([{"name": "x", "text": 3}], {}, "text must be a string"),
        ([{"name": "x", "text": "a", "kind": "yaml"}], {}, "kind 'yaml'"),
        ([{"name": "x", "texts": [{"text": "a"}]}], {}, "needs a path and a text"),
        ([{"name": "x", "texts": [{"path": "p", "text": "a", "kind": "ini"}]}], {}, "kind 'ini'"),
        ([{"name": "x", "texts": "a"}], {}, "texts must be a list"),
        ([{"name": "x", "settings": [{"text": "{}", "scope": "global"}]}], {}, "scope 'global'"),
        ([{"name": "x", "settings": [{"path": "s.json"}]}], {}, "needs a text"),
        ([{"name": "x", "settings": {"text": "{}"}}], {}, "settings must be a list"),
        ([{"name": "x", "text": "a", "files": {"p": 1}}], {}, "files must map paths"),
        ([{"name": "x", "text": "a", "facts": ["x"]}], {}, "facts must be a mapping"),
        ([{"name": "x", "text": "a", "facts": {"help_file": "/x"}}], {}, "name files"),
        ([{"name": "x", "text": "a"}], {"fail_on": "fatal"}, "fail_on 'fatal'"),
        ([{"name": "x", "text": "a"}], {"skip": ["ZZ999"]}, "ZZ999"),
        ([{"name": "x", "text": "a"}], {"skip": "LS001"}, "skip must be a list"),
    ],
)
def test_bad_input_names_the_item_and_the_fix(items: Any, kw: dict[str, Any], message: str) -> None:
    with pytest.raises(PreflightError, match=message):
        check_items(items, **kw)


def test_the_refusal_names_each_finding_with_its_place() -> None:
    (checked,) = check_items([{"name": "main", "path": "u.service", "text": NO_CACHE}])
    assert checked.refused and checked.as_dict()["refused"] is True
    msg = refusal([checked], "instance")
    lines = msg.splitlines()
    assert lines[0] == "llamafleet check refused instance main (nothing was changed on the host):"
    assert any(ln.startswith("- LS001 [error] u.service:3: ") for ln in lines), msg
    assert lines[-1] == "Run `llamafleet explain ID` for details."
    written = refusal([checked], "the Claude Code settings of", written=True)
    assert "(as written on the host: fix it and run again):" in written
    assert "nothing was changed" not in written
    # nothing refused: no message
    ok = check_items([{"name": "main", "path": "u.service", "text": NO_CACHE}], skip=["LS001"])
    assert not ok[0].refused and refusal(ok, "instance", "b1", "hint") == ""


def test_the_action_plugin_runs_in_a_real_playbook(tmp_path: Path) -> None:
    """ansible-playbook on localhost with the role's action plugin: a refused unit fails the task
    with the build named, a suppressed one passes, and a .llamafleet.yaml in the directory
    ansible-playbook runs in is found; a client's settings with the units of its server (texts),
    skip and written reach the validator; a bad option fails the task naming it."""
    pytest.importorskip("ansible")
    good = "# " + instance_ignores({"LS001": "r"})[0] + "\n" + NO_CACHE
    settings = {"path": "/home/a/.claude/settings.json", "text": _settings(), "mode": "0644"}
    client = {
        "name": "alice",
        "texts": [{"path": "gpu1:/etc/systemd/system/u.service", "text": _unit("0.0.0.0", 8080)}],
        "settings": [settings],
    }
    play = textwrap.dedent(
        f"""\
            - hosts: localhost
              gather_facts: false
              tasks:
                - name: check
                  llamafleet.fleet.llamafleet_check:
                    what: instance
                    build: b9079-test
                    items:
                      - name: good
                        path: llama-server-good.service
                        text: {json.dumps(good)}
                      - name: bad
                        path: llama-server-bad.service
                        text: {json.dumps(NO_CACHE)}
                    fail_on: error
                  register: out
                  ignore_errors: true
                - name: check a client
                  llamafleet.fleet.llamafleet_check:
                    what: the Claude Code settings of
                    items: [{json.dumps(client)}]
                    skip: [cc010]
                    written: true
                  register: out_client
                  ignore_errors: true
                - name: a bad option
                  llamafleet.fleet.llamafleet_check:
                    items: [{json.dumps(client)}]
                    written: perhaps
                  register: out_bad
                  ignore_errors: true
                - name: show
                  ansible.builtin.debug:
                    msg: "RESULT all {{{{ [out, out_client, out_bad] | to_json }}}}"
            """
    )
    (tmp_path / ".git").mkdir()

    def run() -> list[dict[str, Any]]:
        proc = run_playbook(tmp_path, play)
        result: list[dict[str, Any]] = playbook_results(proc.stdout)["all"]
        return result

    out, out_client, out_bad = run()
    assert out["failed"] is True and "for build b9079-test" in out["msg"]
    assert "instance bad" in out["msg"] and "instance good" not in out["msg"]
    assert out["config"] is None
    # per-text outcomes under `checks`: `results` is what Ansible reads as a loop's items
    assert "results" not in out and [c["name"] for c in out["checks"]] == ["good", "bad"]
    # the settings' mode (CC008), the unit among the texts (no XC001), CC010 skipped, as written
    (alice,) = out_client["checks"]
    ids = {f["id"] for f in alice["findings"]}
    assert "CC008" in ids and "XC001" not in ids and "CC010" not in ids, alice
    assert out_client["failed"] is True and out_client["refused"] is True
    assert out_client["msg"].startswith(
        "llamafleet check refused the Claude Code settings of alice (as written on the host"
    )
    assert "- CC002 [error] /home/a/.claude/settings.json:3: " in out_client["msg"]
    assert "- CC008 [warning] /home/a/.claude/settings.json:4: " in out_client["msg"]
    assert out_bad["failed"] is True and "llamafleet_check: written:" in out_bad["msg"]
    assert "checks" not in out_bad
    (tmp_path / ".llamafleet.yaml").write_text("skip: [LS001, CC002]\n")
    out, out_client, _ = run()
    assert not out.get("failed") and out["config"].endswith(".llamafleet.yaml")
    assert not out_client.get("failed") and out_client["refused"] is False


def test_a_roles_check_never_says_a_file_was_not_opened() -> None:
    """A role hands over every file it has (LF003 is for the command line): a unit naming a
    chat template that was not handed over gets no LF003 notice."""
    unit = (
        "[Service]\nUser=llama\nExecStart=/usr/bin/llama-server -m /srv/q.gguf --jinja "
        "--chat-template-file /etc/llamafleet/templates/main.jinja\n"
    )
    (checked,) = check_items([{"name": "main", "texts": [{"path": "main.service", "text": unit}]}])
    assert "LF003" not in {f["id"] for f in checked.findings}, checked.findings
