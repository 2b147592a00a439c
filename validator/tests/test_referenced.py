"""Files named inside the inputs (EnvironmentFile=, LoadCredential=NAME:PATH, --api-key-file):
never opened by default, only as DIR/<basename> with --referenced-dir, as named with
--read-referenced; and then only regular files of at most 1 MiB, without blocking."""

from __future__ import annotations

import builtins
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import FIXTURES, load_ansible_plugin, plugin_path, run_cli
from llamafleet import planner
from llamafleet.argv import parse_argv_list
from llamafleet.engine import Inputs, add_file, run
from llamafleet.gguf_meta import load_model_meta, mmproj_bytes
from llamafleet.refs import AS_NAMED, MAX_BYTES, NEVER, ReferencedFiles, read_regular_file
from llamafleet.units import parse_unit

REPO = Path(__file__).resolve().parents[2]
SETTINGS = '{"env": {"ANTHROPIC_BASE_URL": "http://127.0.0.1:%d", "ANTHROPIC_AUTH_TOKEN": "%s"}}'


@pytest.fixture
def named(tmp_path: Path) -> dict[str, Path]:
    """Files at the paths a unit names (as on the machine the unit came from), with 'named'
    values, and copies with other values in a separate referenced directory."""
    src = tmp_path / "named"
    ref = tmp_path / "ref"
    src.mkdir()
    ref.mkdir()
    (src / "llama.env").write_text("PORT=9101\nLLAMA_ARG_CTX_SIZE=1111\n")
    (src / "cred.key").write_text("named-cred\n")
    (src / "file.key").write_text("named-file\n")
    (ref / "llama.env").write_text("PORT=9202\nLLAMA_ARG_CTX_SIZE=2222\n")
    (ref / "cred.key").write_text("dir-cred\n")
    (ref / "file.key").write_text("dir-file\n")
    return {"src": src, "ref": ref}


def _units(src: Path) -> tuple[str, str]:
    cred = (
        "[Service]\nUser=llama\nRestart=on-failure\n"
        f"EnvironmentFile={src}/llama.env\n"
        f"LoadCredential=api-key:{src}/cred.key\n"
        "ExecStart=/usr/bin/llama-server -m /srv/q.gguf --port ${PORT} --api-key-file %d/api-key\n"
    )
    plain = (
        "[Service]\nUser=llama\nRestart=on-failure\n"
        "ExecStart=/usr/bin/llama-server -m /srv/q.gguf --port 9300 "
        f"--api-key-file {src}/file.key\n"
    )
    return cred, plain


@pytest.fixture
def opened() -> Iterator[list[str]]:
    """Every path opened through open() or os.open() while the test runs."""
    seen: list[str] = []
    real_open, real_os_open = builtins.open, os.open

    def spy_open(file: Any, *a: Any, **kw: Any) -> Any:
        seen.append(str(file))
        return real_open(file, *a, **kw)

    def spy_os_open(path: Any, *a: Any, **kw: Any) -> int:
        seen.append(str(path))
        return real_os_open(path, *a, **kw)

    mp = pytest.MonkeyPatch()
    mp.setattr(builtins, "open", spy_open)
    mp.setattr(os, "open", spy_os_open)
    try:
        yield seen
    finally:
        mp.undo()


def test_unit_parse_opens_nothing_by_default(named: dict[str, Path], opened: list[str]) -> None:
    cred, _ = _units(named["src"])
    u = parse_unit(cred, "<unit>")
    assert u.server is not None
    assert u.server.value("--port") == "${PORT}"  # the env file's PORT is not applied
    assert u.server.int_value("--ctx-size") is None
    assert not [p for p in opened if str(named["src"]) in p or "llama.env" in p]


def test_unit_parse_with_referenced_dir_reads_only_the_basename_there(
    named: dict[str, Path], opened: list[str]
) -> None:
    cred, _ = _units(named["src"])
    u = parse_unit(cred, "<unit>", ReferencedFiles(directory=str(named["ref"])))
    assert u.server is not None
    assert u.server.int_value("--port") == 9202
    assert u.server.int_value("--ctx-size") == 2222
    assert not [p for p in opened if str(named["src"]) in p]
    assert str(named["ref"] / "llama.env") in opened


def test_unit_parse_as_named(named: dict[str, Path]) -> None:
    cred, _ = _units(named["src"])
    u = parse_unit(cred, "<unit>", ReferencedFiles(as_named=True))
    assert u.server is not None
    assert u.server.int_value("--port") == 9101
    assert u.server.int_value("--ctx-size") == 1111


def _check(tmp: Path, units: list[str], token: str, port: int, *flags: str) -> dict[str, Any]:
    paths = []
    for i, text in enumerate(units):
        p = tmp / f"u{i}.service"
        p.write_text(text)
        paths.append(str(p))
    s = tmp / "settings.json"
    s.write_text(SETTINGS % (port, token))
    s.chmod(0o600)
    res = run_cli(["check", *paths, str(s), *flags, "--format", "json", "--select", "XC001,XC002"])
    assert res.code in (0, 1), res.err
    data: dict[str, Any] = res.json()
    return data


def test_check_without_flags_opens_no_named_file(
    named: dict[str, Path], tmp_path: Path, opened: list[str]
) -> None:
    cred, plain = _units(named["src"])
    # the client talks to 9101, the port only the named env file holds: with the file unread the
    # unit's port stays unknown, so nothing says the client misses the server (XC001 needs a known
    # address to tell a mismatch), and no key is compared
    data = _check(tmp_path, [cred], "named-cred", 9101)
    assert data["findings"] == []
    data = _check(tmp_path, [plain], "other", 9300)
    assert data["findings"] == []  # the key file's key is unknown: not "a different key"
    assert not [p for p in opened if str(named["src"]) in p]


def test_check_with_referenced_dir(named: dict[str, Path], tmp_path: Path) -> None:
    cred, plain = _units(named["src"])
    ref = str(named["ref"])
    data = _check(tmp_path, [cred], "dir-cred", 9202, "--referenced-dir", ref)
    assert data["findings"] == []  # port and key from DIR/<basename>
    data = _check(tmp_path, [cred], "named-cred", 9202, "--referenced-dir", ref)
    assert [f["id"] for f in data["findings"]] == ["XC002"]
    data = _check(tmp_path, [plain], "dir-file", 9300, "--referenced-dir", ref)
    assert data["findings"] == []
    data = _check(tmp_path, [plain], "named-file", 9300, "--referenced-dir", ref)
    assert [f["id"] for f in data["findings"]] == ["XC002"]


def test_check_with_read_referenced(named: dict[str, Path], tmp_path: Path) -> None:
    cred, plain = _units(named["src"])
    data = _check(tmp_path, [cred], "named-cred", 9101, "--read-referenced")
    assert data["findings"] == []
    data = _check(tmp_path, [cred], "dir-cred", 9101, "--read-referenced")
    assert [f["id"] for f in data["findings"]] == ["XC002"]
    data = _check(tmp_path, [plain], "named-file", 9300, "--read-referenced")
    assert data["findings"] == []


def test_python_api_keyword(named: dict[str, Path]) -> None:
    cred, _ = _units(named["src"])
    settings = SETTINGS % (9202, "named-cred")
    for referenced, ids in (
        (NEVER, []),  # the port is in the unread env file: unknown, so no XC001
        (ReferencedFiles(directory=str(named["ref"])), ["XC002"]),
    ):
        inputs = Inputs(referenced=referenced)
        add_file(inputs, "<unit>", cred, kind="unit")
        add_file(inputs, "settings.json", settings, kind="settings", scope="user", mode=0o600)
        found = [f.id for f in run(inputs, only=["XC001", "XC002"]).findings]
        assert found == ids, referenced


def test_both_flags_are_refused(tmp_path: Path) -> None:
    unit = tmp_path / "u.service"
    unit.write_text("[Service]\nExecStart=/usr/bin/llama-server\n")
    with pytest.raises(SystemExit) as exc:
        run_cli(["check", str(unit), "--read-referenced", "--referenced-dir", str(tmp_path)])
    assert exc.value.code == 2
    res = run_cli(["check", str(unit), "--referenced-dir", str(tmp_path / "missing")])
    assert res.code == 2 and "not a directory" in res.err
    with pytest.raises(ValueError, match="not both"):
        ReferencedFiles(directory=str(tmp_path), as_named=True)


def test_help_documents_the_flags(capsys: pytest.CaptureFixture[str]) -> None:
    from llamafleet.cli import build_parser

    for command in ("check", "plan"):
        with pytest.raises(SystemExit):
            build_parser().parse_args([command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert "--referenced-dir DIR" in text and "--read-referenced" in text, command
        assert "by default none is opened" in text, command


def test_fifo_is_not_opened_and_does_not_block(tmp_path: Path) -> None:
    fifo = tmp_path / "llama.env"
    os.mkfifo(fifo)
    unit = f"[Service]\nEnvironmentFile={fifo}\nExecStart=/usr/bin/llama-server --port ${{PORT}}\n"
    result: list[Any] = []
    t = threading.Thread(
        target=lambda: result.append(parse_unit(unit, "<u>", ReferencedFiles(as_named=True))),
        daemon=True,
    )
    t.start()
    t.join(10)
    assert not t.is_alive(), "reading a FIFO named in EnvironmentFile= blocked"
    assert result[0].server.value("--port") == "${PORT}"
    assert read_regular_file(str(fifo)) is None


def test_only_small_regular_files_and_no_symlinks(tmp_path: Path) -> None:
    regular = tmp_path / "ok.key"
    regular.write_text("k\n")
    assert read_regular_file(str(regular)) == "k\n"
    link = tmp_path / "link.key"
    link.symlink_to(regular)
    assert read_regular_file(str(link)) is None
    assert ReferencedFiles(as_named=True).read(str(link)) is None
    assert read_regular_file(str(tmp_path)) is None
    assert read_regular_file(str(tmp_path / "missing")) is None
    big = tmp_path / "big.env"
    big.write_bytes(b"A=1\n" * (MAX_BYTES // 4 + 1))
    assert read_regular_file(str(big)) is None
    exact = tmp_path / "exact.env"
    exact.write_bytes(b"x" * MAX_BYTES)
    assert read_regular_file(str(exact)) == "x" * MAX_BYTES


def test_referenced_dir_takes_only_the_basename(tmp_path: Path) -> None:
    (tmp_path / "main.key").write_text("k\n")
    ref = ReferencedFiles(directory=str(tmp_path))
    assert ref.read("/etc/llamafleet/keys/main.key") == "k\n"
    assert ref.read("../../main.key") == "k\n"
    assert ref.locate("/etc/llamafleet/keys/") is None
    assert ref.locate("/x/..") is None
    assert NEVER.locate(str(tmp_path / "main.key")) is None


def test_plan_config_file_env_file(tmp_path: Path) -> None:
    env = tmp_path / "llama.env"
    env.write_text("LLAMA_ARG_CTX_SIZE=8192\n")
    unit = tmp_path / "llama.service"
    unit.write_text(f"[Service]\nEnvironmentFile={env}\nExecStart=/opt/llama-server -ctk q8_0\n")
    meta = FIXTURES / "models" / "qwen3.6-35b-a3b-ud-iq3_s.json"
    base = ["plan", "--model-meta", str(meta), "--config-file", str(unit), "--format", "json"]
    res = run_cli(base)
    assert res.code == 0, res.err
    assert res.json()["n_ctx"] != 8192
    res = run_cli([*base, "--read-referenced"])
    assert res.code == 0, res.err
    assert res.json()["n_ctx"] == 8192


def test_mmproj_size_only_as_the_policy_allows(tmp_path: Path) -> None:
    mmproj = tmp_path / "mmproj.gguf"
    mmproj.write_bytes(b"\0" * (3 * 1024 * 1024))
    model = load_model_meta(str(FIXTURES / "models" / "qwen3.6-35b-a3b-ud-iq3_s.json"))
    cfg_argv = ["-c", "8192", "--mmproj", str(mmproj)]
    cfg = parse_argv_list(cfg_argv)
    # the caller looks the size up (the planner reads no file); the policy decides
    assert mmproj_bytes(cfg, AS_NAMED) == 3 * 1024 * 1024
    assert mmproj_bytes(cfg, NEVER) is None
    assert planner.estimate(model, cfg, mmproj_bytes=mmproj_bytes(cfg, AS_NAMED)).mmproj_mib == 3
    assert planner.estimate(model, cfg, mmproj_bytes=mmproj_bytes(cfg, NEVER)).mmproj_mib == 0
    # `llamafleet plan` plans the projector the flags name
    meta = FIXTURES / "models" / "qwen3.6-35b-a3b-ud-iq3_s.json"
    res = run_cli(["plan", "--model-meta", str(meta), "--format", "json", "--", *cfg_argv])
    assert res.code == 0, res.err
    assert res.json()["mmproj_mib"] == 3


def test_playbook_filter_parses_without_opening(tmp_path: Path) -> None:
    plugin = load_ansible_plugin(plugin_path("filter", "llamafleet_units"))
    env = tmp_path / "llama.env"
    env.write_text("PORT=9555\n")
    unit = f"[Service]\nEnvironmentFile={env}\nExecStart=/usr/bin/llama-server --port 9000\n"
    unit_env = f"[Service]\nEnvironmentFile={env}\nEnvironment=LLAMA_ARG_PORT=9001\n"
    server = plugin.FilterModule().filters()["llamafleet_unit_server"]
    assert server(unit)["port"] == 9000
    # LLAMA_ARG_PORT from the env file would set the port: it is not read
    text = unit_env + "ExecStart=/usr/bin/llama-server -m m.gguf\n"
    env.write_text("LLAMA_ARG_PORT=9555\n")
    assert server(text)["port"] == 9001
    env.write_text("LLAMA_ARG_CTX_SIZE=4096\n")
    assert server(text)["ctx_size"] is None
