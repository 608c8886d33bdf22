"""Build configs and precision specs read from dicts/JSON refuse unknown fields and non-object
JSON, naming the field and listing the known ones (workbench.core.records)."""
import pytest

from workbench.engines.spec import BuildConfig
from workbench.core.errors import WorkbenchError
from workbench.precision.spec import PrecisionSpec


def test_unknown_fields_are_named_first_alphabetically_with_known_ones_listed():
    with pytest.raises(WorkbenchError, match="unknown build config fields 'a_field', 'zz'") as e:
        BuildConfig.from_dict({"precision": "fp16", "zz": 1, "a_field": 2})
    assert e.value.field == "a_field" and "precision" in e.value.hint
    with pytest.raises(WorkbenchError, match="unknown precision spec field 'to'") as e:
        PrecisionSpec.from_dict({"target": "fp16", "to": "fp16"})
    assert e.value.field == "to" and "exclude_ops" in e.value.hint


@pytest.mark.parametrize("text, message", [
    ("{not json", "precision spec is not valid JSON"),
    ("[1, 2]", "precision spec JSON must be an object, not list"),
])
def test_json_that_is_not_an_object_is_refused(text, message):
    with pytest.raises(WorkbenchError, match=message):
        PrecisionSpec.from_json(text)
    with pytest.raises(WorkbenchError, match=message.replace("precision spec", "build config")):
        BuildConfig.from_json(text)


def test_round_trip_through_json():
    spec = PrecisionSpec("fp16", exclude_ops=["Softmax"])
    assert PrecisionSpec.from_json(spec.to_json()) == spec
    cfg = BuildConfig.from_dict({"precision": "fp16"})
    assert BuildConfig.from_json(cfg.to_json()).config_hash == cfg.config_hash
