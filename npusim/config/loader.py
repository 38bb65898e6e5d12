"""Load a scenario: YAML → presets resolved → overrides applied → typed, validated config.

The steps, each failing with a :class:`~npusim.core.errors.ConfigError` that names the
file, the field path, the bad value and what was expected:

1. read the scenario YAML (``read_yaml``);
2. optionally replace ``hw`` with the contents of ``--hw FILE``;
3. resolve presets: any mapping with a ``preset: NAME`` key is replaced by the preset's
   mapping deep-merged with the remaining keys (which win), recursively;
4. apply ``--set path=value`` overrides (values parsed as YAML scalars, paths like
   ``hw.core.sram.capacity_bytes`` or ``workload.layers[0].m``);
5. validate against the schema built from the registry (unknown keys rejected).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Iterable, Mapping

# (parse_override and apply_override are part of this module's API: --set, step 4)
from npusim.config.overrides import (OVERRIDE_MARK, apply_override, describe_input,
                                     format_path, join_path, override_list, parse_override,
                                     with_override_notes)
from npusim.config.presets import (hwconfig_root, is_preset_file, load_preset, locate,
                                   preset_kind, presets_of_kind, read_yaml)
# (format_validation_error and validate are part of this module's API too: step 5)
from npusim.config.validation_errors import a_part, format_validation_error, kind_category, validate
from npusim.core.errors import ConfigError, ConfigNote

_MAX_PRESET_DEPTH = 16


def deep_merge(base: Any, override: Any) -> Any:
    """``override`` merged into a copy of ``base``: mappings merge key by key, anything
    else (scalars, lists) is replaced."""
    if isinstance(base, Mapping) and isinstance(override, Mapping):
        merged = {key: copy.deepcopy(value) for key, value in base.items()}
        for key, value in override.items():
            merged[key] = deep_merge(merged[key], value) if key in merged else copy.deepcopy(value)
        return merged
    return copy.deepcopy(override)


def _preset_identity(name: str) -> str:
    """The file a preset name stands for (resolved): a cycle however it is spelt."""
    if not isinstance(name, str):
        return repr(name)  # (reported where it is resolved)
    try:
        found = locate(name) if is_preset_file(name) else hwconfig_root() / f"{name}.yaml"
        return str(found.resolve())
    except (OSError, ConfigError):
        return name


def resolve_presets(data: Any, source: str, path: str = "", depth: int = 0,
                    chain: tuple[tuple[str, str], ...] = (), origin: str | None = None,
                    overridden: tuple[str, ...] | None = ()) -> Any:
    """Replace every ``{preset: NAME, ...}`` mapping by the preset merged with its siblings.

    ``chain`` holds the ``(identity, name)`` of the presets resolved around this mapping
    and ``origin`` the file naming the first, where presets that include each other are
    reported as the cycle they form.  ``overridden``: the paths later overrides set, which
    a :class:`KeptKeysNote` leaves out (None: no notes, for a resolution whose result
    only checks paths)."""
    origin = origin or source
    if depth > _MAX_PRESET_DEPTH:
        raise ConfigError(origin, [(path, f"presets nest more than {_MAX_PRESET_DEPTH} deep: "
                                          f"{' -> '.join(n for _, n in chain)}; expected "
                                          "fewer presets inside presets")])
    if isinstance(data, list):
        return [resolve_presets(item, source, f"{path}[{i}]", depth, chain, origin, overridden)
                for i, item in enumerate(data)]
    if not isinstance(data, Mapping):
        return data
    data = dict(data)
    if "preset" in data:
        name = data.pop("preset")
        if not isinstance(name, str) or not name.strip():  # '' matched every preset's name
            raise ConfigError(source, [(join_path(path, "preset"), (
                f"expected a preset name such as npu/large_core_64 or a YAML file, got "
                f"{name!r}"))])
        try:
            base = load_preset(name)
        except ConfigError as exc:
            # A problem inside an existing preset file (bad YAML, not a mapping) names that
            # file and the line, not only the scenario key that loaded it.
            inside = Path(exc.source).is_file()
            raise ConfigError(source, [
                (join_path(path, "preset"), f"in {exc.source}{', ' + where if where else ''}: {msg}"
                 if inside else msg) for where, msg in exc.problems]) from None
        identity = _preset_identity(name)
        # A file is shown by its resolved path, as a name is by its name: the chain
        # then spells one preset one way however each file wrote it.
        shown = identity if is_preset_file(name) else name
        for seen, earlier in chain:
            if identity == seen:
                cycle = " -> ".join([*(n for _, n in chain), shown])
                same = f" ({shown} is preset {earlier})" if shown != earlier else ""
                raise ConfigError(origin, [(join_path(path, "preset"), (
                    f"presets include each other in a cycle: {cycle}{same}; expected a "
                    "preset that does not include itself (remove one of these preset: "
                    "lines)"))])
        # A preset's own relative presets and files are next to it, a file's as a named
        # preset's (hwconfigs/x/b.yaml naming preset: a.yaml means hwconfigs/x/a.yaml).
        anchor_files(base, Path(identity).parent)  # (it loaded: identity is its file)
        data = _swap_presets(base, data, path, source, overridden)
        base = resolve_presets(base, f"preset {name}", path, depth + 1,
                               (*chain, (identity, shown)), origin, overridden)
        data = deep_merge(base, data)
    return {key: resolve_presets(value, source, join_path(path, key), depth, chain, origin,
                                 overridden)
            for key, value in data.items()}


def _swap_presets(base: dict, data: dict, path: str, source: str,
                  overridden: tuple[str, ...] | None = ()) -> dict:
    """Move each block of ``data`` (the keys beside a preset) that names a preset of its
    own into ``base``, the preset's mapping before it is resolved, and return the rest
    of ``data``.  Keys beside a preset override what the preset resolves to, so a block
    merged only afterwards would have the preset's resolved block written over its own
    preset: ``hw: {preset: npu/large_core_64, hbm: {preset: memory/lpddr5}}`` was the
    chip's HBM2E under another name.  Moved in, it swaps the preset of the chip's block:
    ``hbm: {preset: memory/hbm2e, channels: 4}`` becomes ``{preset: memory/lpddr5,
    channels: 4}`` (the chip's other choices for that block stay, with a
    :class:`ConfigNote` naming them; the block's own keys win).  A chip that builds on
    another preset passes the block on with its own keys for it (``hbm: {channels: 2}``
    over its base's 4 stays 2); a block a chip without a preset spells out whole is
    replaced whole.  Blocks nested deeper move the same way.  A block whose preset does
    not load stays where it is written, to be reported there; one of another category
    than the block it replaces (a chip's preset for its HBM) is an error here."""
    rest = dict(data)
    for key, value in data.items():
        if not isinstance(value, Mapping):
            continue
        target = base.get(key)
        if "preset" in value:
            if not _loads(value["preset"]):
                continue
            if isinstance(target, Mapping):
                _check_same_category(target, value["preset"], join_path(path, key), source)
            if isinstance(target, Mapping) and ("preset" in target or "preset" in base):
                kept = [k for k in target if k != "preset" and k not in value]
                if kept and "preset" in target and overridden is not None \
                        and _preset_identity(target["preset"]) \
                        != _preset_identity(value["preset"]):  # (a file spelt two ways)
                    _note_kept(join_path(path, key), target, value["preset"], kept, overridden)
                base[key] = deep_merge(target, value)
            else:
                base[key] = copy.deepcopy(value)
            del rest[key]
        elif isinstance(target, Mapping) or (target is None and "preset" in base):
            inner = dict(target) if isinstance(target, Mapping) else {}
            left = _swap_presets(inner, value, join_path(path, key), source, overridden)
            if left != value:  # some block moved in
                base[key] = inner
                rest[key] = left
    return rest


def _check_same_category(target: Mapping, preset: str, where: str, source: str) -> None:
    """Refuse a block's preset of another category than the part the block holds
    (``hw.hbm.preset=npu/large_core_64``): merged, it would be a memory holding a chip's
    thirty keys, and the chip's own preset inside itself a cycle."""
    held = target.get("kind")
    held = held if isinstance(held, str) else preset_kind(target.get("preset"))
    given = preset_kind(preset)
    wanted, got = kind_category(held), kind_category(given)
    if wanted is None or got is None or wanted == got:
        return  # a kind of the same category (or unknown) is validation's to judge
    shipped = [name for name in presets_of_kind(held) if name != preset]
    listing = (f": {', '.join(shipped)}" if shipped else
               " (none is shipped: set the block's fields instead)")
    # (the block by its path only in the problem's path: a --hw file's are its own)
    raise ConfigError(source, [(join_path(where, "preset"), (
        f"{preset} is {a_part(got, 'preset')} (kind: {given}), but the block holds "
        f"{a_part(wanted)} (kind: {held}); expected a preset of kind {held}{listing}"))])


class KeptKeysNote(ConfigNote):
    """A swapped block keeps the chip's other keys for it: they were chosen for the
    chip's own preset (a clock, timings) and may not suit the new one.  The note knows
    the keys it names, so that those a later override sets are left out of it
    (:meth:`without`)."""

    def __init__(self, where: str, target: Mapping, preset: str, kept: list[str]):
        self.where, self.target, self.preset, self.kept = where, target, preset, kept
        shown = ", ".join(f"{k}: {target[k]}" if not isinstance(target[k], (Mapping, list))
                          else k for k in kept)
        super().__init__(
            f"{where}: preset {preset} in place of the chip's {target['preset']} keeps the "
            f"chip's {shown} (chosen for {target['preset']}); to drop them, replace the "
            f"block whole: --set '{where}={{preset: {preset}}}'")

    def __reduce__(self):  # (pickled as built: the message alone is not its arguments)
        return KeptKeysNote, (self.where, self.target, self.preset, self.kept)

    def without(self, paths: list[str]) -> "KeptKeysNote | None":
        """This note less the keys ``paths`` (later ``--set`` overrides, a sweep point's
        values) set again; None if none is left, or the block itself is set afresh."""
        if any(self.where == path or self.where.startswith(f"{path}.") for path in paths):
            return None
        left = [key for key in self.kept if not any(
            path == join_path(self.where, key) or path.startswith(join_path(self.where, key)
                                                                  + ".") for path in paths)]
        if left == self.kept:
            return self
        return KeptKeysNote(self.where, self.target, self.preset, left) if left else None


def _note_kept(where: str, target: Mapping, preset: str, kept: list[str],
               overridden: tuple[str, ...]) -> None:
    import warnings

    note = KeptKeysNote(where, target, preset, kept).without(overridden)
    if note is not None:
        warnings.warn(note, stacklevel=2)


def _loads(name: Any) -> bool:
    """Whether ``name`` is a preset that loads (its errors are reported where written)."""
    if not isinstance(name, str) or not name.strip():
        return False
    try:
        load_preset(name)
    except ConfigError:
        return False
    return True


def load_raw(path: str | Path, overrides: Iterable[str] = (), hw_file: str | Path | None = None) -> dict:
    """The scenario as a plain mapping with presets resolved and overrides applied."""
    source = str(path)
    path = locate(path)
    data = read_yaml(path)
    if data is None:
        raise ConfigError(source, [("", "file is empty; expected a scenario mapping")])
    if not isinstance(data, dict):
        raise ConfigError(source, [("", f"expected a mapping at the top level, got {type(data).__name__}")])
    if "axes" in data and "hw" not in data and "workload" not in data:  # a sweep spec
        raise ConfigError(source, [("", "this looks like a sweep spec (it has axes:), not a "
                                        "scenario; run it with `npusim sweep`, or run its "
                                        "base: scenario with `npusim run`")])
    anchor_files(data, Path(path).resolve().parent)
    if hw_file is not None:
        # a shipped preset's name (npu/small_core_256) where no file of that name exists
        preset = (not locate(hw_file).exists() and not is_preset_file(str(hw_file))
                  and (hwconfig_root() / f"{hw_file}.yaml").is_file())
        if not preset and not locate(hw_file).exists():
            raise ConfigError(str(hw_file), [("", "file not found, nor a shipped preset of that "
                                                  "name; expected a hardware YAML file or a "
                                                  "preset name such as npu/large_core_64 "
                                                  "(npusim list shows them)")])
        hw = {"preset": str(hw_file)} if preset else read_yaml(locate(hw_file))
        if not isinstance(hw, dict):
            raise ConfigError(str(hw_file), [("", "expected a hardware mapping (kind: npu, ... "
                                                  f"or preset: NAME), got {describe_input(hw)}")])
        if "hw" in hw and {"workload", "run"} & set(hw):  # a whole scenario
            raise ConfigError(str(hw_file), [("", "this is a scenario (it has hw:, workload:), "
                                                  "not a hardware file; --hw expects what a "
                                                  "scenario's hw: holds (kind: npu, ... or "
                                                  "preset: npu/NAME)")])
        if "hw" in hw and isinstance(hw["hw"], dict) and not {"kind", "preset", "core"} & set(hw):
            raise ConfigError(str(hw_file), [("hw", "the hardware is inside an hw: key; --hw "
                                                    "expects what a scenario's hw: holds at the "
                                                    "top level (kind: npu, ... or preset: "
                                                    "npu/NAME): remove the hw: line and unindent "
                                                    "the rest")])
        _check_device_kind(hw, str(hw_file))
        anchor_files(hw, locate(hw_file).resolve().parent)
        data["hw"] = hw
    given_hw = data.get("hw")
    data = _resolve_with_overrides(data, overrides, source)  # (--set X.preset lands in data)
    if isinstance(data.get("hw"), dict):  # e.g. hw: {preset: memory/hbm2}
        preset = given_hw.get("preset") if isinstance(given_hw, dict) else None
        _check_device_kind(data["hw"], source, "hw.preset" if preset else "hw.kind", "hw",
                           f" (the kind of preset {preset})" if preset else "")
    return data


def _check_device_kind(hw: dict, source: str, path: str = "kind", where: str = "--hw",
                       origin: str = "") -> None:
    """A --hw file (or a scenario's hw: once presets are resolved) must describe a device:
    a part of another category (a DRAM, a NoC) would otherwise be reported as a device
    missing all its fields and holding thirty unknown keys."""
    from npusim.core import registry

    kind = hw.get("kind")
    devices = sorted(registry.entries("device"))
    if not isinstance(kind, str) or kind in devices:
        return
    category = kind_category(kind)
    if category is None and where != "--hw":
        return  # an unknown kind: validation says so, with the known ones
    what = a_part(category) if category else "not a registered kind"
    raise ConfigError(source, [(path, f"{kind!r}{origin} is {what}, not a device; {where} "
                                      f"expects a device (kind: {', '.join(devices)}) or "
                                      "'preset: npu/NAME'")])


def anchor_files(data: Any, base_dir: Path) -> None:
    """Make every relative ``file:`` and ``preset: FILE.yaml`` that exists next to the
    scenario file absolute.

    A scenario's data files (traces, routing traces) and hardware files are found
    relative to the scenario first, as documented; the readers then try the working
    directory and the checkout, which is all they can do once the scenario's location
    is gone.
    """
    if isinstance(data, list):
        for item in data:
            anchor_files(item, base_dir)
    elif isinstance(data, dict):
        for key, value in data.items():
            relative = (isinstance(value, str) and value and not Path(value).is_absolute()
                        and (key == "file" or key == "preset" and is_preset_file(value)))
            if relative and (base_dir / value).is_file():
                data[key] = str(base_dir / value)
            else:
                anchor_files(value, base_dir)


def _resolve_with_overrides(data: dict, overrides: Iterable[str], source: str,
                            notes: bool = True) -> dict:
    """Resolve presets and apply ``--set`` overrides.

    An override that names a preset (``hw.preset=npu/small_core_256``) replaces the preset
    *before* resolution, so its siblings are merged onto the new preset; every other
    override applies to the resolved tree, where preset-provided keys already exist.
    ``notes``: say what a swapped block keeps of the chip's (a :class:`KeptKeysNote`,
    less the keys the overrides set); off for resolutions that only check paths.
    """
    parsed = [(text, *parse_override(text)) for text in overrides]
    for text, parts, value in parsed:
        if parts and parts[-1] == "preset":
            apply_override(data, parts, value, text)
            _check_preset_not_shadowed(data, parts, value, text)
    # A note on the chip's keys a swapped block keeps leaves out what an override sets
    # afterwards (the key, or the whole block): that keeps nothing of the chip's.
    later = tuple(format_path(parts) for _, parts, _ in parsed
                  if parts and parts[-1] != "preset")
    data = resolve_presets(data, source, overridden=later if notes else None)
    for text, parts, value in parsed:
        if parts and parts[-1] == "preset":
            continue
        value = resolve_presets(value, "--set", format_path(parts),
                                overridden=() if notes else None)
        apply_override(data, parts, value, text)
    return data


def _check_preset_not_shadowed(data: dict, parts: list, name: Any, text: str) -> None:
    """Refuse ``--set PATH.preset=NAME`` when the mapping at PATH also sets every key the
    preset gives: keys beside a preset override it, so the override would change nothing
    (a full hardware description, from the scenario or ``--hw FILE``, has no preset)."""
    node: Any = data
    for part in parts[:-1]:
        node = node[part]  # apply_override has just made or checked this path
    if not isinstance(name, str):
        return  # resolve_presets reports a preset that is not a name
    try:
        preset = load_preset(name)
    except ConfigError:
        return  # resolve_presets reports an unknown preset, with suggestions
    if not isinstance(preset, dict):
        return
    keys = [key for key in preset if key != "preset"]
    if keys and all(key in node for key in keys):
        where = format_path(parts[:-1])
        raise ConfigError("--set", [(format_path(parts), (
            f"{text!r} changes nothing: {where} also sets every key that preset gives "
            f"({', '.join(map(str, keys))}), and keys beside a preset override it; expected "
            f"{where} to name its preset with few keys beside it, e.g. --set "
            f"'{where}={{preset: {name}}}' to replace it whole (without --hw), or a --hw file "
            f"holding preset: {name}"))])


def load_scenario(path: str | Path, overrides: Iterable[str] = (),
                  hw_file: str | Path | None = None):
    """Read, resolve and validate a scenario file; return a typed :class:`Scenario`.

    >>> scenario = load_scenario("workloads/scenarios/quickstart.yaml",
    ...                          ["run.mode=analytic"])  # doctest: +SKIP
    """
    from npusim.config.schema import scenario_model

    overrides = override_list(overrides)  # one text is one override, not its characters
    try:
        data = load_raw(path, overrides, hw_file)
    except ConfigError as exc:  # e.g. a preset the --hw file names that does not exist
        if exc.source != str(path):
            raise
        raise _blame_hw_file(with_override_notes(exc, overrides), hw_file) from None
    try:
        return validate(scenario_model(), data, str(path))
    except ConfigError as exc:
        raise _blame_hw_file(with_override_notes(exc, overrides), hw_file) from None


def _blame_hw_file(exc: ConfigError, hw_file: str | Path | None) -> ConfigError:
    """``exc`` with ``--hw``: when every problem is in the hardware (``hw.*``), it is that
    file's, with its own field paths (an override of one of its fields keeps its note);
    beside problems elsewhere, the file's own ones (not set by an override) are marked
    ``(in FILE)``."""
    def in_hw(path: str) -> bool:
        return path == "hw" or path.startswith("hw.")

    def from_file(path: str, message: str) -> bool:
        return in_hw(path) and OVERRIDE_MARK not in message \
            and "(overrides inside it:" not in message

    if hw_file is None or not any(in_hw(p) for p, _ in exc.problems):
        return exc
    if all(in_hw(p) for p, _ in exc.problems):
        return ConfigError(str(hw_file), [(p[3:], m) for p, m in exc.problems])
    return ConfigError(exc.source, [(p, f"{m} (in {hw_file})" if from_file(p, m) else m)
                                    for p, m in exc.problems])


def scenario_from_dict(data: Mapping[str, Any], source: str = "<dict>",
                       overrides: Iterable[str] = (), notes: bool = True):
    """Validate a scenario given as a Python mapping (presets and overrides allowed;
    ``notes``: as :func:`_resolve_with_overrides`)."""
    from npusim.config.schema import scenario_model

    resolved = _resolve_with_overrides(copy.deepcopy(dict(data)), override_list(overrides),
                                       source, notes)
    return validate(scenario_model(), resolved, source)
