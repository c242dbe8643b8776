"""The generated reference pages (docs/configuration.md, docs/scenarios.md) are what the code
declares today, cover every key and every fault action, and the README links them."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkasim.cli import reference
from kafkasim.client.consumer_config import CONSUMER_CONFIG
from kafkasim.client.producer_config import PRODUCER_CONFIG
from kafkasim.common.config import ConfigKey, ConfigType
from kafkasim.faults.actions import ACTIONS
from kafkasim.faults.reading import catalog, parse
from kafkasim.node.config import BROKER_CONFIG_DEF
from kafkasim.storage.config import LOG_CONFIG_DEF

ROOT = Path(__file__).resolve().parents[3]
DOCS = ROOT / "docs"


@pytest.mark.parametrize("name", sorted(reference.PAGES))
def test_committed_page_is_what_the_code_generates(name: str) -> None:
    committed = (DOCS / name).read_text(encoding="utf-8")
    assert committed == reference.PAGES[name](), (
        f"docs/{name} is out of date: run `{reference.REGENERATE}`"
    )


def test_every_key_of_every_config_is_documented_with_its_default() -> None:
    page = reference.configuration_page()
    for definition in (BROKER_CONFIG_DEF, LOG_CONFIG_DEF, PRODUCER_CONFIG, CONSUMER_CONFIG):
        for key in definition.keys.values():
            assert f"| `{key.name}` | {key.type.value} |" in page, key.name
    assert "| `min.insync.replicas` | int | `1` | [1,...] |" in page
    assert "| `cleanup.policy` | list | `delete` | delete, compact |" in page


def test_valid_values_read_as_kafkas_column() -> None:
    def key(**kw: object) -> ConfigKey:
        return ConfigKey("k", ConfigType.INT, 1, "doc", **kw)  # type: ignore[arg-type]

    assert reference.valid_values(key(low=0)) == "[0,...]"
    assert reference.valid_values(key(low=1, high=5)) == "[1,...,5]"
    assert reference.valid_values(key(high=0.5)) == "[...,0.5]"
    assert reference.valid_values(key()) == ""
    assert reference.valid_values(key(choices=("a", "b"))) == "a, b"


def test_scenario_page_has_every_action_target_and_catalog_entry() -> None:
    page = reference.scenarios_page()
    for name, action in ACTIONS.items():
        assert f"### `{name}`" in page
        for spec in action.params:
            assert f"`{spec.name}`" in page
    for name in catalog():
        assert f"| `{name}` |" in page
    for target in ("broker:N", "leader:TOPIC-P", "follower:TOPIC-P", "controller", "random"):
        assert f"`{target}`" in page


def test_the_documented_scenario_file_is_a_valid_scenario() -> None:
    page = reference.scenarios_page()
    toml = page.split("```toml\n", 1)[1].split("```", 1)[0]
    scenario = parse(toml, source="docs/scenarios.md")
    assert scenario.name == "leader-crash"
    assert scenario.faults and scenario.faults[0].action == "crash"


def test_write_and_main_write_both_pages(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert reference.main([str(tmp_path / "out")]) == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(reference.PAGES)
    assert "wrote" in capsys.readouterr().out
    assert reference.main([]) == 2


def test_readme_links_every_reference_page() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for name in (*reference.PAGES, "record-formats.md"):
        assert f"(docs/{name})" in readme, name
