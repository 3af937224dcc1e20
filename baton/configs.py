"""Typed, frozen settings from plain mappings, with errors a person can act on.

The lowest layer of Baton's own code (only `errors` is below it), so every package reads
settings the same way: the pipeline spec's stage configs, the train settings a task reads back
from its job file (strategies.settings), and the one "did you mean" hint every unknown name gets.

A stage declares `Config`, a frozen dataclass. `build_config` checks every key and value against
the annotations before anything runs: an unknown key gets a "did you mean" hint, a wrong type
names the field and what was received. Supported annotations: str, int, float, bool, Path,
Literal[...], X | None, list[X], tuple[X, ...], dict[str, X], and nested frozen dataclasses.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from baton.errors import ConfigError


class ConfigErrors(ConfigError):
    """Every problem found in one config, so a user fixes them in one pass; `errors` lists them."""

    def __init__(self, errors: list[ConfigError]) -> None:
        self.errors = errors
        first = errors[0]
        super().__init__(first.path, str(first)[len(first.path) + 2:] if first.path else str(first))


def did_you_mean(name: str, choices: typing.Iterable[str], ignore_case: bool = False,
                 cutoff: float = 0.6) -> str:
    """A hint like " (did you mean 'epochs'?)", or "" when nothing is close (difflib's ratio
    under `cutoff`).

    `ignore_case`: compare lower-cased (Keras identifiers: `Adam` and `adam` name one
    optimizer), and name the choice as it is spelled."""
    match = closest(name, choices, ignore_case, cutoff)
    return f" (did you mean {match!r}?)" if match is not None else ""


def closest(name: str, choices: typing.Iterable[str], ignore_case: bool = False,
            cutoff: float = 0.6) -> str | None:
    """The choice closest to `name` as it is spelled, or None when none is close enough
    (difflib's ratio under `cutoff`): did_you_mean's match, for a hint worded otherwise (a
    command-line flag's `--name`)."""
    spelled = {(c.lower() if ignore_case else c): c for c in choices}
    key = name.lower() if ignore_case else name
    match = difflib.get_close_matches(key, list(spelled), n=1, cutoff=cutoff)
    return spelled[match[0]] if match else None


def build_config(cls: type, data: Mapping[str, Any] | None, path: str = "") -> Any:
    """An instance of dataclass `cls` from `data`, or ConfigError (ConfigErrors when there are
    several) naming every bad key: unknown keys, wrong types, missing required settings, and
    then the dataclass's own value checks. A `cls` whose settings changed shape has a classmethod
    `upgrade_settings(data, path)` that returns `data` in the current shape (or raises
    ConfigError naming a key that has no place in it)."""
    data = {} if data is None else data
    if not isinstance(data, Mapping):
        raise ConfigError(path, f"must be a mapping of settings. Received: {_show(data)}")
    upgrade = getattr(cls, "upgrade_settings", None)
    if upgrade is not None:  # keys of an older shape of these settings, moved where they live now
        data = upgrade(data, path)
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    errors: list[ConfigError] = []
    for key in data:
        if key not in fields:
            errors.append(ConfigError(
                _join(path, str(key)),
                f"unknown setting {str(key)!r}{did_you_mean(str(key), fields)}; "
                f"known settings: {', '.join(sorted(fields))}",
            ))
    kwargs = {}
    typed = True  # every given value has the right type: the value checks can run
    for name, field in fields.items():
        if name in data:
            try:
                kwargs[name] = _convert(hints[name], data[name], _join(path, name))
            except ConfigError as exc:
                errors.extend(getattr(exc, "errors", [exc]))
                typed = False
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            errors.append(ConfigError(_join(path, name), "required setting is missing"))
            typed = False
    if typed:
        try:
            config = cls(**kwargs)
        except ConfigError as exc:  # the dataclass's own check, naming its field: joined
            errors.extend(ConfigError(_join(path, e.path), str(e).split(": ", 1)[1])
                          if e.path else e for e in getattr(exc, "errors", [exc]))
        except (ValueError, TypeError) as exc:
            errors.append(ConfigError(path, str(exc)))
        else:
            if not errors:
                return config
    raise errors[0] if len(errors) == 1 else ConfigErrors(errors)


class SettingsData:
    """What a settings dataclass that travels in a file has: `to_dict` (JSON-able) and
    `from_dict` (read back typed and checked by `build_config`, as the spec's config is). The
    train stage's settings go into the job file this way, the federated stage's into its plan."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = config_to_dict(self)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], path: str = "settings") -> typing.Self:
        settings: typing.Self = build_config(cls, data, path)
        return settings


def config_to_dict(config: Any) -> Any:
    """A JSON-able form of a config (for lineage records and cache keys)."""
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        return {f.name: config_to_dict(getattr(config, f.name)) for f in dataclasses.fields(config)}
    if isinstance(config, Mapping):
        return {str(k): config_to_dict(v) for k, v in config.items()}
    if isinstance(config, list | tuple):
        return [config_to_dict(v) for v in config]
    if isinstance(config, Path):
        return str(config)
    return config


def _convert(tp: Any, value: Any, path: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        inside = []  # what was wrong inside a mapping given for a settings dataclass
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _convert(arg, value, path)
            except ConfigError as exc:
                errors.append(exc)
                if isinstance(arg, type) and dataclasses.is_dataclass(arg):
                    inside.append(exc)
        if len(errors) == 1 and isinstance(value, Mapping):  # `Settings | None`: say what
            raise errors[0]  # is wrong inside the mapping, not only that it is not a Settings
        if len(inside) == 1 and isinstance(value, Mapping):  # `bool | Settings`: the same
            raise inside[0]
        lists = [e for a, e in zip([a for a in args if a is not type(None)], errors, strict=True)
                 if a in (list, tuple) or typing.get_origin(a) in (list, tuple)]
        if len(lists) == 1 and isinstance(value, list | tuple):  # `int | list[Silo]`: the
            raise lists[0]  # list's own item that is wrong, not only that it is not an int
        choices = [a for a in args if a is not type(None)]
        if len(choices) == 1 and typing.get_origin(choices[0]) is typing.Literal:
            raise errors[0]  # `Literal[...] | None`: the choices and a did-you-mean
        raise ConfigError(path, f"expected {_name(tp)}. Received: {_show(value)}")
    if origin is typing.Literal:
        if isinstance(value, bool):  # YAML 1.1 reads an unquoted off/on, no/yes as a bool
            spelled = [a for a in args if isinstance(a, str) and a in _YAML_BOOLS[value]]
            if len(spelled) == 1:
                return spelled[0]
        if value in args and not isinstance(value, bool):
            return value
        hint = did_you_mean(str(value), [str(a) for a in args])
        raise ConfigError(
            path, f"must be one of {', '.join(repr(a) for a in args)}{hint}. Received: {_show(value)}"
        )
    if origin in (list, tuple) or tp in (list, tuple):
        if not isinstance(value, list | tuple):
            raise ConfigError(path, f"expected a list. Received: {_show(value)}")
        item = args[0] if args else Any
        items = [_convert(item, v, f"{path}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if (origin or tp) is tuple else items
    if origin in (dict, Mapping) or tp is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(path, f"expected a mapping. Received: {_show(value)}")
        vt = args[1] if len(args) == 2 else Any
        return {str(k): _convert(vt, v, _join(path, str(k))) for k, v in value.items()}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return build_config(tp, value, path)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(path, f"expected true or false. Received: {_show(value)}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(path, f"expected an integer. Received: {_show(value)}")
    if tp is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        raise ConfigError(path, f"expected a number. Received: {_show(value)}")
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(path, f"expected a string. Received: {_show(value)}")
    if tp is Path:
        if isinstance(value, str):
            return Path(value)
        raise ConfigError(path, f"expected a path string. Received: {_show(value)}")
    return value


# The words YAML 1.1 (PyYAML) turns into a bool; a Literal choice spelled so gets it back.
_YAML_BOOLS = {False: ("off", "no", "false"), True: ("on", "yes", "true")}


def _name(tp: Any) -> str:
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    names = [getattr(a, "__name__", str(a)) for a in args]
    return " or ".join(names) + (" or null" if len(args) < len(typing.get_args(tp)) else "")


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _show(value: Any) -> str:
    text = repr(value)
    kind = type(value).__name__
    return f"{text if len(text) < 80 else text[:77] + '...'} ({kind})"
