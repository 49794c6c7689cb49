"""The Dockerfile and the systemd unit of docs/serving.md ("Running as a service") start a server
that `attnmt serve` accepts, and the container's health check asks a path the server answers.
(Building the image needs a docker daemon, which this project's machines lack; see serving.md.)"""

import json
import re
import shlex
from pathlib import Path

from fastapi.testclient import TestClient

from attnmt import Translator
from attnmt.cli import build_parser
from attnmt.serve import create_app

REPO = Path(__file__).resolve().parents[1]
DOCKERFILE = (REPO / "Dockerfile").read_text(encoding="utf-8")
UNIT = (REPO / "deploy" / "attnmt.service").read_text(encoding="utf-8")
FIXTURE_MODEL = REPO / "tests" / "fixtures" / "models" / "gru_bahdanau.safetensors"


def instructions(name: str) -> list[str]:
    """The arguments of each of the Dockerfile's instructions `name`, continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", DOCKERFILE)
    return [line.split(None, 1)[1] for line in joined.splitlines() if line.startswith(name + " ")]


def instruction(name: str) -> str:
    """The arguments of the Dockerfile's one instruction `name`."""
    found = instructions(name)
    assert len(found) == 1, found
    return found[0]


def test_the_images_entry_point_is_a_serve_command_attnmt_accepts():
    command = json.loads(instruction("ENTRYPOINT"))
    assert command[:2] == ["attnmt", "serve"]
    args = build_parser().parse_args(command[1:])
    assert (args.models, args.host, args.port) == (["/models/model.safetensors"], "0.0.0.0", 8000)
    assert instruction("EXPOSE") == "8000"
    assert instruction("USER") not in ("root", "0")
    # The CPU build of torch, before attnmt, so that attnmt's install never pulls a CUDA build.
    torch, attnmt = instructions("RUN")
    assert "torch==2.13.0" in torch and "download.pytorch.org/whl/cpu" in torch and "pip install --no-cache-dir ." in attnmt


def test_the_health_check_asks_a_path_the_server_answers_without_a_model_call():
    check = instruction("HEALTHCHECK")
    url = re.search(r"http://127\.0\.0\.1:8000(/\w+)", check)
    assert url, check
    with TestClient(create_app(Translator.load(FIXTURE_MODEL, device="cpu"))) as client:
        answer = client.get(url.group(1))
    assert answer.status_code == 200 and answer.json()["status"] == "ok"


def test_the_systemd_units_commands_are_serve_commands_attnmt_accepts():
    commands = [line.lstrip("#").split("=", 1)[1] for line in re.sub(r"\\\n#?\s*", " ", UNIT).splitlines()
                if line.lstrip("#").startswith("ExecStart=")]
    assert len(commands) == 2  # the one in use and the commented one for a server on a network
    for command in commands:
        words = shlex.split(command)
        assert words[0].endswith("/attnmt") and words[1] == "serve"
        build_parser().parse_args(words[1:])
