"""The ``llamafleet`` command line: check, explain, rules, inspect, plan."""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Sequence

from llamafleet import __version__
from llamafleet.cli_options import UsageError, add_referenced_options, referenced_policy
from llamafleet.config_file import CONFIG_NAMES, find_config
from llamafleet.errors import SEVERITIES, InputError, InternalError

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse

    from llamafleet.facts import Facts

# Imports of the check machinery (catalogue, YAML, the planner) happen inside the commands that
# need them, so each command loads only what it uses; argparse and json too, so that they load
# after main() has stopped the collector.

CHECK_EPILOG = """\
Every llama-server command of a file is checked (wrappers, functions, commands kept in variables
or arrays, sh -c, docker/podman run, Compose services), each at its own lines. A value set
outside the file ($VAR, ${VAR}, $(...), systemd's %i) is unknown: never invalid, and rules that
need it stay silent. Inputs: regular files of at most 2 MiB, in any encoding (UTF-8, UTF-16,
Windows-1252); YAML and JSON nested at most 100 deep, YAML aliases expanding to at most 200,000
nodes. A file in which nothing can be read is reported (LF002).

exit status: 0 no finding at --fail-on (default: error), 1 findings, 2 bad usage or an input
that cannot be read, 3 an internal error (one line naming the file)."""

EXIT_FINDINGS = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3
CLIENT_ENV_PREFIXES = ("ANTHROPIC_", "CLAUDE_CODE_", "API_TIMEOUT_MS")


def _formatter() -> type[argparse.HelpFormatter]:
    """argparse's formatter, sized from COLUMNS or the terminal without importing shutil (which
    argparse loads for every parser it builds: a few ms of every run)."""
    import argparse

    class Formatter(argparse.RawDescriptionHelpFormatter):
        def __init__(
            self,
            prog: str,
            indent_increment: int = 2,
            max_help_position: int = 24,
            width: int | None = None,
        ) -> None:
            if width is None:
                try:
                    columns = int(os.environ.get("COLUMNS", ""))
                except ValueError:
                    try:
                        columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
                    except (AttributeError, ValueError, OSError):
                        columns = 80
                width = max(columns, 20) - 2
            super().__init__(prog, indent_increment, max_help_position, width)

    return Formatter


def _read(path: str) -> str:
    """A file given on the command line: a regular file of at most 2 MiB, in any encoding
    (llamafleet.textio); anything else is a usage error."""
    from llamafleet.textio import read_text

    try:
        return read_text(path)
    except InputError as exc:
        raise UsageError(str(exc)) from exc


def _add_fact_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("facts (all optional; rules that need a missing fact stay silent)")
    g.add_argument("--facts", metavar="FILE", help="JSON/YAML with any of the facts below")
    g.add_argument("--help-text", metavar="FILE", help="output of `llama-server --help`")
    g.add_argument("--version-text", metavar="FILE", help="output of `llama-server --version`")
    g.add_argument(
        "--build-manifest", metavar="FILE", help="build manifest written by the llama_cpp role"
    )
    g.add_argument("--model-meta", metavar="FILE", help="`llamafleet inspect --format json` output")
    g.add_argument("--gguf", metavar="FILE", help="the GGUF model itself")
    g.add_argument("--gpu-vram", metavar="MIB", type=float, help="GPU memory in MiB")
    g.add_argument("--gpu-cc", metavar="X.Y", help="GPU compute capability, e.g. 8.9")
    g.add_argument("--cpu-cores", metavar="N", type=int, help="physical CPU cores")
    g.add_argument("--ram", metavar="MIB", type=float, help="host RAM in MiB")


def gather_facts(args: argparse.Namespace) -> Facts:
    import json

    from llamafleet.facts import Facts, FactsError, apply_manifest, load_facts_file
    from llamafleet.gguf_meta import GGUFError, load_model_meta

    facts = Facts()
    try:
        if args.facts:
            load_facts_file(args.facts, facts)
        if args.build_manifest:
            try:
                manifest = json.loads(_read(args.build_manifest))
            except json.JSONDecodeError as exc:
                raise UsageError(
                    f"{args.build_manifest}:{exc.lineno}: not JSON: {exc.msg}"
                ) from exc
            apply_manifest(facts, manifest, os.path.dirname(os.path.abspath(args.build_manifest)))
        if args.help_text:
            facts.set_help(_read(args.help_text))
        if args.version_text:
            facts.set_version(_read(args.version_text))
        if args.model_meta:
            facts.model = load_model_meta(args.model_meta)
        if args.gguf:
            facts.model = load_model_meta(args.gguf)
    except FileNotFoundError as exc:
        raise UsageError(f"{exc.filename}: no such file") from exc
    except (FactsError, GGUFError) as exc:
        raise UsageError(str(exc)) from exc
    if args.gpu_vram is not None:
        facts.gpu_vram_mib = args.gpu_vram
    if args.gpu_cc is not None:
        try:
            major, minor = (int(x) for x in args.gpu_cc.split("."))
        except ValueError as exc:
            raise UsageError(f"--gpu-cc {args.gpu_cc!r}: expected MAJOR.MINOR, e.g. 8.9") from exc
        facts.gpu_cc = f"{major}.{minor}"
    if args.cpu_cores is not None:
        facts.cpu_cores = args.cpu_cores
    if args.ram is not None:
        facts.ram_mib = args.ram
    return facts


def cmd_check(args: argparse.Namespace) -> int:
    from llamafleet.catalogue import catalogue
    from llamafleet.engine import (
        Config,
        Inputs,
        add_file,
        exit_code,
        is_related,
        load_config,
        run,
    )
    from llamafleet.output import FORMATTERS

    inputs = Inputs(referenced=referenced_policy(args))
    passed_over = 0
    size = 0
    for path in args.files:
        text = _read(path)
        size += len(text)
        if size > COLLECT_ABOVE and not gc.isenabled():
            gc.freeze()  # what is loaded so far stays: collections pass over it
            gc.enable()
        if args.skip_unrelated and not is_related(path, text):
            passed_over += 1
            continue
        add_file(inputs, path, text)
    for scope in ("user", "project", "local", "managed"):
        for path in getattr(args, f"{scope}_settings") or []:
            add_file(inputs, path, _read(path), kind="settings", scope=scope)
    if args.server_argv:
        add_file(inputs, "<argv>", " ".join(_quote(a) for a in args.server_argv), kind="argv")
    if not inputs.texts:
        if passed_over:
            print(f"nothing to check: {passed_over} file(s) passed over (--skip-unrelated)")
            return 0
        raise UsageError("nothing to check: give files, or llama-server flags after --")
    facts = gather_facts(args)
    config = Config()
    # --config, else the nearest .llamafleet.yaml/.yml up to the repository's top (config_file)
    config_path = args.config or _discover_config()
    if config_path:
        config = load_config(config_path)
    env: dict[str, str] = {}
    if args.process_env:
        env = {k: v for k, v in os.environ.items() if k.startswith(CLIENT_ENV_PREFIXES)}
    for item in args.client_env or []:
        k, eq, v = item.partition("=")
        if not eq:
            raise UsageError(f"--client-env {item!r}: expected KEY=VALUE")
        env[k] = v
    only = None
    if args.select:
        only = [s.strip().upper() for s in args.select.split(",") if s.strip()]
        bad = [i for i in only if i not in catalogue()]
        if bad:
            raise UsageError(f"--select: unknown rule id(s) {', '.join(bad)}")
    result = run(inputs, facts, config, env, only)
    text = FORMATTERS[args.format](result)
    if passed_over and args.format == "human":
        text += f"{passed_over} file(s) passed over: nothing about llama-server or Claude Code\n"
    if args.output:
        with open(args.output, "w", encoding="utf-8") as fh:
            fh.write(text)
    else:
        sys.stdout.write(text)
    fail_on = args.fail_on or config.fail_on or "error"
    return exit_code(result, fail_on)


def _discover_config() -> str | None:
    try:
        cwd = os.getcwd()
    except OSError:  # the current directory was removed: no config to find
        return None
    return find_config(cwd)


def _quote(word: str) -> str:
    if word and all(c.isalnum() or c in "-_./=:,+@%" for c in word):
        return word
    return "'" + word.replace("'", "'\\''") + "'"


def cmd_explain(args: argparse.Namespace) -> int:
    from llamafleet.catalogue import catalogue, docs_page

    rid = args.rule.upper()
    cat = catalogue()
    info = cat.get(rid) or next((r for r in cat.values() if r.name == args.rule), None)
    if info is None:
        raise UsageError(f"unknown rule {args.rule!r}; `llamafleet rules` lists them")
    page = docs_page(info.id)
    if page is None:  # pragma: no cover - the meta-test guarantees a page per rule
        page = f"# {info.id} {info.name}\n\n{info.why}\n\nFix: {info.fix}\n"
    sys.stdout.write(page if page.endswith("\n") else page + "\n")
    return 0


def cmd_rules(args: argparse.Namespace) -> int:
    import json

    from llamafleet.catalogue import catalogue

    cat = catalogue()
    if args.format == "json":
        out = [
            {
                "id": r.id,
                "name": r.name,
                "severity": r.severity,
                "scope": r.scope,
                "fix": r.fix,
                "why": r.why,
                "references": list(r.references),
            }
            for r in cat.values()
        ]
        sys.stdout.write(json.dumps(out, indent=2) + "\n")
        return 0
    for r in cat.values():
        sys.stdout.write(f"{r.id}  {r.severity:<7}  {r.scope:<6}  {r.name}\n")
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    import json

    from llamafleet.gguf_meta import GGUFError, inspect_gguf

    try:
        data = inspect_gguf(args.model)
    except GGUFError as exc:
        raise UsageError(str(exc)) from exc
    if args.format == "json":
        sys.stdout.write(json.dumps(data, indent=1, default=str) + "\n")
        return 0
    meta = data["metadata"]
    arch = meta.get("general.architecture", "?")
    total = sum(t["bytes"] for t in data["tensors"])
    sys.stdout.write(f"{args.model}\n  architecture: {arch}\n")
    for key in (
        "general.name",
        f"{arch}.context_length",
        f"{arch}.block_count",
        f"{arch}.embedding_length",
        f"{arch}.attention.head_count",
        f"{arch}.attention.head_count_kv",
        f"{arch}.expert_count",
    ):
        if key in meta:
            sys.stdout.write(f"  {key}: {meta[key]}\n")
    sys.stdout.write(f"  tensors: {len(data['tensors'])}, {total / 2**20:.2f} MiB\n")
    return 0


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command line; ``command``: the subcommand about to run (check, explain, rules or
    inspect: only its parser is built; None builds all, for ``--help``, plan and template)."""
    import argparse

    fmt = _formatter()
    p = argparse.ArgumentParser(
        formatter_class=fmt,
        prog="llamafleet",
        description="Check llama-server flags, systemd units and Claude Code settings against\n"
        "known pitfalls; plan GPU memory.",
    )
    p.add_argument("--version", action="version", version=f"llamafleet {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    # one subcommand about to run: only its parser (the others cost every run a few ms and are
    # shown only by `llamafleet --help`, which builds them all)
    if command in (None, "check"):
        c = sub.add_parser(
            "check",
            formatter_class=fmt,
            help="check files for pitfalls",
            description="Check llama-server scripts (.sh, .cmd/.bat, .ps1), systemd units, Docker\n"
            "Compose files, instance variables (YAML/JSON) and Claude Code settings or the\n"
            "environment a script exports for it. Raw llama-server flags can follow --.",
            epilog=CHECK_EPILOG,
        )
        c.add_argument("files", nargs="*", help="files to check (kind detected from name/content)")
        c.add_argument("--user-settings", action="append", metavar="FILE")
        c.add_argument("--project-settings", action="append", metavar="FILE")
        c.add_argument("--local-settings", action="append", metavar="FILE")
        c.add_argument("--managed-settings", action="append", metavar="FILE")
        c.add_argument(
            "--process-env",
            action="store_true",
            help="include this process's ANTHROPIC_*/CLAUDE_CODE_* variables (lowest "
            "precedence) in the client settings",
        )
        c.add_argument(
            "--client-env",
            action="append",
            metavar="KEY=VALUE",
            help="a client environment variable (lowest precedence)",
        )
        c.add_argument(
            "--skip-unrelated",
            action="store_true",
            help="pass over a file that names neither llama-server nor Claude Code (a shell "
            "script of something else) instead of reporting it (LF002); a file that names them "
            "and cannot be read is still reported. For hooks over every file of a kind "
            "(.pre-commit-hooks.yaml)",
        )
        add_referenced_options(c)
        _add_fact_options(c)
        c.add_argument("--format", choices=sorted(("human", "json", "sarif")), default="human")
        c.add_argument("--output", "-o", metavar="FILE", help="write the report to FILE")
        c.add_argument(
            "--fail-on",
            choices=SEVERITIES,
            help="exit 1 when a finding of this severity or worse exists (default: error)",
        )
        c.add_argument(
            "--config",
            metavar="FILE",
            help="config with skip/severity/fail_on (default: the nearest "
            f"{' or '.join(CONFIG_NAMES)} in the current directory or above it, up to the "
            "directory that holds .git)",
        )
        c.add_argument("--select", metavar="IDS", help="only these rule ids, comma-separated")
        c.set_defaults(func=cmd_check)

    if command in (None, "explain"):
        e = sub.add_parser("explain", help="print a rule's documentation", formatter_class=fmt)
        e.add_argument("rule", help="rule id (e.g. LS001) or name")
        e.set_defaults(func=cmd_explain)

    if command in (None, "rules"):
        r = sub.add_parser("rules", help="list the rules", formatter_class=fmt)
        r.add_argument("--format", choices=("human", "json"), default="human")
        r.set_defaults(func=cmd_rules)

    if command in (None, "inspect"):
        i = sub.add_parser(
            "inspect", help="print a GGUF model's metadata and tensors", formatter_class=fmt
        )
        i.add_argument("model", help="GGUF file")
        i.add_argument("--format", choices=("human", "json"), default="human")
        i.set_defaults(func=cmd_inspect)

    if command is None:
        _register_plan(sub)
        from llamafleet import template_cli

        template_cli.register(sub)
    return p


def _register_plan(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    try:
        from llamafleet import plan_cli
    except ImportError:
        return
    plan_cli.register(sub)


def main(argv: Sequence[str] | None = None) -> int:
    """Exit codes: 0 clean, 1 findings at the threshold, 2 bad usage or unreadable input,
    3 an internal error (one line on stderr naming the file)."""
    # The collector has nothing to free while a command loads its modules, tables and rules (all
    # kept until the process exits): it runs again once the inputs are large (cmd_check), and as
    # before when main() returns to a caller that had it on.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _main(argv)
    finally:
        if collecting:
            gc.enable()


#: Inputs above this many characters in all: `check` collects garbage while it reads and checks
#: them (below it, what a check leaves behind is small and the process ends).
COLLECT_ABOVE = 256 * 1024


def _main(argv: Sequence[str] | None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    server_argv: list[str] = []
    if "--" in args_list and args_list and args_list[0] == "check":
        cut = args_list.index("--")
        args_list, server_argv = args_list[:cut], args_list[cut + 1 :]
    command = next((a for a in args_list if not a.startswith("-")), None)
    parser = build_parser(command if command in ("check", "explain", "rules", "inspect") else None)
    args = parser.parse_args(args_list)
    if args.command == "check":
        args.server_argv = server_argv
    try:
        code: int = args.func(args)
        return code
    except (UsageError, InputError) as exc:
        sys.stderr.write(f"llamafleet: error: {_one_line(str(exc))}\n")
        return EXIT_USAGE
    except BrokenPipeError:
        return 0
    except InternalError as exc:
        sys.stderr.write(f"llamafleet: internal error: {_one_line(str(exc))}\n")
        return EXIT_INTERNAL
    except RecursionError as exc:
        sys.stderr.write(f"llamafleet: error: input nested too deeply: {_one_line(str(exc))}\n")
        return EXIT_USAGE
    except (MemoryError, KeyboardInterrupt):
        raise
    except Exception as exc:
        files = " ".join(getattr(args, "files", None) or []) or args.command
        sys.stderr.write(
            f"llamafleet: internal error while running {args.command} on {files}: "
            f"{type(exc).__name__}: {_one_line(str(exc))}\n"
        )
        return EXIT_INTERNAL


def _one_line(text: str) -> str:
    return " ".join(text.split())[:2000]


if __name__ == "__main__":
    raise SystemExit(main())
