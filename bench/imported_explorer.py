"""A screenshot of the attention explorer serving an imported model, opened on one sentence and one step.

    python bench/imported_explorer.py MODEL "a sentence" --out explorer.png [--step 3] [--map cross]

Starts `attnmt serve MODEL` on a free port of 127.0.0.1, opens its page in the system's headless
Chromium (Playwright drives it; nothing is downloaded), translates the sentence, clicks the output
token of --step so that the step panel shows its numbers, and saves the whole page. Prints the
translation and the source tokens the page shows (an imported Marian model's end with </s>).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("sentence")
    parser.add_argument("--out", required=True, help="the PNG to write")
    parser.add_argument("--step", type=int, default=1, help="the decoding step to open (from 1)")
    parser.add_argument("--map", default="cross", help="cross, encoder or decoder")
    args = parser.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        sys.exit("imported_explorer.py: chromium is not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    server = subprocess.Popen([sys.executable, "-m", "attnmt", "serve", args.model, "--port", "0"],
                              stdout=subprocess.PIPE, text=True)
    try:
        while (line := server.stdout.readline()) and " on http://" not in line:
            print(line, end="")
        address = re.search(r"http://\S+:\d+/", line)
        if address is None:
            sys.exit(f"imported_explorer.py: the server printed no address: {line!r}")
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.goto(address.group())
            page.fill("#source", args.sentence)
            page.press("#source", "Enter")
            page.wait_for_function("text => document.querySelector('#output').dataset.source === text",
                                   arg=args.sentence, timeout=600_000)
            if args.map != "cross":
                page.select_option("#map", args.map)
            page.click(f'#heatmap .tok.out[data-row="{args.step - 1}"]')
            page.wait_for_function(f"document.querySelector('#explain').dataset.step === '{args.step}'",
                                   timeout=600_000)
            print("translation:", page.inner_text("#translation"))
            print("source tokens:", " ".join(page.locator("#heatmap .tok.src").all_inner_texts()))
            page.screenshot(path=args.out, full_page=True)
            browser.close()
        print(f"screenshot: {args.out}")
    finally:
        server.terminate()
        server.wait(timeout=60)


if __name__ == "__main__":
    main()
