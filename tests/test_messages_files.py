"""The message files under assistant/messages/: each one is the catalog of the
module it names, and every message in it has both languages."""
import importlib
from importlib import resources

import pytest
import yaml

FILES = sorted(p.name for p in resources.files("assistant").joinpath("messages").iterdir()
               if p.name.endswith(".yaml"))


def test_there_are_message_files():
    assert "report.yaml" in FILES and "ui.yaml" in FILES


@pytest.mark.parametrize("name", FILES)
def test_each_message_file_is_the_catalog_of_its_module(name):
    from assistant.i18n import all_messages

    module = importlib.import_module(f"assistant.{name[:-len('.yaml')]}")
    loaded = yaml.safe_load(resources.files("assistant").joinpath("messages", name).read_text(encoding="utf-8"))
    assert loaded == module.MSG
    registered = all_messages()
    for key, texts in loaded.items():
        assert set(texts) == {"en", "zh"}, key
        assert registered[key] == texts
