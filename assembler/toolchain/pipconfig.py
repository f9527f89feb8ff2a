"""The user's pip configuration, read the way pip reads it, so that uv (which ignores it) is given
the same indexes, find-links folders and constraints, and picks the same builds as pip would.

pip's order, later wins: the global files (``$XDG_CONFIG_DIRS/pip/pip.conf``, ``/etc/pip.conf``),
the user files (``~/.pip/pip.conf``, ``~/.config/pip/pip.conf``; skipped when ``PIP_CONFIG_FILE``
names an existing file), the site file (``sys.prefix/pip.conf``), ``$PIP_CONFIG_FILE``, then the
``PIP_*`` environment variables. In each file ``[install]`` overrides ``[global]``.
``PIP_CONFIG_FILE=/dev/null`` turns every file off, as in pip.
"""

from __future__ import annotations

import configparser
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

# pip option -> whether it takes several whitespace-separated values
_KEYS = {
    "index-url": False, "extra-index-url": True, "find-links": True, "constraint": True,
    "no-index": False, "cert": False, "timeout": False, "default-timeout": False, "retries": False,
    "trusted-host": True,
}
_SECTIONS = ("global", "install")


@dataclass(frozen=True)
class PipSettings:
    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    constraints: tuple[str, ...] = ()
    no_index: bool = False
    cert: str | None = None
    timeout: str | None = None
    retries: str | None = None
    trusted_hosts: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()  # the files and variables these came from, for messages


def config_files(environ: Mapping[str, str]) -> list[Path]:
    """pip's configuration files, lowest priority first."""
    env_file = environ.get("PIP_CONFIG_FILE")
    if env_file == os.devnull:
        return []
    xdg_dirs = environ.get("XDG_CONFIG_DIRS") or "/etc/xdg"
    files = [Path(d) / "pip" / "pip.conf" for d in xdg_dirs.split(os.pathsep) if d]
    files.append(Path("/etc/pip.conf"))
    if not (env_file and Path(env_file).exists()):
        home = Path(environ.get("HOME") or Path.home())
        files.append(home / ".pip" / "pip.conf")
        config_home = environ.get("XDG_CONFIG_HOME") or str(home / ".config")
        files.append(Path(config_home) / "pip" / "pip.conf")
    files.append(Path(sys.prefix) / "pip.conf")
    if env_file:
        files.append(Path(env_file))
    return files


def _truthy(value: str) -> bool:
    return value.strip().lower() in {"1", "true", "yes", "on"}


def pip_settings(environ: Mapping[str, str] | None = None) -> PipSettings:
    """What ``pip install`` would use for indexes, links and constraints on this machine."""
    environ = os.environ if environ is None else environ
    values: dict[str, str] = {}
    sources: list[str] = []
    for path in config_files(environ):
        parser = configparser.RawConfigParser()
        try:
            if not parser.read(path):
                continue
        except (configparser.Error, UnicodeDecodeError, OSError):
            continue  # pip stops on a broken file; uv never read it: the user sees pip's own error
        found = False
        for section in _SECTIONS:
            if not parser.has_section(section):
                continue
            for key, value in parser.items(section):
                name = key.lower().replace("_", "-")
                if name in _KEYS:
                    values[name] = value
                    found = True
        if found:
            sources.append(str(path))
    for name in _KEYS:
        variable = "PIP_" + name.upper().replace("-", "_")
        if variable in environ:
            values[name] = environ[variable]
            sources.append(f"${variable}")

    def many(name: str) -> tuple[str, ...]:
        return tuple(dict.fromkeys(values.get(name, "").split()))

    return PipSettings(
        index_url=values.get("index-url") or None,
        extra_index_urls=many("extra-index-url"),
        find_links=many("find-links"),
        constraints=many("constraint"),
        no_index=_truthy(values.get("no-index", "")),
        cert=values.get("cert") or None,
        timeout=values.get("timeout") or values.get("default-timeout") or None,
        retries=values.get("retries") or None,
        trusted_hosts=many("trusted-host"),
        sources=tuple(sources),
    )


def uv_flags(settings: PipSettings, environ: Mapping[str, str] | None = None) -> list[str]:
    """``uv pip install`` flags that make uv choose what pip would. uv's own settings
    (``UV_INDEX_URL``, ``UV_DEFAULT_INDEX``, ``UV_FIND_LINKS``, ...) stay in charge where set."""
    environ = os.environ if environ is None else environ
    flags: list[str] = []
    if settings.no_index:
        flags.append("--no-index")
    if settings.index_url and not (environ.get("UV_INDEX_URL") or environ.get("UV_DEFAULT_INDEX")):
        flags += ["--index-url", settings.index_url]
    for url in settings.extra_index_urls:
        flags += ["--extra-index-url", url]
    for link in settings.find_links:
        flags += ["--find-links", link]
    for constraint in settings.constraints:
        flags += ["--constraint", constraint]
    for host in settings.trusted_hosts:
        flags += ["--allow-insecure-host", host]
    # pip merges every index and takes the best match; uv's default stops at the first index
    # that has the package, which can pick another build of torch than pip does.
    if "UV_INDEX_STRATEGY" not in environ:
        flags += ["--index-strategy", "unsafe-best-match"]
    return flags


def uv_environment(settings: PipSettings, base: Mapping[str, str]) -> dict[str, str]:
    """``base`` plus uv's names for pip's certificate bundle, timeout and retries."""
    env = dict(base)
    if settings.cert and "SSL_CERT_FILE" not in env:
        env["SSL_CERT_FILE"] = settings.cert
    if settings.timeout and "UV_HTTP_TIMEOUT" not in env:
        env["UV_HTTP_TIMEOUT"] = settings.timeout.split(".")[0]
    if settings.retries and "UV_HTTP_RETRIES" not in env:
        env["UV_HTTP_RETRIES"] = settings.retries
    return env
