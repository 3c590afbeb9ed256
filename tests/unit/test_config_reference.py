"""docs/configuration.md lists every setting, generated from the config models."""

from pathlib import Path

from tidelake.config import reference_markdown, reference_rows

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_every_setting_has_a_description() -> None:
    """A setting without a description would be a blank line in the operators' table."""
    undocumented = [path for path, _, desc in reference_rows() if not desc]
    assert [] == undocumented


def test_configuration_doc_holds_the_generated_table() -> None:
    """Regenerate with reference_markdown() when a setting changes."""
    assert reference_markdown() in DOC.read_text()
