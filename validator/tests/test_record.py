"""The record classes that replaced ``@dataclass`` on the path of every ``llamafleet check``
(llamafleet.record): they keep what the dataclasses gave (equality over the fields, a repr
without the hidden ones, frozen records immutable and hashable without their uncompared
fields), and a ``llamafleet check`` process imports neither :mod:`dataclasses` nor the modules
only some inputs need (the HAProxy reader, hashlib)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from llamafleet.argv import ServerConfig, parse_argv_list
from llamafleet.facts import Facts
from llamafleet.flags import HelpFacts
from llamafleet.refs import NEVER, ReferencedFiles
from llamafleet.settings import Client, SettingsFile
from llamafleet.slots import SlotLayout, slot_layout


def test_equality_is_over_every_field() -> None:
    a = parse_argv_list(["llama-server", "-c", "8192"])
    c = parse_argv_list(["llama-server", "-c", "4096"])
    assert slot_layout(8192, 2, False) == SlotLayout(2, False, 8192, 4096)
    assert slot_layout(8192, 2, False) != SlotLayout(2, True, 8192, 8192)
    assert Facts(cpu_cores=16) == Facts(cpu_cores=16)
    assert Facts(cpu_cores=16) != Facts(cpu_cores=8)
    assert ServerConfig("x") == ServerConfig("x")
    assert a.path == c.path and a != c  # the options differ
    assert Facts() != object()


def test_mutable_records_are_not_hashable() -> None:
    with pytest.raises(TypeError):
        hash(Facts())
    with pytest.raises(TypeError):
        hash(ServerConfig("x"))


def test_defaults_are_not_shared() -> None:
    a, b = ServerConfig("a"), ServerConfig("b")
    a.options.append(parse_argv_list(["-c", "1"]).options[0])
    a.memo["k"] = 1
    assert b.options == [] and b.memo == {}
    c1, c2 = Client(files=[]), Client(files=[])
    c1.process_env["X"] = "1"
    assert c2.process_env == {}


def test_repr_leaves_out_the_hidden_fields() -> None:
    r = repr(ServerConfig("run.sh", line=3))
    assert r.startswith("ServerConfig(path='run.sh', line=3, ")
    assert "memo" not in r and "_index" not in r
    s = repr(SettingsFile("s.json", "user", "{}"))
    assert "_lines" not in s and "scope='user'" in s


def test_frozen_records() -> None:
    r = ReferencedFiles(directory="/srv")
    with pytest.raises(AttributeError, match="frozen"):
        r.directory = "/etc"
    with pytest.raises(AttributeError, match="frozen"):
        del r.as_named
    # the contents take part in neither equality nor the hash, as before
    a = ReferencedFiles(contents={"t.jinja": "a"})
    b = ReferencedFiles(contents={"t.jinja": "b"})
    assert a == b and hash(a) == hash(b)
    assert ReferencedFiles() == NEVER and ReferencedFiles(complete=True) != NEVER
    assert len({NEVER, ReferencedFiles(), ReferencedFiles(as_named=True)}) == 2
    with pytest.raises(ValueError, match="not both"):
        ReferencedFiles(directory="/srv", as_named=True)
    h = HelpFacts(frozenset({"-c"}), None)
    assert h.allowed_values == {} and h == HelpFacts(frozenset({"-c"}), None)
    with pytest.raises(AttributeError):
        h.cache_types = ()


#: modules a `llamafleet check` of a script, a unit and a settings file has no use for
NOT_IMPORTED = ("dataclasses", "inspect", "hashlib", "typing", "llamafleet.readers.haproxy")


def test_a_check_process_does_not_import_them(tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "run.sh").write_text("#!/bin/sh\nexec llama-server -m /m.gguf -c 65536 -np 2\n")
    (tmp_path / "llama.service").write_text(
        "[Service]\nUser=llama\nExecStart=/usr/bin/llama-server -m /m.gguf --port 8081\n"
    )
    (tmp_path / "settings.json").write_text(
        json.dumps({"env": {"ANTHROPIC_BASE_URL": "http://127.0.0.1:8080"}})
    )
    code = (
        "import sys\n"
        "from llamafleet.cli import main\n"
        "rc = main(['check', 'run.sh', 'llama.service', 'settings.json'])\n"
        f"print(sorted(m for m in {NOT_IMPORTED!r} if m in sys.modules))\n"
        "print(rc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert out[-2] == "[]", out
    assert out[-1] == "1", out  # it did check them: -np 2 splits the context (a finding)
