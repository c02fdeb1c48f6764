"""dftracer report in a real browser: headless Chromium (the set-up of the
Perfetto test, tests/browser_support.py) opens report.html with the network
off, and every chart the page lists is drawn, with no script error.

Skips, saying why, where there is no browser (scripts/install-browser.sh
installs one) or no plotly (the `report` extra).  The screenshot is saved
under the test artifacts directory as report.png; with
UPDATE_DOCS_IMAGES=1 it also replaces docs/images/report.png."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys

import pytest

from test_cli import ROOT, cli  # noqa: E402
from test_report import TRAIN, write  # noqa: E402
from tracefile import run_python  # noqa: E402

try:
    import browser_support
except ImportError:  # pragma: no cover - the helper comes with the Perfetto test
    browser_support = None

pytestmark = [
    # Under `make test-asan` LD_PRELOAD would carry libasan into Chromium.
    pytest.mark.no_asan,
    pytest.mark.skipif(browser_support is None, reason="tests/browser_support.py is missing"),
    pytest.mark.skipif(importlib.util.find_spec("plotly") is None,
                       reason="the report extra (plotly) is not installed"),
]

# What the page's charts must show, read from the live plotly objects.
CHARTS_JS = """
const ids = JSON.parse(document.getElementById('dftracer-report-data').textContent).charts;
return ids.map(id => {
  const el = document.getElementById(id);
  if (!el) return {id: id, found: false};
  const box = el.getBoundingClientRect();
  return {
    id: id, found: true,
    plotted: el.classList.contains('js-plotly-plot'),
    traces: (el._fullData || []).length,
    svgs: el.querySelectorAll('svg.main-svg').length,
    marks: el.querySelectorAll('.barlayer .point path, .scatterlayer .trace path.js-line, '
                               + '.heatmaplayer image').length,
    width: box.width, height: box.height,
  };
});
"""


def test_report_opens_in_chromium_with_every_chart_drawn(tmp_path):
    why = browser_support.browser_unavailable()
    if why:
        pytest.skip(why)
    d = tmp_path / "traces"
    d.mkdir()
    write(d, TRAIN, ranks=(0, 1))
    # and a program with I/O, so that the I/O chart has data too
    run_python("""
        import os
        from dftracer.python import dftracer, ai
        log = dftracer.initialize_log(%r, None, -1)
        for i in ai.dataloader.fetch.iter(range(20)):
            with open(%r, "wb") as f:
                f.write(bytes(1 << 16))
        log.finalize()
        """ % (str(d / "io"), str(d / "data.bin")),
        env={"DFTRACER_ENABLE": "1", "DFTRACER_DATA_DIR": str(d)}, cwd=str(d))
    out = tmp_path / "report.html"
    proc = cli("report", str(d), "-o", str(out), "--title",
               "dftracer report: two ranks of a train loop, and a loader reading files")
    assert proc.returncode == 0, proc.stderr
    from dftracer.tools.report import read_data

    charts = read_data(str(out))["charts"]
    assert {"chart-category", "chart-process", "chart-top-total", "chart-top-self",
            "chart-io", "chart-steps", "chart-wait", "chart-rank-steps",
            "chart-rank-breakdown"} == set(charts)

    with browser_support.chromium(width=1200, height=900) as drv:
        # no network: the page must carry everything it needs
        drv.execute_cdp_cmd("Network.enable", {})
        drv.execute_cdp_cmd("Network.emulateNetworkConditions", {
            "offline": True, "latency": 0, "downloadThroughput": 0, "uploadThroughput": 0})
        page = browser_support.open_page(out.resolve().as_uri(), settle_s=1.5, drv=drv)
        assert page.console_errors == []
        drawn = drv.execute_script(CHARTS_JS)
        assert [c["id"] for c in drawn] == charts
        for c in drawn:
            assert c["found"] and c["plotted"], c
            assert c["traces"] > 0 and c["svgs"] > 0 and c["marks"] > 0, c
            assert c["width"] > 300 and c["height"] > 200, c
        errors = drv.execute_script("return window.__dftracer_errors || []")
        assert errors == []
        height = drv.execute_script("return document.body.scrollHeight")
        drv.set_window_size(1200, min(height + 100, 8000))
        shot = browser_support.artifacts_dir() / "report.png"
        drv.save_screenshot(str(shot))
        assert browser_support.console_errors(drv) == []
    assert shot.stat().st_size > 10000
    if os.environ.get("UPDATE_DOCS_IMAGES") == "1":
        shutil.copy(shot, os.path.join(ROOT, "docs", "images", "report.png"))
