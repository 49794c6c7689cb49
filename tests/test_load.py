"""bench/load.py, briefly: mixed and faulty traffic against a real server, then its stop with requests in flight."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import relabelled

REPO = Path(__file__).resolve().parents[1]
FAULTS = ["disconnect_after_request", "disconnect_mid_body", "slow_body", "stalled_body", "oversized_body"]


@pytest.mark.slow  # a real server under load for 3 s (4 s: a stalled body's 408), then stopped
def test_the_load_check_passes_with_every_fault_sent_and_a_clean_stop(dates_model):
    # Each fault is sent at least once, whatever the machine's speed: a stalled body waits for its 408
    # (the body timeout of 4 s), a slow one is sent over half of it and must be answered 200.
    run = subprocess.run([sys.executable, str(REPO / "bench" / "load.py"), "--model", str(dates_model),
                          "--clients", "10", "--seconds", "3", "--", "--body-timeout-s", "4"],
                         cwd=REPO, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert run.stdout.splitlines()[-1] == "load check passed"
    metrics = {name: float(value) for name, value in re.findall(r"^metric=(\S+) value=(\S+)$", run.stdout, re.M)}
    assert metrics["errors"] == 0 and metrics["server_log_errors"] == 0
    assert metrics["requests_valid_json"] > 0 and metrics["requests_valid_libretranslate_form"] > 0
    valid = metrics["requests_valid_json"] + metrics["requests_valid_libretranslate_form"]
    assert metrics["valid_requests_answered"] == valid
    assert all(metrics[f"requests_fault_{fault}"] >= 1 for fault in FAULTS), metrics
    assert metrics["stop_requests_in_flight"] == metrics["stop_requests_answered"] == 10 - len(FAULTS)
    assert metrics["server_exit_code"] == 0  # how fast it stopped is the load check's to say


@pytest.mark.slow  # a server of three models, then each alone and all three side by side, 3 s of load each
def test_the_load_check_of_several_models_reaches_every_pair(dates_model, transformer_dates_model, tmp_path):
    pytest.importorskip("ctranslate2", reason="the ctranslate2 package (the test extra) is not installed")
    from attnmt.formats.ctranslate2 import export_ctranslate2

    en_de = relabelled(transformer_dates_model, tmp_path / "source", "en", "de")
    models = [f"de_en={relabelled(dates_model, tmp_path / 'de_en', 'de', 'en')}",
              f"en_fr={relabelled(transformer_dates_model, tmp_path / 'en_fr', 'en', 'fr')}",
              f"en_de={export_ctranslate2(en_de, tmp_path / 'en_de')}"]
    run = subprocess.run([sys.executable, str(REPO / "bench" / "load.py"), "--models", *models, "--clients", "9",
                          "--seconds", "3", "--", "--body-timeout-s", "2"],
                         cwd=REPO, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert run.stdout.splitlines()[-1] == "load check passed"
    metrics = {name: float(value) for name, value in re.findall(r"^metric=(\S+) value=(\S+)$", run.stdout, re.M)}
    assert metrics["errors_all"] == 0
    for pair in ("de_en", "en_fr", "en_de"):              # every pair answered, in every run
        for run_kind in ("", "single_", "side_by_side_"):
            assert metrics[f"pair_{pair}_{run_kind}valid_answered"] > 0, (pair, run_kind)
    # One server holds the three models in less memory than three servers do.
    assert metrics["rss_mib_multi"] < metrics["rss_mib_sum_side_by_side"]
