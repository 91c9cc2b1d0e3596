"""Reading a pipeline file: YAML (a key given twice refused), validation, and errors that name the key
(with the one probably meant)."""

from __future__ import annotations

import difflib
import types
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError

from prm_synth.config.base import ConfigError
from prm_synth.config.judge import JudgeConfig
from prm_synth.config.pipeline import PipelineConfig
from prm_synth.config.upgrade import upgrade


def format_validation_error(err: ValidationError, where: str) -> str:
    lines = [f"invalid pipeline config {where}:"]
    for e in err.errors():
        if not e["loc"] and e["type"] == "value_error":  # a whole-file check: its message names the key
            lines.append(f"  {(e.get('ctx') or {}).get('error', e['msg'])}")
            continue
        loc = ".".join(str(p) for p in e["loc"]) or "(top level)"
        lines.append(f"  {loc}: {_explain(e)}")
    return "\n".join(lines)


def _explain(error: Any) -> str:
    """Pydantic's message, with the typo named: a key the section does not have gets the closest one it
    does (`methd` -> `method`), and a missing discriminator names the key that was probably meant."""
    if error["type"] == "extra_forbidden":
        key = str(error["loc"][-1])
        return "unknown key" + _did_you_mean(key, _field_names(_model_at(error["loc"][:-1])))
    if error["type"] == "union_tag_not_found" and isinstance(error.get("input"), dict):
        tag = str((error.get("ctx") or {}).get("discriminator", "")).strip("'\"")
        for key in error["input"]:
            if difflib.get_close_matches(str(key), [tag], n=1, cutoff=0.6):
                return f"unknown key `{key}` (did you mean `{tag}`?), and no `{tag}` to choose the section's kind"
    return str(error["msg"])


def _did_you_mean(key: str, names: Iterable[str]) -> str:
    close = difflib.get_close_matches(key, list(names), n=1, cutoff=0.6)
    return f" (did you mean `{close[0]}`?)" if close else ""


def _field_names(model: type[BaseModel] | None) -> list[str]:
    return list(model.model_fields) if model is not None else []


def _model_at(loc: Sequence[Any]) -> type[BaseModel] | None:
    """The config model at an error location: nested sections, and discriminated unions, whose tag
    (`annotate.mc.k`: `mc`) is a part of the location."""
    model: type[BaseModel] | None = PipelineConfig
    parts = [str(p) for p in loc]
    while parts and model is not None:
        field = model.model_fields.get(parts.pop(0))
        if field is None:
            return None
        members = [m for m in _flatten(field.annotation) if isinstance(m, type) and issubclass(m, BaseModel)]
        if len(members) > 1 and parts:  # the next part is the member's tag
            tag = parts.pop(0)
            members = [m for m in members if any(tag in get_args(f.annotation) for f in m.model_fields.values())]
        model = members[0] if len(members) == 1 else None
    return model


def _flatten(annotation: Any) -> list[Any]:
    """The types an annotation allows (through Annotated, unions and Optional)."""
    args = get_args(annotation)
    if get_origin(annotation) is Annotated:
        return _flatten(args[0])
    if args and get_origin(annotation) in (Union, types.UnionType):
        return [t for a in args for t in _flatten(a)]
    return [annotation]


class _UniqueKeyLoader(yaml.SafeLoader):
    """safe_load that refuses a key given twice in one mapping (YAML would silently keep the last)."""


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
        if isinstance(key, str | int | float | bool) and key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return yaml.SafeLoader.construct_mapping(loader, node, deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def read_yaml_mapping(path: str | Path, what: str = "pipeline file") -> dict[str, Any]:
    """A YAML file's top-level mapping, or a ConfigError that names the file and the problem."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{what} not found: {path}")
    if not path.is_file():
        raise ConfigError(f"{what} {path} is a folder, not a YAML file")
    try:
        data = yaml.load(path.read_text(encoding="utf-8-sig"), Loader=_UniqueKeyLoader) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise ConfigError(f"{what} {path} is not valid YAML: {e}") from None
    except RecursionError:  # PyYAML composes nested collections recursively
        raise ConfigError(f"{what} {path} is nested too deeply to be a pipeline file") from None
    except OSError as e:
        raise ConfigError(f"{what} {path} cannot be read: {e.strerror or e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{what} {path} must hold a mapping at the top level")
    return data


def load_config(path: str | Path, overrides: dict[str, Any] | None = None) -> PipelineConfig:
    """Read and validate a YAML pipeline file; relative paths inside it resolve against its folder."""
    path = Path(path)
    data = read_yaml_mapping(path)
    src = data.get("problems")
    files = {"file": ("path",), "choice-file": ("path",), "code-file": ("path",), "solutions": ("path", "gold_answers")}
    kind = src.get("kind") if isinstance(src, dict) else None
    for key in files.get(kind, ()) if isinstance(kind, str) and isinstance(src, dict) else ():
        if isinstance(src.get(key), str):
            p = Path(src[key]).expanduser()
            if not p.is_absolute():  # like other config files: relative to the file that names it
                src[key] = str((path.parent / p).resolve())
    return validate_config(data | (overrides or {}), where=str(path))


def load_judge_config(path: str | Path) -> JudgeConfig:
    """A JudgeConfig from a pipeline YAML (its `judge` section), a YAML holding only a `judge`
    section, or a YAML that is a judge section itself."""
    data = read_yaml_mapping(path, "judge file")
    if "policy" in data or "problems" in data:
        judge = load_config(path).judge
        if judge is None:
            raise ConfigError(f"pipeline {path} has no judge section")
        return judge
    section = data.get("judge", data)
    if isinstance(section, dict) and isinstance(section.get("engine"), dict) and "demo" in section["engine"]:
        section = upgrade({"judge": section})["judge"]
    try:
        return JudgeConfig.model_validate(section)
    except ValidationError as e:
        raise ConfigError(format_validation_error(e, str(path))) from None


def validate_config(data: dict[str, Any], where: str = "", check_paths: bool = True) -> PipelineConfig:
    """A PipelineConfig from a mapping; `check_paths=False` reads a stored config whose files moved."""
    try:
        return PipelineConfig.model_validate(data, context={"check_paths": check_paths})
    except ValidationError as e:
        raise ConfigError(format_validation_error(e, where)) from None
