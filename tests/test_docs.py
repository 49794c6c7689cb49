"""The documentation stays true to the code: the generated config reference and the links."""

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_the_configuration_reference_is_up_to_date():
    done = subprocess.run([sys.executable, str(REPO / "tools" / "configuration_doc.py"), "--check"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_the_configuration_reference_names_every_key():
    import dataclasses
    import typing

    from attnmt.config import Config

    text = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    for section in dataclasses.fields(Config):
        for spec in dataclasses.fields(typing.get_type_hints(Config)[section.name]):
            assert f"| `{spec.name}` |" in text, f"{section.name}.{spec.name}"


def test_every_relative_link_of_the_readme_and_docs_resolves():
    pages = [REPO / "README.md", REPO / "DEVELOPERS.md", *sorted((REPO / "docs").glob("*.md"))]
    for page in pages:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            if "://" not in target:
                assert (page.parent / target).exists(), f"{page.relative_to(REPO)} links to missing {target}"
