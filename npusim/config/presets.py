"""Presets: YAML files under ``hwconfigs/`` (hardware) and ``workloads/`` (models, scenarios).

A preset is named by its path below the preset root without the extension, for example
``memory/ddr4_3200`` for ``hwconfigs/memory/ddr4_3200.yaml``.  Every value in a preset
file carries a comment with its source (datasheet, paper section, or ``assumption: …``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml

from npusim.core.errors import ConfigError
from npusim.core.text import UNENCODABLE, join_surrogate_pairs, unencodable_path, utf16_hint

REPO_ROOT = Path(__file__).resolve().parents[2]


def _root_from_env(variable: str, default: Path, what: str) -> Path:
    value = os.environ.get(variable)
    if value is None:
        return default
    if not value or not Path(value).is_dir():  # "" would silently mean the working dir
        raise ConfigError(f"${variable}", [("", f"${variable}={value!r} is not a directory; "
                                                f"{what} are looked up there (unset it to use "
                                                f"{default})")])
    return Path(value)


def hwconfig_root() -> Path:
    """Directory holding hardware presets (``$NPUSIM_HWCONFIGS`` overrides it)."""
    return _root_from_env("NPUSIM_HWCONFIGS", REPO_ROOT / "hwconfigs", "hardware presets")


def workloads_root() -> Path:
    """Directory holding models and scenarios (``$NPUSIM_WORKLOADS`` overrides it)."""
    return _root_from_env("NPUSIM_WORKLOADS", REPO_ROOT / "workloads", "models and scenarios")


def _key_kind(key: Any) -> str:
    """``bool``, ``number`` or the type's name: keys of one kind that are equal are one
    key written twice."""
    if isinstance(key, bool):
        return "bool"
    return "number" if isinstance(key, (int, float)) else type(key).__name__


def _yaml_spelling(key: Any) -> str:
    """A key as YAML spells it (``true``, ``null``, ``1``, ``'x'``)."""
    if isinstance(key, bool) or key is None:
        return {True: "true", False: "false", None: "null"}[key]
    return repr(key)


class _UniqueKeyLoader(yaml.SafeLoader):
    """A safe loader that rejects a key given twice in one mapping (plain PyYAML keeps
    the last one, so a doubled ``sram:`` would silently drop the first value)."""

    def construct_mapping(self, node, deep=False):
        seen: dict[Any, tuple[int, Any]] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # PyYAML could not even say so
                raise yaml.constructor.ConstructorError(
                    None, None, "'<<' (a YAML 1.1 merge key) is not read: npusim reads YAML "
                    "1.2; expected plain keys (write the shared keys out; a hardware block can "
                    "keep them in a file it names with preset: FILE.yaml)", key_node.start_mark)
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:
                continue  # an unhashable key: the base class reports it
            if first is not None:
                line, earlier = first
                if _key_kind(earlier) == _key_kind(key):  # 1 and 1.0: one number twice
                    problem = f"key {_yaml_spelling(key)} appears twice in one mapping"
                else:  # 1 and true, 0 and false: equal once read, so one would be lost
                    problem = (f"keys {_yaml_spelling(earlier)} and {_yaml_spelling(key)} "
                               "are one key once read (a YAML true is 1 and false is 0) "
                               "in one mapping")
                raise yaml.constructor.ConstructorError(
                    None, None, f"{problem} (first at line {line + 1}); expected each key "
                    "once", key_node.start_mark)
            seen[key] = (key_node.start_mark.line, key)
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node):
        # Python refuses to convert integer text of more than 4300 digits (a ValueError
        # deep in PyYAML); no parameter needs more than a few dozen.
        text = str(self.construct_scalar(node)).replace("_", "")
        digits = sum(ch.isdigit() for ch in text)
        if digits > MAX_INTEGER_DIGITS:
            raise yaml.constructor.ConstructorError(
                None, None, f"an integer of {digits} digits; expected at most "
                f"{MAX_INTEGER_DIGITS}", node.start_mark)
        # YAML 1.2: a leading zero is still decimal (PyYAML's 1.1 reads 010 as octal 8);
        # octal and hexadecimal need 0o and 0x.
        sign = -1 if text[:1] == "-" else 1
        body = text[1:] if text[:1] in ("-", "+") else text
        try:
            if body[:2] in ("0o", "0x"):
                return sign * int(body[2:], 8 if body[1] == "o" else 16)
            return sign * int(body, 10)
        except ValueError:  # only with an explicit !!int tag: the resolver checked the rest
            raise yaml.constructor.ConstructorError(
                None, None, f"!!int {text!r} is not an integer; expected decimal digits, or "
                "0o / 0x followed by octal / hexadecimal digits", node.start_mark) from None


_UniqueKeyLoader.add_constructor("tag:yaml.org,2002:int", _UniqueKeyLoader.construct_yaml_int)


def _checked(construct, expected: str):
    """PyYAML's constructor ``construct`` with a located YAML error instead of the
    ValueError / KeyError it raises for an explicitly tagged value it cannot read
    (``!!float abc``, ``!!bool maybe``): the resolvers never hand it such text."""
    def constructor(loader, node):
        try:
            return construct(loader, node)
        except (ValueError, KeyError, TypeError, AttributeError):
            raise yaml.constructor.ConstructorError(
                None, None, f"{node.tag.rsplit(':', 1)[-1]} {node.value!r}: expected "
                f"{expected}", node.start_mark) from None
    return constructor


for _tag, _expected in (("float", "a number (1.5, 1e3, .inf, .nan)"),
                        ("bool", "true or false"),
                        ("timestamp", "a date or time such as 2023-11-16 18:15:46")):
    _UniqueKeyLoader.add_constructor(
        f"tag:yaml.org,2002:{_tag}",
        _checked(yaml.SafeLoader.yaml_constructors[f"tag:yaml.org,2002:{_tag}"], _expected))
# Plain scalars are typed by the YAML 1.2 core schema, as the docs and JSON users
# expect, not by PyYAML's YAML 1.1 rules, which silently change values: 010 is octal 8,
# 1:30 is base 60 (90), 0b11 is 3, and yes/no/on/off are booleans (a model named `no`
# became False).  Such text now stays a string, so a number field rejects it by name.
# Underscores between digits are still accepted (1_000_000, as in Python).  Dates are
# text too (YAML 1.2 has no timestamp type): `name: 2024-05-01` was a datetime.date that
# every text field refused ("Input should be a valid string").
_UniqueKeyLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers
            if tag not in ("tag:yaml.org,2002:bool", "tag:yaml.org,2002:int",
                           "tag:yaml.org,2002:float", "tag:yaml.org,2002:timestamp")]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_UniqueKeyLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
    list("tTfF"))
_UniqueKeyLoader.add_implicit_resolver(  # before floats: an integer matches both
    "tag:yaml.org,2002:int",
    re.compile(r"^(?:[-+]?[0-9][0-9_]*|[-+]?0o[0-7_]+|[-+]?0x[0-9a-fA-F_]+)$"),
    list("-+0123456789"))
# Floats as YAML 1.2 and JSON write them: `1e3`, `.5`, `2.` (YAML 1.1 needed a decimal
# point and a signed exponent, so `1e3` reached the schema as text).
_UniqueKeyLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^(?:[-+]?(?:\.[0-9][0-9_]*|[0-9][0-9_]*(?:\.[0-9_]*)?)(?:[eE][-+]?[0-9]+)?"
               r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"),
    list("-+0123456789."))

#: Longest integer text a config, trace or model file may hold (Python's own limit for
#: converting text to int is 4300 digits).
MAX_INTEGER_DIGITS = 1000


#: Most values a YAML document may expand to once its aliases are followed.  A scenario
#: or sweep spec holds hundreds; a "billion laughs" chain of aliases would otherwise make
#: every later walk over the tree take minutes or exhaust memory.
MAX_YAML_VALUES = 1_000_000


def parse_yaml(text: str) -> Any:
    """``yaml.safe_load`` that rejects duplicate keys, over-long integers, nesting
    deeper than Python can recurse and aliases that expand to more than
    :data:`MAX_YAML_VALUES` values (each a YAML error, not a crash or a hang)."""
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except RecursionError:
        raise yaml.constructor.ConstructorError(
            None, None, "lists or mappings nested too deeply; expected at most a few "
            "hundred levels") from None
    _check_expanded_size(data)
    # rebuilt only when some text holds surrogates (a "\ud83d\ude00" pair as JSON writes it)
    if unencodable_path(data) is None:
        return data
    try:
        return join_surrogate_pairs(data)
    except ValueError as exc:  # two keys became one
        raise yaml.constructor.ConstructorError(None, None, str(exc)) from None


def _check_expanded_size(data: Any) -> None:
    # PyYAML shares an aliased node instead of copying it, so the document loads fast;
    # count as a tree walk would (each use of an alias again) and stop at the limit.
    pending, seen = [data], 0
    while pending:
        value = pending.pop()
        seen += 1
        if seen > MAX_YAML_VALUES:
            raise yaml.constructor.ConstructorError(
                None, None, f"the document expands to more than {MAX_YAML_VALUES:,} values "
                "once its aliases (*name) are followed; expected a configuration, not an "
                "alias chain")
        if isinstance(value, dict):
            pending.extend(value.keys())
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)


def locate(path: str | Path) -> Path:
    """``path`` as given, or, when it is relative and not found from the working
    directory, the shipped file of that name in the npusim checkout (``npusim list``
    shows scenarios and sweeps by their checkout-relative paths)."""
    given = Path(path)
    if given.is_absolute() or given.exists():
        return given
    shipped = REPO_ROOT / given
    return shipped if shipped.is_file() else given


def _line_column(text: str, offset: int) -> str:
    """``line L, column C`` (from 1) of character ``offset`` of ``text``."""
    before = text[:offset]
    return f"line {before.count(chr(10)) + 1}, column {len(before.rsplit(chr(10), 1)[-1]) + 1}"


def read_yaml(path: Path) -> Any:
    """Parse a YAML file; a syntax error, a duplicate key, a file that is not UTF-8 text
    or a missing file becomes a :class:`ConfigError`."""
    try:
        raw = Path(path).read_bytes()
        text = raw.decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(str(path), [("", "file not found")]) from None
    except IsADirectoryError:
        raise ConfigError(str(path), [("", "is a directory; expected a YAML file")]) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(str(path), [("", f"not a UTF-8 text file (byte 0x{exc.object[exc.start]:02x} "
                                           f"at offset {exc.start}); expected a YAML file"
                                           f"{utf16_hint(raw)}")]) from None
    except OSError as exc:
        raise ConfigError(str(path), [("", f"cannot read file: {exc.strerror}")]) from None
    if "\0" in text:  # PyYAML's own message was two lines about "<unicode string>"
        where = _line_column(text, text.index("\0"))
        raise ConfigError(str(path), [(where, "NUL byte; expected a UTF-8 text (YAML) file"
                                              f"{utf16_hint(raw)}")])
    try:
        data = parse_yaml(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        if isinstance(exc, yaml.reader.ReaderError):  # a control character: no mark
            where = _line_column(text, exc.position)
            code = exc.character if isinstance(exc.character, int) else ord(exc.character)
            problem = f"character U+{code:04X} (a control character); expected printable text"
        kind = "YAML error" if isinstance(exc, yaml.constructor.ConstructorError) else "YAML syntax error"
        raise ConfigError(str(path), [(where, f"{kind}: {problem}")]) from None
    bad = unencodable_path(data)
    if bad is not None:  # a "\ud800" escape: refused here, not when the results are written
        raise ConfigError(str(path), [(bad, UNENCODABLE)])
    return data


def list_presets(root: Path | None = None) -> list[str]:
    """Names of every preset below ``root`` (default: the hardware preset root)."""
    root = root or hwconfig_root()
    return sorted(str(p.relative_to(root).with_suffix("")) for p in root.rglob("*.yaml"))


def is_preset_file(name: str) -> bool:
    """A preset value ending in ``.yaml``/``.yml`` names a file of the user's, not a
    shipped preset (``preset: chips/my_npu.yaml``)."""
    return name.lower().endswith((".yaml", ".yml"))


def _load_preset_file(name: str) -> dict[str, Any]:
    path = locate(name)
    if not path.is_file():
        raise ConfigError(name, [("preset", f"no file {name!r}; a preset ending in .yaml is a "
                                            "file, found next to the file that names it, then "
                                            "in the working directory; expected an existing "
                                            "YAML file or a shipped preset name (npusim "
                                            "list shows them)")])
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(str(path), [("", f"expected a mapping, got {type(data).__name__}")])
    return data


def load_preset(name: str, root: Path | None = None) -> dict[str, Any]:
    """The mapping stored in preset ``name`` (e.g. ``memory/hbm2``), or in the YAML file
    ``name`` when it ends in ``.yaml`` (relative paths: the working directory, then the
    checkout; a scenario's own relative paths are made absolute by the loader first).

    Raises :class:`ConfigError` naming the preset and the closest known names.
    """
    if is_preset_file(name):
        return _load_preset_file(name)
    root = root or hwconfig_root()
    path = root / f"{name}.yaml"
    if not path.is_file():
        known = list_presets(root)
        stem = name.rsplit("/", 1)[-1]
        close = [k for k in known if stem in k or k.rsplit("/", 1)[-1] in stem][:5]
        # the presets of the folder asked for (memory/, npu/, links/), when it has any
        folder = name.rsplit("/", 1)[0] + "/" if "/" in name else ""
        listed = [k for k in known if folder and k.startswith(folder)] or known
        hint = (f"; did you mean {', '.join(close)}?" if close else
                f"; known presets{' in ' + folder if listed is not known else ''}: "
                f"{', '.join(listed)}")
        raise ConfigError(str(path), [("preset", f"no preset named {name!r}{hint}")])
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(str(path), [("", f"expected a mapping, got {type(data).__name__}")])
    return data


def preset_kind(name: Any) -> str | None:
    """The ``kind:`` preset ``name`` resolves to, following the presets it builds on
    (``preset: memory/hbm2e`` inside a file); None if it does not load or names none."""
    seen: set[str] = set()
    while isinstance(name, str) and name.strip() and name not in seen:
        seen.add(name)
        try:
            data = load_preset(name)
        except ConfigError:
            return None
        kind = data.get("kind")
        if isinstance(kind, str):
            return kind
        name = data.get("preset")
    return None


def presets_of_kind(kind: str) -> list[str]:
    """The shipped presets whose parts are of ``kind`` (``dram``: memory/hbm2e, ...)."""
    return [name for name in list_presets() if preset_kind(name) == kind]
