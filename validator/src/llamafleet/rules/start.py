"""Rules on arguments llama-server never gets or refuses at start-up (LS024, LS025)."""

from __future__ import annotations

from collections.abc import Iterator

from llamafleet.argv import Refusal, ServerConfig, is_server_binary
from llamafleet.rules.base import Context, Hit, rule

#: How each kind of file continues a command on the next line.
CONTINUATION = {"cmd": "^", "powershell": "`"}
#: Who runs a cut-off option line, and what it does with it.
RUNS_IT = {
    "unit": "systemd ignores that line (\"Missing '='\")",
    "cmd": "cmd.exe then runs {option} as a command, which fails",
    "powershell": "PowerShell then runs {option} as a command, which fails",
}


def _positional(cfg: ServerConfig, r: Refusal) -> tuple[str, str]:
    arg = r.token.text
    if not arg.strip():
        return (
            "an argument that is only white space (a `\\` followed by a space or a tab)",
            "Remove the white space after the `\\` at the end of the line: `\\` must be the "
            "line's last character to continue it.",
        )
    if r.after is not None:
        spec = r.after.spec
        off = next((n for n in spec.negations if n.startswith("--")), None) if spec else None
        turn_off = f"; turn it off with {off}" if off else ""
        return (
            f"{arg!r} after {r.after.written}, which takes no value",
            f"Remove {arg!r}: {r.after.written} is on when given{turn_off}.",
        )
    if is_server_binary(arg) and cfg.source in ("compose", "docker"):
        return (
            f"{arg!r}: the image's entrypoint is llama-server already",
            f"Drop {arg!r} from the command: give only llama-server's options.",
        )
    if arg.lower().endswith(".gguf"):
        return (
            f"{arg!r} is not an option",
            f"Give the model with -m {arg} (llama-server takes no positional arguments).",
        )
    return (
        f"{arg!r} is not an option",
        f"Remove {arg!r}, or give it to the option it belongs to (llama-server takes no "
        "positional arguments).",
    )


@rule("LS024")
def argument_refused(ctx: Context) -> Iterator[Hit]:
    for cfg in ctx.all_servers:
        for r in cfg.refused:
            arg = r.token.text
            if r.kind == "positional":
                detail, hint = _positional(cfg, r)
            elif r.kind == "equals":
                name, _, value = arg.partition("=")
                detail = f"{arg!r}: llama-server has no --option=value form"
                hint = f"Write {name} {value} (two arguments)."
            else:
                name, _, value = arg.strip().partition(" ")
                detail = f"{arg!r} is one argument holding an option and its value"
                hint = (
                    f"Give {name} and {value.strip()} as two arguments (two items of the list, "
                    "or without the quotes)."
                )
            yield Hit(cfg.path, r.token.line, {"detail": detail, "arg": arg, "hint": hint})


@rule("LS025")
def detached_option_line(ctx: Context) -> Iterator[Hit]:
    for cfg in ctx.all_servers:
        for tok in cfg.detached:
            cont = CONTINUATION.get(cfg.source, "\\")
            runs = RUNS_IT.get(cfg.source, "the shell then runs {option} as a command, which fails")
            yield Hit(
                cfg.path,
                tok.line,
                {
                    "option": tok.text,
                    "line": tok.line,
                    "cont": cont,
                    "start": cfg.line,
                    "consequence": runs.format(option=tok.text),
                },
            )
