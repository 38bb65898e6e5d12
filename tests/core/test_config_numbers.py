"""Every configuration model rejects a boolean given for a number field.

pydantic's lax mode reads ``true`` as 1, so ``pd.tp: true`` (a typo for a number) would
run as TP 1.  The check lives in one mixin; these tests walk every model that inherits it,
so a new config class or field is covered without touching this file, and fail if a
user-facing config class forgets the mixin.
"""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ValidationError

from npusim.core import registry
from npusim.core.registry import NumbersNotBooleans

pytestmark = pytest.mark.unit


def _subclasses(cls: type) -> list[type]:
    found: list[type] = []
    for sub in cls.__subclasses__():
        found.append(sub)
        found.extend(_subclasses(sub))
    return found


def _number_fields(model: type[BaseModel]) -> list[str]:
    from typing import get_args

    names = []
    for name, field in model.model_fields.items():
        allowed = {field.annotation, *get_args(field.annotation)}
        if bool not in allowed and allowed & {int, float}:
            names.append(name)
    return names


def _models() -> list[type[BaseModel]]:
    import importlib

    # modules whose config models the part registry does not import
    for module in ("npusim.config.schema", "npusim.validation.cases",
                   "npusim.workload.trace_generators"):
        importlib.import_module(module)
    registry.discover()
    return sorted({m for m in _subclasses(NumbersNotBooleans) if _number_fields(m)},
                  key=lambda m: f"{m.__module__}.{m.__qualname__}")


def test_the_walk_covers_the_user_facing_config_blocks():
    names = {m.__name__ for m in _models()}
    for expected in ("PdConfig", "CoreVariant", "SloConfig", "RunConfig",
                     "DmaConfig", "AreaConfig", "EnergyConfig", "ModelConfig", "Case"):
        assert expected in names


@pytest.mark.parametrize("model", _models(), ids=lambda m: f"{m.__module__}.{m.__qualname__}")
def test_a_boolean_for_a_number_field_names_the_field(model):
    for name in _number_fields(model):
        with pytest.raises(ValidationError, match=f"{name}: expected a number, got the boolean"):
            model.model_validate({name: True})


def test_every_npusim_config_model_uses_the_mixin():
    # Any pydantic model defined in npusim that has number fields must inherit the check
    # (the generated Scenario root and internal mixins without number fields are exempt).
    _models()
    missing = [f"{m.__module__}.{m.__qualname__}" for m in _subclasses(BaseModel)
               if m.__module__.startswith("npusim.") and _number_fields(m)
               and not issubclass(m, NumbersNotBooleans)]
    assert missing == []


def _bool_fields(model: type[BaseModel]) -> list[str]:
    from typing import get_args

    return [name for name, field in model.model_fields.items()
            if {field.annotation, *get_args(field.annotation)} - {type(None)} == {bool}]


def test_only_true_and_false_are_booleans():
    # pydantic's lax mode reads "yes", "on", "y" and 1 as true; the docs promise YAML 1.2,
    # where they are text and a number.
    _models()
    models = [m for m in _subclasses(NumbersNotBooleans) if _bool_fields(m)]
    assert {"RunConfig", "ChunkedPrefillConfig"} <= {m.__name__ for m in models}
    for model in models:
        for name in _bool_fields(model):
            for value in ("yes", "on", 1):
                with pytest.raises(ValidationError, match=f"{name}: expected true or false, "
                                                          f"got {value!r}"):
                    model.model_validate({name: value})
