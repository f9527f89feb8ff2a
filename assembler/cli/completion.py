"""`assemble completion bash|zsh|fish`: a shell completion script, generated from the argparse
tree itself, so a new command or option completes without anyone editing a script.

    eval "$(assemble completion bash)"         # ~/.bashrc
    eval "$(assemble completion zsh)"          # ~/.zshrc
    assemble completion fish | source          # ~/.config/fish/config.fish
"""

from __future__ import annotations

import argparse
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

SHELLS = ("bash", "zsh", "fish")
# Values the scripts ask `assemble completion --list KIND` for, as they change: the workspace's
# dependency names (the nearest deps.toml upward) and the CUDA versions on this machine.
LISTS = ("deps", "cuda")
DYNAMIC_METAVARS = {"DEP": "deps", "X.Y": "cuda"}


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "completion", help="print a shell completion script (bash, zsh, fish)",
        description='Print a completion script for SHELL on stdout: eval "$(assemble completion bash)" in ~/.bashrc, '
                    'eval "$(assemble completion zsh)" in ~/.zshrc, `assemble completion fish | source` in fish.',
    )
    parser.add_argument("shell", choices=SHELLS, metavar="SHELL", nargs="?", help="bash, zsh or fish")
    parser.add_argument("--list", choices=LISTS, help=argparse.SUPPRESS)  # what the scripts call for values that change
    parser.set_defaults(handler=run)


@dataclass
class Option:
    flags: list[str]
    help: str
    takes_value: bool
    choices: list[str]
    paths: bool  # its value is a file or directory
    dynamic: str | None = None  # a LISTS kind whose values complete it (--only DEP, --cuda X.Y)


@dataclass
class Command:
    """One parser of the tree: its options, its subcommands and whether positionals are paths."""

    name: str
    help: str
    options: list[Option] = field(default_factory=list)
    commands: dict[str, Command] = field(default_factory=dict)
    path_positionals: bool = False
    dep_positionals: bool = False  # its positionals are dependency names (DEP)


def command_tree(parser: argparse.ArgumentParser, name: str = "assemble", help_text: str = "") -> Command:
    """The commands and options of ``parser``, recursively."""
    node = Command(name, help_text)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for sub_name, sub_parser in action.choices.items():
                node.commands[sub_name] = command_tree(sub_parser, sub_name, helps.get(sub_name, ""))
        elif action.option_strings:
            if isinstance(action, argparse._HelpAction | argparse._VersionAction) and name != "assemble":
                continue
            node.options.append(Option(
                flags=list(action.option_strings), help=(action.help or "").split(";")[0].split(" (")[0][:80],
                takes_value=action.nargs != 0, choices=[str(c) for c in action.choices or ()],
                paths=action.type is Path, dynamic=DYNAMIC_METAVARS.get(str(action.metavar)),
            ))
        elif action.type is Path:
            node.path_positionals = True
        elif action.metavar == "DEP":
            node.dep_positionals = True
    return node


def run(args: argparse.Namespace) -> int:
    from assembler.cli import build_parser

    if args.list is not None:
        sys.stdout.write("".join(f"{value}\n" for value in listed(args.list, args.directory)))
        return 0
    if args.shell is None:
        from assembler.errors import InputError

        raise InputError("assemble completion: which shell?", hint="assemble completion bash|zsh|fish")
    tree = command_tree(build_parser())
    sys.stdout.write({"bash": bash, "zsh": zsh, "fish": fish}[args.shell](tree))
    return 0


def listed(kind: str, directory: Path) -> list[str]:
    """The values of ``kind`` here and now (deps: of the workspace at or above ``directory``, -C
    DIR or the cwd); nothing, never an error, outside a workspace."""
    if kind == "cuda":
        from assembler.toolchain.cuda import versions_on_machine

        return versions_on_machine()
    from assembler.errors import AssembleError
    from assembler.manifest import MANIFEST_NAME, find_workspace, load_manifest

    try:
        return list(load_manifest(find_workspace(directory) / MANIFEST_NAME).deps)
    except AssembleError:
        return []


def _words(items: list[str]) -> str:
    return " ".join(items)


def _flags(node: Command) -> list[str]:
    return [flag for option in node.options for flag in option.flags]


def _bash_command(node: Command, indent: str) -> list[str]:
    """The body for one command: value completion after an option, else its words."""
    lines = [f"{indent}case \"$prev\" in"]
    for option in node.options:
        if not option.takes_value:
            continue
        pattern = "|".join(option.flags)
        if option.choices:
            lines.append(f"{indent}  {pattern}) COMPREPLY=($(compgen -W {shlex.quote(_words(option.choices))} -- "
                         "\"$cur\")); return;;")
        elif option.dynamic:
            lines.append(f"{indent}  {pattern}) COMPREPLY=($(compgen -W \"$(assemble completion --list "
                         f"{option.dynamic} 2>/dev/null)\" -- \"$cur\")); return;;")
        elif option.paths:
            lines.append(f"{indent}  {pattern}) COMPREPLY=($(compgen -f -- \"$cur\")); return;;")
        else:
            lines.append(f"{indent}  {pattern}) return;;")
    lines.append(f"{indent}esac")
    words = _flags(node) if not node.commands else [*node.commands, *_flags(node)]
    lines.append(f"{indent}opts={shlex.quote(_words(words))}")
    if node.path_positionals:
        lines.append(f"{indent}files=1")
    if node.dep_positionals:
        lines.append(f"{indent}[[ \"$cur\" != -* ]] && opts=\"$(assemble completion --list deps 2>/dev/null)\"")
    return lines


def bash(tree: Command) -> str:
    valued = sorted({flag for node in [tree, *tree.commands.values()] for o in node.options if o.takes_value
                     for flag in o.flags})
    lines = [
        "# bash completion for assemble (generated by `assemble completion bash`)",
        "_assemble() {",
        '  local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}"',
        '  local cmd="" sub="" opts="" files=0 i w',
        "  for ((i = 1; i < COMP_CWORD; i++)); do",
        '    w="${COMP_WORDS[i]}"',
        '    case "$w" in',
        f"      {'|'.join(valued)}) ((i++));;",
        "      -*) ;;",
        '      *) if [[ -z "$cmd" ]]; then cmd="$w"; elif [[ -z "$sub" ]]; then sub="$w"; fi;;',
        "    esac",
        "  done",
        '  case "$cmd" in',
        '    "")',
        *_bash_command(tree, "      "),
        "      ;;",
    ]
    for name, node in tree.commands.items():
        lines.append(f"    {name})")
        if node.commands:
            lines.append('      case "$sub" in')
            lines.append('        "")')
            lines.extend(_bash_command(node, "          "))
            lines.append("          ;;")
            for sub_name, sub_node in node.commands.items():
                lines.append(f"        {sub_name})")
                lines.extend(_bash_command(sub_node, "          "))
                lines.append("          ;;")
            lines.append("      esac")
        else:
            lines.extend(_bash_command(node, "      "))
        lines.append("      ;;")
    lines += [
        "  esac",
        '  if [[ "$cur" == -* || $files -eq 0 ]]; then',
        '    COMPREPLY=($(compgen -W "$opts" -- "$cur"))',
        "  else",
        '    COMPREPLY=($(compgen -f -- "$cur"))',
        "  fi",
        "}",
        "complete -o default -F _assemble assemble",
        "",
    ]
    return "\n".join(lines)


def zsh(tree: Command) -> str:
    """zsh runs the bash function through bashcompinit (shipped with zsh)."""
    return "#compdef assemble\nautoload -U +X bashcompinit && bashcompinit\n" + bash(tree)


def _fish_option(option: Option, condition: str) -> str:
    parts = ["complete -c assemble", f"-n {shlex.quote(condition)}"]
    for flag in option.flags:
        parts.append(f"-l {flag[2:]}" if flag.startswith("--") else f"-s {flag[1:]}")
    if option.choices:
        parts.append(f"-xa {shlex.quote(_words(option.choices))}")
    elif option.dynamic:
        parts.append(f"-xa {shlex.quote(f'(assemble completion --list {option.dynamic} 2>/dev/null)')}")
    elif option.takes_value and not option.paths:
        parts.append("-x")
    elif option.paths:
        parts.append("-r -F")
    if option.help:
        parts.append(f"-d {shlex.quote(option.help)}")
    return " ".join(parts)


def fish(tree: Command) -> str:
    names = _words(list(tree.commands))
    lines = ["# fish completion for assemble (generated by `assemble completion fish`)", "complete -c assemble -f"]
    for option in tree.options:
        lines.append(_fish_option(option, "true"))
    for name, node in tree.commands.items():
        lines.append(f"complete -c assemble -n {shlex.quote(f'not __fish_seen_subcommand_from {names}')} -a {name} -d "
                     f"{shlex.quote(node.help[:80])}")
        inside = f"__fish_seen_subcommand_from {name}"
        for option in node.options:
            if option.flags[0] not in {o.flags[0] for o in tree.options}:
                lines.append(_fish_option(option, inside))
        if node.path_positionals:
            lines.append(f"complete -c assemble -n {shlex.quote(inside)} -F")
        if node.dep_positionals:
            lines.append(f"complete -c assemble -n {shlex.quote(inside)} -a '(assemble completion --list deps "
                         "2>/dev/null)'")
        subs = _words(list(node.commands))
        for sub_name, sub_node in node.commands.items():
            lines.append("complete -c assemble -n "
                         f"{shlex.quote(f'{inside}; and not __fish_seen_subcommand_from {subs}')} -a {sub_name} -d "
                         f"{shlex.quote(sub_node.help[:80])}")
            for option in sub_node.options:
                if option.flags[0] not in {o.flags[0] for o in tree.options}:
                    lines.append(_fish_option(option, f"{inside}; and __fish_seen_subcommand_from {sub_name}"))
    return "\n".join(lines) + "\n"
