"""The analysts' web page end to end: the real service under Uvicorn, Debian's Chromium.

The service runs over the demo patients table (alice holds ε = 1 on it) in a
background thread on a free loopback port; Playwright drives ``/usr/bin/chromium``
(a Playwright browser download is not used). The tests check what an analyst
sees: answers with their interval and error bar, bar charts, the budget gauge
(real runs spend, twin runs do not), the API's errors, the history, and a basic
accessibility check written here (labels, tab order, focus, contrast).

Without ``/usr/bin/chromium`` (or Playwright) the module is skipped;
``DPKIT_REQUIRE_BROWSER=1`` (``make unit``) turns that skip into a failure. With
``DPKIT_SCREENSHOTS=<dir>`` the page is saved there as ``service-mean.png`` and
``service-histogram.png`` (docs/img/).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import httpx
import pytest

CHROMIUM = Path("/usr/bin/chromium")
REQUIRE = os.environ.get("DPKIT_REQUIRE_BROWSER") == "1"
SCREENSHOTS = os.environ.get("DPKIT_SCREENSHOTS")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")


def _unavailable(reason: str) -> NoReturn:
    """Skip, or fail when ``DPKIT_REQUIRE_BROWSER=1`` (``make unit``)."""
    if REQUIRE:
        pytest.fail(f"{reason} (DPKIT_REQUIRE_BROWSER=1 requires the browser tests)", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


if not CHROMIUM.is_file():
    _unavailable(f"{CHROMIUM} is missing; `make browser` installs Debian's chromium package")
try:
    from playwright.sync_api import Browser, Page, expect, sync_playwright
except ImportError:
    _unavailable("Playwright for Python is not installed (the dev extras install it)")


# -- the service and the browser -----------------------------------------------------------


@pytest.fixture(scope="module")
def service(live_service: tuple[str, dict[str, str]]) -> tuple[str, dict[str, str]]:
    """The demo service on a free loopback port (tests/service/conftest.py): (URL, keys)."""
    return live_service


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser: Browser, service: tuple[str, dict[str, str]]) -> Iterator[Page]:
    """A fresh tab (own session storage) on the page; fails on any uncaught script error."""
    base, _ = service
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    tab = context.new_page()
    tab.set_default_timeout(15_000)
    script_errors: list[str] = []
    tab.on("pageerror", lambda err: script_errors.append(str(err)))
    tab.goto(f"{base}/")
    yield tab
    context.close()
    assert not script_errors, script_errors


# -- helpers -----------------------------------------------------------------------------------


def _use_key(page: Page, key: str) -> None:
    page.fill("#api-key", key)
    page.press("#api-key", "Enter")
    expect(page.locator("#dataset")).to_have_value("patients")
    expect(page.locator("#run-button")).to_be_enabled()


def _tab_to(page: Page, element_id: str, limit: int = 40) -> None:
    """Press Tab (only) until the element has the focus."""
    for _ in range(limit):
        if page.evaluate("document.activeElement && document.activeElement.id") == element_id:
            return
        page.keyboard.press("Tab")
    raise AssertionError(f"#{element_id} is not reachable with Tab")


def _meter(page: Page) -> float:
    return float(page.eval_on_selector("#budget-meter", "m => m.value"))


def _run(page: Page) -> None:
    with page.expect_response(re.compile(r"/api/v1/datasets/patients/query$")) as answer:
        page.click("#run-button")
    assert answer.value.ok, answer.value.text()
    expect(page.locator("#result")).not_to_have_attribute("aria-busy", "true")


def _screenshot(page: Page, name: str) -> None:
    if SCREENSHOTS:
        Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SCREENSHOTS) / name), full_page=True)


# -- tests -------------------------------------------------------------------------------------


def test_mean_with_keyboard_only(page: Page, service: tuple[str, dict[str, str]]) -> None:
    _, keys = service
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.className") == "skip-link"
    _tab_to(page, "api-key")
    page.keyboard.insert_text(keys["alice"])  # what a paste does
    page.keyboard.press("Enter")
    expect(page.locator("#dataset")).to_be_focused()
    expect(page.locator("#dataset")).to_have_value("patients")
    expect(page.locator("#schema-table")).to_contain_text("Ba Dinh")
    before = _meter(page)
    expect(page.locator("#budget-text")).to_contain_text(re.compile(r"ε \d\.\d\d of 1\.00 left"))

    _tab_to(page, "kind")
    page.keyboard.type("mean")
    _tab_to(page, "column")
    page.keyboard.type("age")
    expect(page.locator("#column")).to_have_value("age")
    expect(page.locator("#bound-lo")).to_have_value("0")  # prefilled from the public schema
    expect(page.locator("#bound-hi")).to_have_value("120")
    _tab_to(page, "epsilon")
    page.keyboard.press("Control+A")
    page.keyboard.type("0.1")
    expect(page.locator("#run-button")).to_have_text("Run — spends ε 0.10 of your budget")
    with page.expect_request(re.compile(r"/query$")) as sent:
        page.keyboard.press("Enter")  # Enter submits the form: the real run
    request = sent.value
    assert UUID.fullmatch(request.headers["idempotency-key"])
    assert request.post_data_json == {
        "query": {"kind": "mean", "column": "age", "epsilon": 0.1, "bounds": [0, 120]},
        "twin": False,
    }

    value = page.locator("#answer-value")
    expect(value).to_have_text(re.compile(r"^\d+(\.\d+)?$"))
    assert 35 < float(value.inner_text()) < 60  # the demo's ages average 48
    lo, hi = (float(x) for x in page.locator("#answer-ci").inner_text().split(" to "))
    assert lo < hi
    chart = page.locator("#result svg.error-bar")
    expect(chart).to_be_visible()
    expect(chart.locator("line.whisker")).to_have_count(3)  # the interval and its two caps
    expect(chart.locator("circle.point")).to_have_count(1)
    expect(page.locator("#result .badge-real")).to_contain_text("spent ε 0.10")
    expect(page.locator("#budget-text")).to_contain_text(f"ε {before - 0.1:.2f} of 1.00 left")
    assert _meter(page) == pytest.approx(before - 0.1)
    _screenshot(page, "service-mean.png")


def test_histogram_shows_a_bar_chart(page: Page, service: tuple[str, dict[str, str]]) -> None:
    _use_key(page, service[1]["alice"])
    page.select_option("#kind", "histogram")
    page.select_option("#column", "age")
    expect(page.locator("#bins")).to_be_visible()
    page.fill("#bins", "12")
    _run(page)
    chart = page.locator("#result svg.bar-chart")
    expect(chart).to_be_visible()
    expect(chart.locator("rect.bar")).to_have_count(12)
    expect(chart.locator("text.bar-label").first).to_have_text(re.compile(r"\d"))
    expect(chart.locator("title").first).to_have_text("histogram of age")
    # The table under the chart holds the same numbers (for screen readers and copying).
    expect(page.locator("#result details table tbody tr")).to_have_count(12)
    _screenshot(page, "service-histogram.png")


def test_group_by_mean_shows_a_bar_per_key(page: Page, service: tuple[str, dict[str, str]]) -> None:
    _use_key(page, service[1]["alice"])
    page.select_option("#kind", "mean")
    page.select_option("#column", "weight")
    page.select_option("#group-by", "district")
    with page.expect_request(re.compile(r"/query$")) as sent:
        _run(page)
    assert sent.value.post_data_json["query"]["group_by"] == ["district"]
    assert "keys" not in sent.value.post_data_json["query"]  # the schema's domain
    chart = page.locator("#result svg.bar-chart")
    expect(chart.locator("rect.bar")).to_have_count(5)
    labels = chart.locator("text.bar-label").all_text_contents()
    assert labels == ["Ba Dinh", "Hoan Kiem", "Dong Da", "Cau Giay", "Tay Ho"]
    expect(chart.locator("g.bar-group line.whisker")).to_have_count(5 * 3)


def test_twin_is_marked_synthetic_and_free(page: Page, service: tuple[str, dict[str, str]]) -> None:
    _use_key(page, service[1]["alice"])
    before = page.locator("#budget-text").inner_text()
    page.click("#cost-button")
    expect(page.locator("#cost-result")).to_contain_text("This query costs ε 0.10")
    page.check("#twin")
    expect(page.locator("#run-button")).to_have_text("Run on the synthetic twin (free)")
    with page.expect_request(re.compile(r"/query$")) as sent:
        _run(page)
    assert sent.value.post_data_json["twin"] is True
    expect(page.locator("#result .badge-synthetic")).to_contain_text("Synthetic twin")
    expect(page.locator("#result .badge-real")).to_have_count(0)
    expect(page.locator("#answer-value")).not_to_be_empty()
    assert page.locator("#budget-text").inner_text() == before


def test_gauge_shows_the_accountant_and_the_answers_left(
    page: Page, service: tuple[str, dict[str, str]]
) -> None:
    """The grant's composition rule, and how many more of the query being written it pays for."""
    _use_key(page, service[1]["alice"])
    expect(page.locator("#budget-text")).to_contain_text("basic accounting")
    shown = re.compile(r"^This query: (\d+) more answers? at this budget\.$")
    expect(page.locator("#answers-left")).to_have_text(shown)
    at_a_tenth = int(shown.match(page.locator("#answers-left").inner_text()).group(1))  # type: ignore[union-attr]
    left = float(re.search(r"ε ([0-9.]+) of", page.locator("#budget-text").inner_text()).group(1))  # type: ignore[union-attr]
    assert at_a_tenth == int(left / 0.1 + 1e-9)  # basic composition: what is left over ε
    page.fill("#epsilon", "0.25")
    quarter = f"This query: {int(left / 0.25 + 1e-9)} more answer"
    expect(page.locator("#answers-left")).to_contain_text(quarter)
    page.click("#cost-button")
    expect(page.locator("#cost-result")).to_contain_text(f"your budget can pay it ({quarter[12:]}")


def test_bad_key_shows_the_api_error(page: Page, service: tuple[str, dict[str, str]]) -> None:
    base, _ = service
    expected = httpx.get(
        f"{base}/api/v1/datasets", headers={"Authorization": "Bearer dpk_not_a_key"}
    ).json()["error"]
    page.fill("#api-key", "dpk_not_a_key")
    page.press("#api-key", "Enter")
    alert = page.get_by_role("alert")
    expect(alert).to_contain_text(expected["message"])
    expect(alert).to_contain_text(expected["code"])
    expect(page.locator("#run-button")).to_be_disabled()
    assert page.evaluate("sessionStorage.length") == 0


def test_key_stays_in_session_storage_until_forgotten(
    page: Page, service: tuple[str, dict[str, str]]
) -> None:
    key = service[1]["alice"]
    _use_key(page, key)
    assert page.evaluate("Object.values(sessionStorage)") == [key]
    assert page.evaluate("localStorage.length") == 0
    page.reload()  # the same tab keeps the key
    expect(page.locator("#key-status")).to_contain_text("Key accepted")
    page.click("#forget-key")  # even while the page is still loading the dataset
    assert page.evaluate("sessionStorage.length") == 0
    expect(page.locator("#api-key")).to_have_value("")
    expect(page.locator("#run-button")).to_be_disabled()


def test_history_lists_the_queries(page: Page, service: tuple[str, dict[str, str]]) -> None:
    _use_key(page, service[1]["alice"])
    page.select_option("#kind", "count")
    page.select_option("#column", "")  # all rows
    page.select_option("#filter-column", "district")
    page.select_option("#filter-op", "==")
    page.fill("#filter-value", "Tay Ho")
    page.fill("#epsilon", "0.05")
    with page.expect_request(re.compile(r"/query$")) as sent:
        _run(page)
    assert sent.value.post_data_json["query"]["where"] == [["district", "==", "Tay Ho"]]
    page.select_option("#kind", "median")
    page.select_option("#filter-column", "")
    _run(page)
    rows = page.locator("#history-table tbody tr")
    expect(rows.first).to_contain_text("median of age")
    expect(rows.nth(1)).to_contain_text("count, where district == Tay Ho")
    expect(rows.nth(1)).to_contain_text("0.05")


def test_basic_accessibility(page: Page, service: tuple[str, dict[str, str]]) -> None:
    _use_key(page, service[1]["alice"])
    page.select_option("#kind", "histogram")
    page.select_option("#group-by", "district")  # several charts, tables, badges
    _run(page)
    expect(page.locator("#result svg.bar-chart")).to_have_count(5)
    assert page.evaluate("document.documentElement.lang") == "en"
    assert page.title()

    problems: list[Any] = page.evaluate(
        """() => {
      const out = [];
      for (const c of document.querySelectorAll("input, select, textarea")) {
        if (c.type === "hidden") continue;
        const named = [...c.labels].some(l => l.textContent.trim())
          || (c.getAttribute("aria-label") || "").trim();
        if (!named) out.push("no label: #" + c.id);
      }
      for (const e of document.querySelectorAll("[tabindex]")) {
        if (e.tabIndex > 0) out.push("tabindex > 0: " + e.outerHTML.slice(0, 60));
      }
      for (const b of document.querySelectorAll("button, a[href]")) {
        if (!b.textContent.trim()) out.push("no name: " + b.outerHTML.slice(0, 60));
      }
      for (const s of document.querySelectorAll("svg")) {
        if (s.getAttribute("role") !== "img" || !s.querySelector("title")) out.push("svg without title");
      }
      const ids = [...document.querySelectorAll("[id]")].map(e => e.id);
      if (new Set(ids).size !== ids.length) out.push("duplicate ids");
      for (const e of document.querySelectorAll("[aria-labelledby], [aria-describedby]")) {
        for (const attr of ["aria-labelledby", "aria-describedby"]) {
          for (const id of (e.getAttribute(attr) || "").split(/\\s+/).filter(Boolean)) {
            if (!document.getElementById(id)) out.push(attr + " to a missing #" + id);
          }
        }
      }
      return out;
    }"""
    )
    assert problems == []
    # Two alert regions: the page's (key, dataset) and the query form's, beside Run.
    alerts = page.locator("[role=alert]")
    assert [alerts.nth(i).get_attribute("id") for i in range(alerts.count())] == [
        "alert",
        "run-alert",
    ]
    assert page.get_attribute("#result", "aria-live") == "polite"
    assert page.get_attribute("#budget-meter", "max") is not None
    skip_target = page.get_attribute(".skip-link", "href")
    assert skip_target and page.locator(skip_target).count() == 1

    # Text contrast (WCAG AA: 4.5:1, 3:1 for large text) against the first opaque background.
    low_contrast: list[Any] = page.evaluate(
        """() => {
      const rgb = s => (s.match(/[\\d.]+/g) || []).map(Number);
      const lum = ([r, g, b]) => {
        const f = v => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
        return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
      };
      const background = e => {
        for (; e; e = e.parentElement) {
          const c = rgb(getComputedStyle(e).backgroundColor);
          if (c.length === 3 || c[3] > 0.99) return c.slice(0, 3);
        }
        return [255, 255, 255];
      };
      const out = [];
      const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
      for (let t = walker.nextNode(); t; t = walker.nextNode()) {
        const e = t.parentElement;
        if (!t.textContent.trim() || !e.getClientRects().length) continue;
        if (e.closest("svg, option, .skip-link")) continue;
        const style = getComputedStyle(e);
        const fg = rgb(style.color);
        const [a, b] = [lum(fg), lum(background(e))].sort((x, y) => y - x);
        const ratio = (a + 0.05) / (b + 0.05);
        const large = parseFloat(style.fontSize) >= 24
          || (parseFloat(style.fontSize) >= 18.66 && Number(style.fontWeight) >= 700);
        if (ratio < (large ? 3 : 4.5)) out.push([t.textContent.trim().slice(0, 40), ratio]);
      }
      return out;
    }"""
    )
    assert low_contrast == []

    # Keyboard: the skip link comes first and works; every stop shows a focus ring.
    page.evaluate("window.scrollTo(0, 0)")
    page.mouse.click(4, 4)  # on the page's margin: Tab starts from the top again
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.className") == "skip-link"
    page.keyboard.press("Enter")
    expect(page.locator("#query-heading")).to_be_focused()
    seen = set()
    for _ in range(60):
        page.keyboard.press("Tab")
        focused = page.evaluate(
            """() => {
          const e = document.activeElement, s = getComputedStyle(e);
          window.visited = window.visited || new WeakSet();
          const again = e === document.body || window.visited.has(e);
          window.visited.add(e);
          return [e.id || e.tagName, again, s.outlineStyle, parseFloat(s.outlineWidth)];
        }"""
        )
        if focused[1]:
            break
        seen.add(focused[0])
        assert focused[2] != "none" and focused[3] >= 2, focused
    assert {"kind", "column", "epsilon", "twin", "cost-button", "run-button"} <= seen


def test_the_api_reference_renders_offline_under_the_csp(
    browser: Browser, service: tuple[str, dict[str, str]]
) -> None:
    """/docs: Swagger UI from the service's own files, under ``script-src 'self'``: it
    renders every route, loads nothing from another origin and trips no CSP violation."""
    base, _ = service
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    tab = context.new_page()
    requested: list[str] = []
    problems: list[str] = []
    tab.on("request", lambda r: requested.append(r.url))
    tab.on("pageerror", lambda err: problems.append(str(err)))
    tab.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    tab.goto(f"{base}/docs")
    expect(tab.locator(".opblock").first).to_be_visible()
    expect(
        tab.locator(".opblock-summary-path", has_text="/api/v1/datasets/{name}/query")
    ).to_have_count(1)
    context.close()
    assert problems == []
    assert [u for u in requested if not u.startswith((base, "data:"))] == []


# -- issue 28: a refused query, the budget, a median's error, what ε means ---------------------


def test_refused_query_alert_is_next_to_run_focused_and_announced(
    page: Page, service: tuple[str, dict[str, str]]
) -> None:
    """Keyboard only: a run the service refuses (bob's budget was spent elsewhere since the
    page loaded) shows its alert beside Run, takes the focus, and is an alert in the
    accessibility tree; then Run is off, with the reason beside it."""
    base, keys = service
    _tab_to(page, "api-key")
    page.keyboard.insert_text(keys["bob"])
    page.keyboard.press("Enter")
    expect(page.locator("#dataset")).to_have_value("patients")
    expect(page.locator("#run-button")).to_be_enabled()
    # Another tab spends ε 0.3 of bob's 0.5: this page still shows ε 0.50 left.
    spent = httpx.post(
        f"{base}/api/v1/datasets/patients/query",
        headers={"Authorization": f"Bearer {keys['bob']}"},
        json={"query": {"kind": "count", "epsilon": 0.3}},
    )
    assert spent.status_code == 200, spent.text
    _tab_to(page, "epsilon")
    page.keyboard.press("Control+A")
    page.keyboard.type("0.4")
    expect(page.locator("#run-button")).to_be_enabled()
    with page.expect_response(re.compile(r"/query$")) as answer:
        page.keyboard.press("Enter")
    assert answer.value.status >= 400
    code = answer.value.json()["error"]["code"]

    alert = page.locator("#run-alert")
    expect(alert).to_be_focused()
    expect(alert).to_contain_text(code)
    expect(page.locator("#alert")).to_be_empty()  # not at the top of the page
    expect(alert).to_match_aria_snapshot(f"- alert:\n  - strong: Error ({code})")
    expect(page.get_by_role("alert").filter(has_text=code)).to_have_attribute("id", "run-alert")
    run_box = page.locator("#run-button").bounding_box()
    alert_box = alert.bounding_box()
    assert run_box and alert_box
    assert 0 <= alert_box["y"] - (run_box["y"] + run_box["height"]) < 120  # right under Run

    # The budget was read again: 0.2 left cannot pay 0.4, so Run is off and says why.
    expect(page.locator("#budget-text")).to_contain_text("ε 0.20 of 0.50 left")
    expect(page.locator("#run-button")).to_be_disabled()
    expect(page.locator("#run-reason")).to_have_text(
        "Run is off: ε 0.40 is more than the ε 0.20 your budget has left. "
        "Lower ε to at most 0.20, or try the synthetic twin (free)."
    )
    page.keyboard.press("Shift+Tab")  # back from the alert, keyboard only
    _tab_to(page, "epsilon")
    page.keyboard.press("Control+A")
    page.keyboard.type("0.2")
    expect(page.locator("#run-button")).to_be_enabled()
    expect(page.locator("#run-reason")).to_be_empty()
    page.check("#twin")  # the twin is free: it always runs
    page.fill("#epsilon", "0.4")
    expect(page.locator("#run-button")).to_be_enabled()


def test_cost_line_goes_when_it_is_out_of_date(
    page: Page, service: tuple[str, dict[str, str]]
) -> None:
    """The dry run's line (cost and budget left) is cleared by a run and by a changed query;
    the ε field says what ε means for one person."""
    _use_key(page, service[1]["alice"])
    hint = page.locator("#epsilon-hint")
    expect(hint).to_contain_text("any one person")
    expect(hint).to_contain_text("With ε 0.10: at most 1.105 times as likely.")
    page.fill("#epsilon", "0.05")
    expect(hint).to_contain_text("With ε 0.05: at most 1.051 times as likely.")
    page.click("#cost-button")
    expect(page.locator("#cost-result")).to_contain_text("This query costs ε 0.05")
    _run(page)
    expect(page.locator("#cost-result")).to_be_empty()
    page.click("#cost-button")
    expect(page.locator("#cost-result")).to_contain_text("This query costs ε 0.05")
    page.fill("#epsilon", "0.02")
    expect(page.locator("#cost-result")).to_be_empty()
    page.fill("#epsilon", "50")
    expect(page.locator("#run-button")).to_be_disabled()
    expect(page.locator("#run-reason")).to_contain_text("Run is off: ε 50.00 is more than")


def test_median_shows_its_rank_error(page: Page, service: tuple[str, dict[str, str]]) -> None:
    """A median has no interval: the page states its rank error (as the CLI does), not
    "none" beside a promise of 95% coverage."""
    _use_key(page, service[1]["alice"])
    page.select_option("#kind", "median")
    page.fill("#epsilon", "0.05")
    with page.expect_response(re.compile(r"/api/v1/datasets/patients/query$")) as answer:
        page.click("#run-button")
    details = answer.value.json()["release"]["details"]
    rows = round(details["rank_error"])
    result = page.locator("#result")
    expect(page.locator("#answer-rank-error")).to_contain_text(f"at most {rows:,} rows (grid step")
    expect(result).to_contain_text("Rank error (95%)")
    expect(result).not_to_contain_text("none for this statistic")
    expect(result).not_to_contain_text("interval covers")
    expect(result.locator(".hint")).to_contain_text(f"the rank error is at most {rows:,} rows")


def _dry_run(base: str, key: str, query: dict[str, Any]) -> dict[str, Any]:
    answer = httpx.post(
        f"{base}/api/v1/datasets/patients/dry-run",
        headers={"Authorization": f"Bearer {key}"},
        json={"query": query},
    )
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def test_the_epsilon_field_states_the_error_bar_before_spending(
    page: Page, service: tuple[str, dict[str, str]]
) -> None:
    """Beside ε, the answer's error bar from the dry run (public parameters only), updated as
    the query changes; under the cost line too; nothing is spent to see it."""
    base, keys = service
    _use_key(page, keys["alice"])
    before = _meter(page)
    bar = page.locator("#expected-error")
    page.fill("#bound-lo", "0")
    page.fill("#bound-hi", "120")
    mean = {"kind": "mean", "column": "age", "epsilon": 0.1, "bounds": [0, 120]}
    said = _dry_run(base, keys["alice"], mean)["expected_error"]
    assert "/n for n rows (95%)" in said["text"]
    expect(bar).to_have_text(f"Expected error at this ε, before spending: {said['text']}.")
    page.select_option("#kind", "count")
    count = _dry_run(base, keys["alice"], {"kind": "count", "epsilon": 0.1})["expected_error"]
    expect(bar).to_have_text(f"Expected error at this ε, before spending: {count['text']}.")
    page.fill("#epsilon", "1")  # ten times the ε: a tenth of the noise
    tighter = _dry_run(base, keys["alice"], {"kind": "count", "epsilon": 1.0})["expected_error"]
    assert tighter["half_width"] < count["half_width"] / 5
    expect(bar).to_have_text(f"Expected error at this ε, before spending: {tighter['text']}.")
    expect(page.locator("#epsilon")).to_have_attribute(
        "aria-describedby", "epsilon-hint expected-error"
    )
    page.click("#cost-button")
    expect(page.locator("#cost-result")).to_contain_text(f"Expected error: {tighter['text']}")
    page.fill("#epsilon", "")  # incomplete: no bar, and no alert while typing
    expect(bar).to_be_empty()
    expect(page.locator("#run-alert")).to_be_empty()
    expect(page.locator("#epsilon")).not_to_have_attribute("aria-invalid", "true")
    _screenshot(page, "service-expected-error.png")
    assert _meter(page) == before  # seeing the bar spent nothing


def test_a_later_run_clears_the_alert_beside_run(
    page: Page, service: tuple[str, dict[str, str]]
) -> None:
    """Keyboard only: a query the page refuses (bounds the wrong way round) alerts beside Run
    and marks the field; once fixed, a run (on the free twin) clears the alert."""
    _use_key(page, service[1]["alice"])
    page.fill("#bound-lo", "50")
    page.fill("#bound-hi", "10")
    _tab_to(page, "run-button")
    page.keyboard.press("Enter")
    alert = page.locator("#run-alert")
    expect(alert).to_contain_text("The lower bound must be below the upper bound.")
    expect(page.locator("#bound-lo")).to_be_focused()
    expect(page.locator("#bound-lo")).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#alert")).to_be_empty()
    page.keyboard.press("Control+A")
    page.keyboard.type("0")
    page.check("#twin")
    with page.expect_response(re.compile(r"/query$")) as answer:
        page.click("#run-button")
    assert answer.value.ok
    expect(alert).to_be_empty()
    expect(page.locator("#result")).to_contain_text("Synthetic twin")
