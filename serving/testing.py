"""Helpers for exercising a server: pushing versions the ways they really arrive, and
request bodies a fuzzer sends. Shared by tests/serving and bench/serving/soak.py; stdlib
only (no TensorFlow), so importing it costs nothing.

A model base path is TF Serving's layout, `<base>/<integer version>/saved_model.pb`:

    install(src, base, 5)          an atomic push (copy aside, then rename), as the pusher does
    half_copy(src, dst)            what a slow, non-atomic copy looks like midway
    finish_copy(src, dst)          ... and once it completes
    corrupt(src, base, 5)          a version whose saved_model.pb does not parse
"""

from __future__ import annotations

import json
import os
import random
import shutil
from collections.abc import Iterator


def install(src: str, base: str, version: int) -> str:
    """Copies export `src` to `<base>/<version>` atomically; returns the version dir."""
    dst = os.path.join(base, str(version))
    shutil.copytree(src, dst + ".tmp")
    os.replace(dst + ".tmp", dst)  # atomic push, as the pusher does
    return dst


def half_copy(src: str, dst: str) -> None:
    """saved_model.pb and truncated variables files: a slow copy midway."""
    os.makedirs(os.path.join(dst, "variables"))
    shutil.copy(os.path.join(src, "saved_model.pb"), dst)
    for f in os.listdir(os.path.join(src, "variables")):
        s, d = os.path.join(src, "variables", f), os.path.join(dst, "variables", f)
        with open(s, "rb") as fi, open(d, "wb") as fo:
            data = fi.read()
            fo.write(data[: len(data) // 2])


def finish_copy(src: str, dst: str) -> None:
    """Completes a copy `half_copy` started (every file of `src`, whole)."""
    for root, _, files in os.walk(src):
        for f in files:
            rel = os.path.relpath(os.path.join(root, f), src)
            os.makedirs(os.path.dirname(os.path.join(dst, rel)), exist_ok=True)
            shutil.copy(os.path.join(src, rel), os.path.join(dst, rel))


def corrupt(src: str, base: str, version: int) -> str:
    """Pushes `src` as `version`, then overwrites its saved_model.pb with garbage."""
    d = install(src, base, version)
    with open(os.path.join(d, "saved_model.pb"), "wb") as f:
        f.write(b"\x08corrupt")
    return d


def fuzz_bodies(rng: random.Random, instance: dict) -> Iterator[bytes]:
    """Malformed, hostile and randomly mutated request bodies around one valid row.

    A server must answer each with 200 (a mutation can still be valid) or a 4xx whose
    body is `{"error": "..."}`; never a 5xx, a hang or a crash.
    """
    good = {"instances": [instance]}
    yield b""
    yield b"{"
    yield b"null"
    yield b"[]"
    yield b"\xff\xfe\x00garbage"
    yield b'{"instances": "x"}'
    yield b'{"instances": []}'
    yield b'{"instances": [[1, 2], [3]]}'
    yield b'{"inputs": {"island": [[["a"]]]}}'
    yield b'{"instances": [{"bill_length_mm": "abc"}]}'
    yield b'{"instances": [1e999]}'
    yield b'{"instances": [{"island": {"b64": "!!!"}}]}'
    first_number = next((k for k, v in instance.items() if isinstance(v, float)), None)
    first_string = next((k for k, v in instance.items() if isinstance(v, str)), None)
    if first_number:
        yield json.dumps({"instances": [dict(instance, **{first_number: [1, 2]})]}).encode()
        yield json.dumps({"instances": [dict(instance, **{first_number: 2 ** 70})]}).encode()
        yield json.dumps({"instances": [dict(instance, **{first_number: True})]}).encode()
    if first_string:
        yield json.dumps({"instances": [dict(instance, **{first_string: None})]}).encode()
        yield json.dumps({"instances": [dict(instance, **{first_string: 7})]}).encode()
    yield json.dumps({"instances": [dict(instance, extra=1)]}).encode()
    yield json.dumps({"instances": [instance, dict(instance, extra=1)]}).encode()
    yield json.dumps({"examples": [{"island": [True]}]}).encode()
    yield json.dumps({"examples": [{"body_mass_g": 2 ** 70}]}).encode()
    yield json.dumps({"examples": "nope", "context": 3}).encode()
    yield json.dumps({"signature_name": 7, "instances": [1]}).encode()
    yield json.dumps(dict(good, inputs={})).encode()
    yield b"[" * 100000 + b"]" * 100000
    for _ in range(30):  # random mutations of a valid body
        raw = bytearray(json.dumps(good).encode())
        for _ in range(rng.randint(1, 4)):
            raw[rng.randrange(len(raw))] = rng.randrange(256)
        yield bytes(raw)
