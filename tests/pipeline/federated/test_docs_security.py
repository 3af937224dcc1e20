"""The docs show only the secure federation: no Flower command in README.md or docs/ starts a
SuperLink or SuperNode in plaintext, a SuperLink listens beyond the loopback only with TLS and
SuperNode authentication, and a SuperNode's ClientAppIo API binds 127.0.0.1 (issue 33: the
docs told real silos to listen on 0.0.0.0 in plaintext).

A command is a fenced block's logical line (backslash continuations joined) or an inline code
span that names a launcher and passes it flags; the checks read its tokens.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SUPERLINK = ("flower-superlink", "baton.pipeline.federated.superlink")
SUPERNODE = ("flower-supernode", "baton.pipeline.federated.supernode")
LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
INLINE = re.compile(r"`([^`\n]+(?:\n[^`\n]+)*)`")


def commands(text: str) -> list[str]:
    """The launcher commands in a Markdown text: fenced lines, then inline code spans."""
    out = []
    for block in FENCE.findall(text):
        out += [line for line in block.replace("\\\n", " ").splitlines()]
    out += [" ".join(span.split()) for span in INLINE.findall(FENCE.sub("", text))]
    return [c for c in out if any(n in c for n in SUPERLINK + SUPERNODE)
            and re.search(r"(?:^|\s)--[a-z]", c)]


def _flag(tokens: list[str], name: str) -> str | None:
    for i, t in enumerate(tokens):
        if t == name and i + 1 < len(tokens):
            return tokens[i + 1].rstrip(",")
        if t.startswith(name + "="):
            return t.split("=", 1)[1]
    return None


def problems(command: str) -> list[str]:
    """What is insecure about one documented command (empty: nothing)."""
    tokens = shlex.split(command.split("#", 1)[0].replace(",", " "), posix=True)
    out = []
    if "--insecure" in tokens:
        out.append("--insecure")
    if any(n in command for n in SUPERLINK):
        host = _flag(tokens, "--host")
        missing = [f for f in ("--ssl-ca-certfile", "--ssl-certfile", "--ssl-keyfile",
                               "--enable-supernode-auth") if f not in tokens]
        if host not in LOOPBACK and missing:
            out.append(f"a SuperLink on {host or 'its default address'} without "
                       + ", ".join(missing))
    if any(n in command for n in SUPERNODE):
        host = _flag(tokens, "--host")
        if host not in LOOPBACK:
            out.append(f"a ClientAppIo API on {host or 'an unstated address'}")
        missing = [f for f in ("--root-certificates", "--auth-supernode-private-key")
                   if f not in tokens]
        if missing:
            out.append("a SuperNode without " + ", ".join(missing))
    return out


DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])


def test_the_docs_show_federation_commands():
    """The check reads something: the secure setup's commands are found where they are."""
    found = {p.name for p in DOCS for _ in commands(p.read_text())}
    assert {"federated.md", "kubernetes.md"} <= found, found


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_documented_federation_command_runs_in_plaintext_or_listens_openly(path):
    bad = {c: p for c in commands(path.read_text()) if (p := problems(c))}
    assert not bad, bad


# the setup docs/federated.md showed before issue 33 (its section 3), and variants
@pytest.mark.parametrize("text, problem", [
    ("```\nflower-superlink --insecure --host 0.0.0.0 --port 9091 --database /s/l.db \\\n"
     "    --disable-runtime-dependency-installation\n```\n", "--insecure"),
    ("```\nflower-supernode --insecure --superlink SERVER:9091 --host 127.0.0.1 --port 9094 "
     "\\\n    --isolation subprocess --node-config \"data-dir='/d' client='a'\"\n```\n",
     "--insecure"),
    ("Run `python -m baton.pipeline.federated.supernode --root-certificates ca.crt\n"
     "--auth-supernode-private-key a.key --superlink s:9091 --host 0.0.0.0 --port 9094`.",
     "a ClientAppIo API on 0.0.0.0"),
    ("```sh\npython -m baton.pipeline.federated.superlink --ssl-certfile c --ssl-keyfile k "
     "--host 0.0.0.0\n```", "a SuperLink on 0.0.0.0 without --ssl-ca-certfile, "
     "--enable-supernode-auth"),
])
def test_the_check_finds_the_old_plaintext_setup(text, problem):
    found = [p for c in commands(text) for p in problems(c)]
    assert problem in found, found
