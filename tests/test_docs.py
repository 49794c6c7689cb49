"""The documentation stays true to the code: the generated config reference and the links."""

import os
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

    from attnmt.config import SECTIONS, Config

    text = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    for section in SECTIONS:
        for spec in dataclasses.fields(typing.get_type_hints(Config)[section]):
            assert f"| `{spec.name}` |" in text, f"{section}.{spec.name}"


def test_every_relative_link_of_the_readme_and_docs_resolves():
    pages = [REPO / "README.md", REPO / "DEVELOPERS.md", *sorted((REPO / "docs").glob("*.md"))]
    for page in pages:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            if "://" not in target:
                assert (page.parent / target).exists(), f"{page.relative_to(REPO)} links to missing {target}"


def test_the_time_budget_is_documented_as_training_keeps_it(tmp_path, monkeypatch):
    """train.max_minutes: the run stops after the update during which the budget ran out, mid-epoch."""
    from conftest import tiny_dates_config

    from attnmt.configfile import config_from_dict
    from attnmt.training import train as training
    from attnmt.training.metrics import read_metrics

    now = [0.0]
    monkeypatch.setattr("attnmt.training.train.time.monotonic", lambda: now[0])
    real_step = training.train_step

    def minute_long_step(*args, **kwargs):
        now[0] += 60.0
        return real_step(*args, **kwargs)

    monkeypatch.setattr(training, "train_step", minute_long_step)
    values = tiny_dates_config(tmp_path)
    values["train"].update(epochs=2, max_minutes=2.5)  # an epoch is 21 updates; the budget runs out in the 3rd
    training.train(config_from_dict(values), log=lambda _: None)
    assert [(r["epoch"], r["step"]) for r in read_metrics(tmp_path)] == [(1, 3)]

    row = next(line for line in (REPO / "docs" / "configuration.md").read_text(encoding="utf-8").splitlines()
               if line.startswith("| `max_minutes` |"))
    assert "stops after the update during which" in row and "mid-epoch" in row, row
    assert "does not reproduce" in row and "end of the epoch" not in row, row


def test_the_license_file_is_the_license_pyproject_names():
    # tomllib is Python 3.11+; attnmt supports 3.10.
    declared = re.search(r'^license = \{ text = "([^"]+)" \}', (REPO / "pyproject.toml").read_text(encoding="utf-8"),
                         re.MULTILINE).group(1)
    text = (REPO / "LICENSE").read_text(encoding="utf-8")
    assert declared == "MIT" and text.startswith("MIT License"), declared
    assert "Copyright (c) the attnmt authors" in text
    assert "[LICENSE](LICENSE)" in (REPO / "README.md").read_text(encoding="utf-8")


def test_the_readmes_first_command_installs_pytorchs_cpu_build_before_attnmt():
    """On Linux PyPI's torch alone is the CUDA build (over 2 GB of nvidia-* libraries): the first
    command offers PyTorch's CPU index beside it, and installs torch before attnmt."""
    first = re.findall(r"```bash\n(.*?)\n```", (REPO / "README.md").read_text(encoding="utf-8"), re.S)[0]
    torch_at = first.index("pip install torch==2.13.0 --extra-index-url https://download.pytorch.org/whl/cpu")
    assert torch_at < first.index("pip install -e .") < first.index("attnmt demo")


def test_a_script_beside_the_checkout_imports_the_package_not_the_checkouts_folder(tmp_path):
    """A script's own folder comes first on sys.path: beside a checkout named attnmt, Python found
    that folder, a namespace package, before setuptools' editable finder (which runs after Python's
    own) and `from attnmt import Translator` failed with "(unknown location)"."""
    beside = tmp_path / "code"
    (beside / "attnmt" / "docs").mkdir(parents=True)  # the checkout's folder: no __init__.py at its top
    (beside / "script.py").write_text("from attnmt import Translator\nprint(Translator.__module__)\n", encoding="utf-8")
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    done = subprocess.run([sys.executable, str(beside / "script.py")], cwd=tmp_path, env=env, capture_output=True,
                          text=True)
    assert done.returncode == 0 and done.stdout.strip() == "attnmt.translate", done.stderr
