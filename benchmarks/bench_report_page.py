"""How heavy the leaderboard page is for a run at the paper's scale (545 models: base, 12 experts, 532 merges).

Builds the run from tiny real checkpoints with fabricated scores (tests/report_fixtures.py), then measures:
- ``wildmerge report`` end to end, first run, then reruns with the norms cached in rounds (``paired.py``: load of
  other processes, LOADED figures marked), and the page alone (``build_page``) as its share of each rerun (median
  [min, max]);
- the size of ``index.html`` and of its embedded plots;
- in headless Chromium (when installed): load time of the page against an empty page in the same browser, loaded
  alternately (the median of the per-round ratios), and the time to re-render after sorting and after filtering the
  545-row table.
Peak RSS (VmHWM) of this process is printed last.

    python benchmarks/bench_report_page.py [--rounds 5]
"""

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from paired import Call, measure, print_table

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TQDM_DISABLE", "1")

from wildmerge.resources import peak_rss_mib  # noqa: E402


def _browser(profile: Path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", f"--user-data-dir={profile}"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)


def _load_ms(driver, path: Path) -> float:
    driver.get(path.as_uri())  # returns after the load event; scripts have run
    return driver.execute_script("var t = performance.getEntriesByType('navigation')[0]; return t.loadEventEnd;")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds after the warm-up (paired.py)")
    args = ap.parse_args()
    from helpers import make_tiny_model
    from report_fixtures import big_run

    from wildmerge.analysis.report import page_tables as report_page
    from wildmerge.analysis.report.write import write_report

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        base = make_tiny_model(root / "base", "llama", seed=0)
        experts = [make_tiny_model(root / f"e{i}", base=base, seed=i + 1, noise=0.02) for i in range(3)]
        run = big_run(root, base, experts)
        page_s = []
        real_build = report_page.build_page

        def timed_build(*a, **kw):
            start = time.perf_counter()
            try:
                return real_build(*a, **kw)
            finally:
                page_s.append(time.perf_counter() - start)

        import wildmerge.analysis.report.write as report_module

        report_module.build_page = timed_build
        start = time.perf_counter()
        written = write_report(run)
        report_s = time.perf_counter() - start
        m = measure({"report rerun (norms cached)": Call(lambda: write_report(run))}, args.rounds, warmup=1)
        reruns = [r.seconds["wall"] for r in m.runs["report rerun (norms cached)"]]
        share = [p / r for p, r in zip(page_s[-len(reruns):], reruns)]  # the page inside each rerun
        print(f"models: 545; first report: {report_s:.1f} s")
        print_table(m, baseline="report rerun (norms cached)")
        print(f"page alone (build_page) inside each rerun: {statistics.median(page_s[-len(reruns):]):.2f} s, "
              f"{statistics.median(share):.3f} [{min(share):.3f}, {max(share):.3f}] of the rerun"
              + (" (LOADED)" if m.loaded(*m.runs) else ""))
        index = Path(written["index_html"])
        html = index.read_text()
        images = html.count("data:image/png;base64,")
        print(f"index.html: {index.stat().st_size / 1024:.0f} KiB with {images} embedded plots "
              f"({sum(Path(p).stat().st_size for k, p in written.items() if k.endswith('_png')) / 1024:.0f} KiB "
              f"of PNG before base64)")
        if shutil.which("chromium") and shutil.which("chromedriver"):
            empty = root / "empty.html"
            empty.write_text("<!DOCTYPE html><html><body>empty</body></html>")
            driver = _browser(root / "profile")
            try:
                _load_ms(driver, empty), _load_ms(driver, index)  # warm the browser
                pairs = [(_load_ms(driver, empty), _load_ms(driver, index)) for _ in range(args.rounds)]
                ratios = [p / max(e, 1) for e, p in pairs]
                base_ms, page_ms = (statistics.median(x) for x in zip(*pairs))
                sort_ms = driver.execute_script(
                    "var th = document.querySelectorAll('[data-table=models] th')[9]; var t = performance.now();"
                    "th.click(); return performance.now() - t;")
                filter_ms = driver.execute_script(
                    "var i = document.querySelector('[data-table=models] input.filter'); i.value = 'tsv_m';"
                    "var t = performance.now(); i.dispatchEvent(new Event('input')); return performance.now() - t;")
            finally:
                driver.quit()
            print(f"chromium load, {args.rounds} alternating rounds: page {page_ms:.0f} ms vs empty page {base_ms:.0f} ms "
                  f"(median ratio {statistics.median(ratios):.1f} [{min(ratios):.1f}, {max(ratios):.1f}]); "
                  f"sort 545 rows {sort_ms:.0f} ms; filter {filter_ms:.0f} ms")
        else:
            print("chromium not installed: browser timings skipped")
    print(f"peak RSS (VmHWM): {peak_rss_mib():.0f} MiB")


if __name__ == "__main__":
    main()
