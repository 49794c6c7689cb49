"""A screenshot of the attention explorer on a model, for the docs (needs chromium and playwright).

    python tools/explorer_screenshot.py MODEL "Ein Mann fährt Fahrrad." --out docs/explorer.png \
        [--map cross|encoder|decoder --layer N --head N|mean] [--explain-row N]

Serves MODEL with `attnmt serve` on a free port, types the sentence, picks the map, and with
--explain-row clicks that output token (from 0) to open the explain panel.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys

from playwright.sync_api import sync_playwright


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model")
    parser.add_argument("sentence")
    parser.add_argument("--out", required=True)
    parser.add_argument("--map", default=None, help="Transformer: cross, encoder or decoder")
    parser.add_argument("--layer", default=None)
    parser.add_argument("--head", default=None)
    parser.add_argument("--explain-row", type=int, default=None)
    parser.add_argument("--width", type=int, default=1000)
    args = parser.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        sys.exit("needs chromium (apt-get install chromium)")
    server = subprocess.Popen([sys.executable, "-m", "attnmt", "serve", args.model, "--port", "0"],
                              stdout=subprocess.PIPE, text=True)
    try:
        url = None
        while url is None:  # a precision note may come first
            line = server.stdout.readline()
            if not line:
                sys.exit("attnmt serve stopped before it printed its URL")
            found = re.search(r"http://127\.0\.0\.1:\d+/", line)
            url = found.group() if found else None
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": args.width, "height": 760})
            page.goto(url)
            page.wait_for_function("!document.querySelector('#model-info').textContent.startsWith('loading')")
            page.fill("#source", args.sentence)
            page.press("#source", "Enter")
            page.wait_for_function("text => document.querySelector('#output').dataset.source === text",
                                   arg=args.sentence)
            for control, value in (("#map", args.map), ("#layer", args.layer), ("#head", args.head)):
                if value is not None:
                    page.select_option(control, value)
            if args.explain_row is not None:
                page.click(f'#heatmap .tok.out[data-row="{args.explain_row}"]')
                page.wait_for_function("!document.querySelector('#explain').hidden")
            page.screenshot(path=args.out, full_page=True)
            browser.close()
        print(f"screenshot written to {args.out}")
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
