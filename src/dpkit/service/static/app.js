// The analysts' page of the dpkit query service: plain ES module, no dependencies.
// It talks only to /api/v1 (docs/service.md). The key lives in sessionStorage (this tab)
// and every string from the service is written with textContent, never as HTML.

const API = "api/v1";
const KEY_STORAGE = "dpkit.apiKey";
const SVG_NS = "http://www.w3.org/2000/svg";

// Display names; a kind not listed here shows under its own name.
const KIND_NAMES = {
  count: "count", sum: "sum", mean: "mean", variance: "variance", std: "standard deviation",
  quantile: "quantile", median: "median", min: "minimum", max: "maximum",
  mode: "most frequent value", histogram: "histogram",
};

// The query kinds the form offers come from GET /api/v1/query-kinds (dpkit's registry of
// kinds): which parameters each takes decides which columns fit and which fields show. When
// that request fails, this fallback (the kinds of this page's first version) is used.
const FALLBACK_KINDS = [
  { name: "count", column: { required: false }, parameters: [] },
  ...["sum", "mean", "variance", "std"].map((name) => ({ name, parameters: [{ name: "bounds" }] })),
  { name: "quantile", parameters: [{ name: "bounds" }, { name: "q", required: true }] },
  ...["median", "min", "max"].map((name) => ({ name, parameters: [{ name: "bounds" }] })),
  { name: "mode", parameters: [{ name: "domain" }] },
  { name: "histogram", parameters: [{ name: "bounds" }, { name: "bins" }, { name: "domain" }] },
];
// Required parameters (besides epsilon) the form has a field for.
const FORM_FILLS = new Set(["q"]);

function readKind(k) {
  const parameters = Array.isArray(k.parameters) ? k.parameters : [];
  return {
    name: String(k.name),
    summary: typeof k.summary === "string" ? k.summary : "",
    columnRequired: k.column?.required !== false,
    params: new Set(parameters.map((p) => p.name)),
    required: new Set(parameters.filter((p) => p.required && p.name !== "epsilon").map((p) => p.name)),
  };
}

// The kinds this form can build a query for: its required parameters have fields, and it
// reads a numeric column (bounds), a column's categories (domain), or rows (count).
function formCanBuild(k) {
  const reads = k.params.has("bounds") || k.params.has("domain") || !k.columnRequired;
  return reads && [...k.required].every((name) => FORM_FILLS.has(name));
}

const state = {
  kinds: new Map(FALLBACK_KINDS.map((k) => [k.name, readKind(k)])),
  key: null,
  dataset: null, // the dataset as GET /api/v1/datasets/{name} returns it
  lastRun: null, // {text, idempotencyKey} of a run the network lost: a retry reuses its key
  epoch: 0, // bumped when the key or the dataset changes: older answers are dropped
  running: false, // a run is under way: Run is off until it answers
  quiet: false, // building a query for the error-bar preview: checks fail silently
  previewTimer: null, // the pending error-bar preview (after a pause in typing)
  previewSeq: 0, // the latest preview asked: older answers are dropped
  answersLeft: null, // the last dry run's answers_left for the query being composed
};

const $ = (id) => document.getElementById(id);

// -- the API -------------------------------------------------------------------------

class ApiError extends Error {
  constructor(code, message, status, retryAfter = null) {
    super(message);
    this.code = code;
    this.status = status;
    this.retryAfter = retryAfter;
  }
}

// An answer that arrived after the key or the dataset changed: nobody waits for it any more.
class Stale extends Error {}

async function api(path, { method = "GET", body, idempotencyKey } = {}) {
  const epoch = state.epoch;
  const headers = { Accept: "application/json" };
  if (state.key) headers.Authorization = `Bearer ${state.key}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (idempotencyKey) headers["Idempotency-Key"] = idempotencyKey;
  let response;
  try {
    response = await fetch(`${API}${path}`, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: "no-store",
      credentials: "omit",
    });
  } catch {
    throw new ApiError("network", "The service did not answer; check the connection and try again.", 0);
  }
  let data = null;
  try {
    data = await response.json();
  } catch {
    data = null;
  }
  if (epoch !== state.epoch) throw new Stale();
  if (!response.ok) {
    const error = data && typeof data === "object" ? data.error : null;
    throw new ApiError(
      error?.code ?? `http_${response.status}`,
      error?.message ?? `The service answered with status ${response.status}.`,
      response.status,
      response.headers.get("Retry-After"),
    );
  }
  return data;
}

function newIdempotencyKey() {
  if (typeof crypto.randomUUID === "function") return crypto.randomUUID();
  // crypto.randomUUID needs a secure context; getRandomValues does not.
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const h = [...b].map((x) => x.toString(16).padStart(2, "0")).join("");
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

// -- messages ------------------------------------------------------------------------

// An error of the query form (a refused query, a bad field) shows next to Run, where the
// analyst is; `focus` moves the focus onto it (a screen reader reads it: role="alert").
function showError(err, { nearRun = false, focus = false } = {}) {
  if (err instanceof Stale) return;
  const box = $(nearRun ? "run-alert" : "alert");
  clearError();
  const title = el("strong", {}, err instanceof ApiError ? `Error (${err.code})` : "Error");
  const text = el("span", { class: "alert-message" }, ` ${err.message}`);
  box.append(title, text);
  if (err instanceof ApiError && err.retryAfter) {
    box.append(el("span", {}, ` Try again in ${err.retryAfter} s.`));
  }
  if (!(err instanceof ApiError)) console.error(err);
  if (focus) box.focus();
}

function clearError() {
  $("alert").replaceChildren();
  $("run-alert").replaceChildren();
}

function fail(message, field) {
  if (state.quiet) return null; // a preview while the analyst types: no alert, no focus move
  if (field) {
    field.setAttribute("aria-invalid", "true");
    field.focus();
  }
  showError(new ApiError("invalid_input", message, 0), { nearRun: Boolean(field?.closest("#query-form")) });
  return null;
}

// -- small DOM and number helpers ----------------------------------------------------

function el(tag, attrs = {}, text = null) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== null) node.textContent = text;
  return node;
}

function svg(tag, attrs = {}, text = null) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (text !== null) node.textContent = text;
  return node;
}

function option(value, label, selected = false) {
  const o = el("option", { value }, label);
  o.selected = selected;
  return o;
}

// The service tags what JSON cannot hold: {"$float": "inf"}, {"$date": "..."}.
function untag(v) {
  if (v && typeof v === "object" && !Array.isArray(v)) {
    if ("$float" in v) return Number(v.$float === "inf" ? Infinity : v.$float === "-inf" ? -Infinity : NaN);
    if ("$date" in v) return v.$date;
    if ("$datetime" in v) return v.$datetime;
  }
  return v;
}

function fmt(v) {
  v = untag(v);
  if (v === null || v === undefined) return "—";
  if (Array.isArray(v)) return v.map(fmt).join(" / ");
  if (typeof v === "boolean") return v ? "true" : "false";
  if (typeof v !== "number") return String(v);
  if (!Number.isFinite(v)) return v > 0 ? "∞" : v < 0 ? "−∞" : "NaN";
  if (Number.isInteger(v)) return v.toLocaleString("en");
  const a = Math.abs(v);
  if (a >= 1000) return v.toLocaleString("en", { maximumFractionDigits: 1 });
  if (a >= 0.01) return v.toLocaleString("en", { maximumFractionDigits: 3 });
  return String(Number(v.toPrecision(3))); // 1e-6, not 0.00000100
}

function fmtEpsilon(v) {
  v = Number(untag(v));
  if (!Number.isFinite(v)) return String(v);
  if (v === 0 || Math.abs(v) >= 0.01) return v.toFixed(2);
  return v.toPrecision(2);
}

function fmtLevel(level) {
  return `${Math.round(Number(level ?? 0.95) * 1000) / 10}%`;
}

// -- columns -------------------------------------------------------------------------

function columnKind(info) {
  const t = String(info.type || "").toUpperCase();
  if (t.includes("BOOL")) return "boolean";
  if (/INT|DOUBLE|FLOAT|DECIMAL|REAL|NUMERIC|LONG|SHORT|BYTE/.test(t)) return "numeric";
  if (/DATE|TIME/.test(t)) return "temporal";
  return "text";
}

function columns() {
  return Object.entries(state.dataset?.columns ?? {}).map(([name, info]) => ({
    name,
    info,
    kind: columnKind(info),
    hasDomain: Array.isArray(info.domain) && info.domain.length > 0,
  }));
}

function column(name) {
  return columns().find((c) => c.name === name) ?? null;
}

// The columns a statistic can read: numbers (it takes bounds), categories (a domain), or
// either (a histogram); a kind whose column is optional (count) reads any.
function fits(kind, c) {
  const k = state.kinds.get(kind);
  if (!k) return false;
  if (!k.columnRequired) return true;
  const bounded = k.params.has("bounds");
  const categorical = k.params.has("domain");
  if (bounded && !categorical) return c.kind === "numeric" || c.kind === "boolean";
  if (categorical && !bounded) return c.hasDomain;
  if (bounded && categorical) return c.hasDomain || c.kind === "numeric";
  return false;
}

// A numeric histogram takes bounds and bins; over a domain it takes neither.
function usesBounds(kind, c) {
  const k = state.kinds.get(kind);
  if (!c || !k?.params.has("bounds")) return false;
  return !(k.params.has("domain") && c.hasDomain);
}

function columnRequired(kind) {
  return state.kinds.get(kind)?.columnRequired !== false;
}

// Fill the statistic list from the service's registry of kinds (keeps the static list if the
// request fails: the fallback above describes it).
async function loadKinds() {
  let data;
  try {
    // No key and no epoch: the list is public and the same for every dataset.
    const response = await fetch(`${API}/query-kinds`, {
      headers: { Accept: "application/json" },
      cache: "no-store",
      credentials: "omit",
    });
    if (!response.ok) return;
    data = await response.json();
  } catch {
    return;
  }
  if (!Array.isArray(data?.kinds)) return;
  const offered = data.kinds.map(readKind).filter(formCanBuild);
  if (offered.length === 0) return;
  state.kinds = new Map(offered.map((k) => [k.name, k]));
  const select = $("kind");
  const previous = select.value;
  select.replaceChildren();
  for (const k of offered) {
    const shown = KIND_NAMES[k.name];
    const o = option(k.name, shown && shown !== k.name ? `${shown} (${k.name})` : k.name);
    if (k.summary) o.title = k.summary;
    select.append(o);
  }
  select.value = state.kinds.has(previous) ? previous : offered[0].name;
  fillColumns(false);
}

function describeColumn(info) {
  if (Array.isArray(info.bounds)) return `bounds ${fmt(info.bounds[0])} to ${fmt(info.bounds[1])}`;
  if (Array.isArray(info.domain)) {
    const shown = info.domain.slice(0, 12).map(fmt).join(", ");
    return `domain: ${shown}${info.domain.length > 12 ? `, … (${info.domain.length} values)` : ""}`;
  }
  return "no public bounds or domain";
}

// -- key -----------------------------------------------------------------------------

async function useKey(key) {
  clearError();
  state.epoch += 1;
  state.key = key;
  $("key-status").textContent = "Checking the key…";
  try {
    const data = await api("/datasets");
    sessionStorage.setItem(KEY_STORAGE, key);
    $("key-status").textContent = `Key accepted (ends in …${key.slice(-4)}).`;
    await showDatasets(data?.datasets ?? []);
    return true;
  } catch (err) {
    if (err instanceof Stale) return false;
    state.key = null;
    sessionStorage.removeItem(KEY_STORAGE);
    $("key-status").textContent = "Key not accepted.";
    resetDataset();
    showError(err);
    return false;
  }
}

function forgetKey() {
  state.epoch += 1;
  sessionStorage.removeItem(KEY_STORAGE);
  state.key = null;
  state.lastRun = null;
  $("api-key").value = "";
  $("key-status").textContent = "Key forgotten.";
  resetDataset();
  clearError();
  $("result").classList.remove("synthetic");
  $("result").replaceChildren(el("p", { class: "empty" }, "No answer yet."));
  $("api-key").focus();
}

// -- datasets ------------------------------------------------------------------------

async function showDatasets(list) {
  const names = list.map((d) => (typeof d === "string" ? d : d.name));
  const select = $("dataset");
  select.replaceChildren();
  if (names.length === 0) {
    select.append(option("", "No dataset granted to this key"));
    select.disabled = true;
    resetDataset(false);
    return;
  }
  if (names.length > 1) select.append(option("", "Choose a dataset…"));
  for (const name of names) select.append(option(name, name));
  select.disabled = false;
  if (names.length === 1) await loadDataset(names[0]);
  else resetDataset(false);
}

function resetDataset(clearSelect = true) {
  state.dataset = null;
  if (clearSelect) {
    $("dataset").replaceChildren(option("", "Use a key first"));
    $("dataset").disabled = true;
  }
  $("dataset-description").textContent = "";
  $("cost-result").textContent = "";
  $("schema-table").hidden = true;
  $("expected-error").textContent = "";
  showAnswersLeft(null);
  showBudget(null);
  for (const id of ["cost-button", "run-button", "history-refresh"]) $(id).disabled = true;
  $("cost-result").textContent = "";
  renderHistory([]);
}

async function loadDataset(name) {
  clearError();
  state.epoch += 1;
  if (!name) {
    resetDataset(false);
    return;
  }
  try {
    const data = await api(`/datasets/${encodeURIComponent(name)}`);
    state.dataset = data;
    showAnswersLeft(null); // another grant: the last count was for the old one
    $("dataset").value = name;
    $("dataset-description").textContent = data.description || "";
    renderSchema(data);
    showBudget(data.budget);
    fillQueryForm();
    for (const id of ["cost-button", "run-button", "history-refresh"]) $(id).disabled = false;
    updateRunLabel();
    previewError();
    await refreshHistory();
  } catch (err) {
    if (err instanceof Stale) return;
    resetDataset(false);
    showError(err);
  }
}

function renderSchema(data) {
  const body = $("schema-table").tBodies[0];
  body.replaceChildren();
  for (const [name, info] of Object.entries(data.columns ?? {})) {
    const row = el("tr");
    row.append(el("th", { scope: "row" }, name), el("td", {}, String(info.type ?? "")));
    row.append(el("td", {}, describeColumn(info)), el("td", {}, String(info.nulls ?? "")));
    body.append(row);
  }
  $("schema-table").querySelector("caption").textContent =
    `Public schema of “${data.name}” (declared by the data owner; nothing here is read from the data)`;
  $("schema-table").hidden = false;
}

// -- budget gauge --------------------------------------------------------------------

function showBudget(budget) {
  const meter = $("budget-meter");
  const text = $("budget-text");
  if (!budget) {
    meter.max = 1;
    meter.value = 0;
    text.textContent = "No dataset chosen.";
    return;
  }
  const total = Number(budget.epsilon);
  const left = Number(budget.remaining?.epsilon ?? total);
  meter.max = total > 0 ? total : 1;
  meter.low = meter.max * 0.2;
  meter.high = meter.max * 0.5;
  meter.optimum = meter.max;
  meter.value = Math.max(0, Math.min(left, meter.max));
  let words = `ε ${fmtEpsilon(left)} of ${fmtEpsilon(total)} left`;
  if (Number(budget.delta) > 0) {
    words += ` · δ ${fmt(Number(budget.remaining?.delta ?? budget.delta))} of ${fmt(Number(budget.delta))} left`;
  }
  // The grant's accountant: how its charges add up (public, fixed with the grant).
  if (budget.accountant) words += ` · ${budget.accountant} accounting`;
  // The grant's noise (public, set by the data owner): said when it is not the default.
  if (budget.noise && budget.noise !== "laplace") words += ` · ${budget.noise} noise`;
  text.textContent = words;
  updateRunLabel();
}

function answersLeft(n) {
  return n === 1 ? "1 more answer" : `${n.toLocaleString("en")}${n >= 100000 ? "+" : ""} more answers`;
}

// From the last dry run: how many more copies of the query being composed the grant admits
// (public: the ledger and the query's parameters, nothing read from the data).
function showAnswersLeft(data) {
  state.answersLeft = Number.isInteger(data?.answers_left) ? data.answers_left : null;
  $("answers-left").textContent =
    state.answersLeft === null ? "" : `This query: ${answersLeft(state.answersLeft)} at this budget.`;
}

function updateRemaining(remaining) {
  if (!state.dataset || !remaining) return;
  state.dataset.budget = { ...state.dataset.budget, remaining };
  showBudget(state.dataset.budget);
}

// -- the query form ------------------------------------------------------------------

function fillQueryForm() {
  const all = columns();
  const filter = $("filter-column");
  filter.replaceChildren(option("", "no filter"));
  for (const c of all) filter.append(option(c.name, c.name));
  const groupBy = $("group-by");
  groupBy.replaceChildren(option("", "no grouping"));
  for (const c of all) if (c.hasDomain) groupBy.append(option(c.name, c.name));
  fillColumns(true);
  fillFilterValues();
}

function fillColumns(prefill) {
  const kind = $("kind").value;
  const select = $("column");
  const previous = select.value;
  select.replaceChildren();
  if (!columnRequired(kind)) select.append(option("", "all rows"));
  const usable = columns().filter((c) => fits(kind, c));
  for (const c of usable) select.append(option(c.name, `${c.name} (${c.info.type})`));
  if (usable.length === 0 && columnRequired(kind)) {
    select.append(option("", "no column fits this statistic"));
  }
  const keep = [...select.options].some((o) => o.value === previous);
  select.value = keep ? previous : select.options[0]?.value ?? "";
  showFields(prefill || !keep);
}

// Show the parameters the chosen statistic takes; refill bounds when the column changed.
function showFields(prefill) {
  const kind = $("kind").value;
  const c = column($("column").value);
  const bounded = usesBounds(kind, c);
  $("bounds-lo-field").hidden = !bounded;
  $("bounds-hi-field").hidden = !bounded;
  $("bounds-hint").hidden = !bounded;
  const k = state.kinds.get(kind);
  $("bins-field").hidden = !(k?.params.has("bins") && bounded);
  $("q-field").hidden = !k?.required.has("q");
  if (prefill && c) {
    const b = Array.isArray(c.info.bounds) ? c.info.bounds : c.kind === "boolean" ? [0, 1] : null;
    $("bound-lo").value = b ? String(untag(b[0])) : "";
    $("bound-hi").value = b ? String(untag(b[1])) : "";
  }
  // A column cannot group itself.
  for (const o of $("group-by").options) o.disabled = o.value !== "" && o.value === $("column").value;
  if ($("group-by").selectedOptions[0]?.disabled) $("group-by").value = "";
  updateRunLabel();
}

function fillFilterValues() {
  const list = $("filter-values");
  list.replaceChildren();
  const c = column($("filter-column").value);
  const values = c?.hasDomain ? c.info.domain : c?.kind === "boolean" ? [true, false] : [];
  for (const v of values) list.append(el("option", { value: fmt(v) }));
  const disabled = !c;
  $("filter-op").disabled = disabled;
  $("filter-value").disabled = disabled;
}

// The Run button's words, and whether it can run: off while a run is under way, and off
// (with the reason beside it) when the budget left cannot pay the ε chosen for a real run.
function updateRunLabel() {
  const button = $("run-button");
  const eps = Number($("epsilon").value);
  const chosen = $("epsilon").value.trim() !== "" && Number.isFinite(eps) && eps > 0;
  let meaning = "";
  if (chosen && eps <= 10) meaning = `With ε ${fmtEpsilon(eps)}: at most ${fmt(Math.exp(eps))} times as likely.`;
  else if (chosen) meaning = `With ε above 10 that is more than ${fmt(Math.round(Math.exp(10)))} times: a weak promise.`;
  $("epsilon-meaning").textContent = meaning;
  let reason = "";
  if ($("twin").checked) {
    button.textContent = "Run on the synthetic twin (free)";
  } else if (chosen) {
    button.textContent = `Run — spends ε ${fmtEpsilon(eps)} of your budget`;
    const budget = state.dataset?.budget;
    const left = budget ? Number(untag(budget.remaining?.epsilon ?? budget.epsilon)) : NaN;
    if (Number.isFinite(left) && eps > left + 1e-12) {
      reason = left > 1e-12
        ? `Run is off: ε ${fmtEpsilon(eps)} is more than the ε ${fmtEpsilon(left)} your budget has ` +
          `left. Lower ε to at most ${fmtEpsilon(left)}, or try the synthetic twin (free).`
        : "Run is off: your budget on this dataset is spent. The synthetic twin (free) still runs.";
    }
  } else {
    button.textContent = "Run — spends ε of your budget";
  }
  $("run-reason").textContent = reason;
  button.disabled = !state.dataset || state.running || reason !== "";
}

function number(input, what) {
  const text = input.value.trim();
  const v = Number(text);
  if (text === "" || !Number.isFinite(v)) return fail(`${what} must be a number.`, input);
  return v;
}

// The query spec as the service takes it (QuerySpec.to_dict), or null after an error.
function buildQuery() {
  if (!state.quiet) {
    for (const node of document.querySelectorAll("[aria-invalid]")) node.removeAttribute("aria-invalid");
  }
  const kind = $("kind").value;
  const c = column($("column").value);
  const k = state.kinds.get(kind);
  if (!k) return fail("Choose a statistic.", $("kind"));
  if (!c && k.columnRequired) {
    return fail(`Choose a column for the ${KIND_NAMES[kind] ?? kind}.`, $("column"));
  }
  const epsilon = number($("epsilon"), "Epsilon");
  if (epsilon === null) return null;
  if (!(epsilon > 0)) return fail("Epsilon must be greater than 0.", $("epsilon"));
  const query = { kind, column: c ? c.name : null, epsilon };
  if (usesBounds(kind, c)) {
    const lo = number($("bound-lo"), "The lower bound");
    if (lo === null) return null;
    const hi = number($("bound-hi"), "The upper bound");
    if (hi === null) return null;
    if (!(lo < hi)) return fail("The lower bound must be below the upper bound.", $("bound-lo"));
    query.bounds = [lo, hi];
    if (k.params.has("bins")) {
      const bins = number($("bins"), "The number of bins");
      if (bins === null) return null;
      if (!Number.isInteger(bins) || bins < 1) {
        return fail("The number of bins must be a whole number of at least 1.", $("bins"));
      }
      query.bins = bins;
    }
  }
  if (k.required.has("q")) {
    const q = number($("q"), "The quantile q");
    if (q === null) return null;
    if (q < 0 || q > 1) return fail("The quantile q must be between 0 and 1.", $("q"));
    query.q = q;
  }
  const where = buildFilter();
  if (where === null) return null;
  if (where.length) query.where = where;
  if ($("group-by").value) query.group_by = [$("group-by").value];
  return query;
}

function buildFilter() {
  const c = column($("filter-column").value);
  if (!c) return [];
  const input = $("filter-value");
  const text = input.value.trim();
  let value = text;
  if (c.kind === "numeric") {
    value = number(input, "The filter value");
    if (value === null) return null;
  } else if (c.kind === "boolean") {
    if (!["true", "false"].includes(text.toLowerCase())) {
      return fail("The filter value of a true/false column is true or false.", input);
    }
    value = text.toLowerCase() === "true";
  } else if (text === "") {
    return fail("Type the filter value, or choose “no filter”.", input);
  }
  return [[c.name, $("filter-op").value, value]];
}

function describeQuery(q) {
  if (!q || typeof q !== "object" || !q.kind) return "—";
  let text = KIND_NAMES[q.kind] ?? q.kind;
  if (q.column) text += ` of ${q.column}`;
  if (q.kind === "quantile" && q.q !== undefined) text += ` (q = ${fmt(q.q)})`;
  if (Array.isArray(q.bounds)) text += `, bounds ${fmt(q.bounds[0])} to ${fmt(q.bounds[1])}`;
  if (q.bins !== undefined && q.bins !== null) text += `, ${fmt(q.bins)} bins`;
  if (Array.isArray(q.where) && q.where.length) {
    text += `, where ${q.where.map((w) => `${w[0]} ${w[1]} ${fmt(w[2])}`).join(" and ")}`;
  }
  if (Array.isArray(q.group_by) && q.group_by.length) text += `, by ${q.group_by.join(", ")}`;
  return text;
}

// -- cost and run --------------------------------------------------------------------

function datasetPath(suffix) {
  return `/datasets/${encodeURIComponent(state.dataset.name)}/${suffix}`;
}

async function cost() {
  clearError();
  if (!state.dataset) return;
  const query = buildQuery();
  if (!query) return;
  $("cost-result").textContent = "Costing…";
  try {
    const data = await api(datasetPath("dry-run"), { method: "POST", body: { query } });
    let text = `This query costs ε ${fmtEpsilon(data.epsilon)}`;
    if (Number(data.delta) > 0) text += ` and δ ${fmt(data.delta)}`;
    text += data.affordable ? "; your budget can pay it" : "; your budget cannot pay it";
    if (Number.isInteger(data.answers_left) && data.affordable) text += ` (${answersLeft(data.answers_left)})`;
    if (data.remaining) text += ` (ε ${fmtEpsilon(data.remaining.epsilon)} left).`;
    if ($("twin").checked) text += " On the synthetic twin it is free.";
    const bar = expectedError(data.expected_error);
    $("cost-result").replaceChildren(text, ...(bar ? [el("br"), `Expected error: ${bar}`] : []));
    showAnswersLeft(data);
    updateRemaining(data.remaining);
  } catch (err) {
    $("cost-result").textContent = "";
    showError(err, { nearRun: true, focus: true });
  }
}

// -- the error bar before spending -----------------------------------------------------
// The dry run states the answer's error bar from public parameters only (ε, bounds, bins,
// level: nothing read, nothing charged), so the ε field can say what the chosen ε buys.
// It is asked again, after a pause, whenever the query changes; the old line stays until
// the new one comes (no layout shift under a pointer on its way to Cost or Run).

function expectedError(expected) {
  return expected && typeof expected.text === "string" ? expected.text : null;
}

function previewError() {
  clearTimeout(state.previewTimer);
  state.previewTimer = setTimeout(showExpectedError, 300);
}

async function showExpectedError() {
  if (!state.dataset) return;
  state.quiet = true;
  let query;
  try {
    query = buildQuery();
  } finally {
    state.quiet = false;
  }
  const asked = ++state.previewSeq;
  const show = (text) => {
    if (asked === state.previewSeq) $("expected-error").textContent = text;
  };
  if (!query) {
    show(""); // incomplete: the checks speak when the analyst asks for a cost or a run
    showAnswersLeft(null);
    return;
  }
  try {
    const data = await api(datasetPath("dry-run"), { method: "POST", body: { query } });
    const bar = expectedError(data.expected_error);
    show(bar ? `Expected error at this ε, before spending: ${bar}.` : "");
    if (asked === state.previewSeq) showAnswersLeft(data);
  } catch {
    show(""); // a refused query says why when it is costed or run
  }
}

async function run() {
  clearError();
  $("cost-result").textContent = ""; // the cost and budget it quoted are out of date after a run
  if (!state.dataset) return;
  const query = buildQuery();
  if (!query) return;
  const body = { query, twin: $("twin").checked };
  const text = JSON.stringify(body);
  // A run the network lost is retried under the same key, so the service charges it once.
  const idempotencyKey = state.lastRun?.text === text ? state.lastRun.idempotencyKey : newIdempotencyKey();
  state.lastRun = null;
  state.running = true;
  updateRunLabel();
  $("result").setAttribute("aria-busy", "true");
  try {
    const data = await api(datasetPath("query"), { method: "POST", body, idempotencyKey });
    renderAnswer(data, query);
    updateRemaining(data.remaining);
  } catch (err) {
    if (err instanceof ApiError && err.status === 0) state.lastRun = { text, idempotencyKey };
    showError(err, { nearRun: true, focus: true });
    if (err instanceof ApiError && err.status >= 400) await refreshBudget();
  } finally {
    state.running = false;
    updateRunLabel();
    $("result").removeAttribute("aria-busy");
  }
  previewError(); // the answers left (and the bar) for the query now, after this run
  await refreshHistory();
}

async function refreshBudget() {
  if (!state.dataset) return;
  try {
    const data = await api(`/datasets/${encodeURIComponent(state.dataset.name)}`);
    state.dataset.budget = data.budget;
    showBudget(data.budget);
  } catch {
    // the error of the run is what the analyst needs to see
  }
}

// -- answers -------------------------------------------------------------------------

function renderAnswer(data, query) {
  const release = data.release ?? {};
  const out = $("result");
  const parts = [];
  const badges = el("p", { class: "badges" });
  if (data.twin) {
    badges.append(el("span", { class: "badge badge-synthetic" }, "Synthetic twin — not real data, free"));
  } else if (data.charged) {
    badges.append(el("span", { class: "badge badge-real" }, `Real data · spent ε ${fmtEpsilon(release.epsilon)}`));
  } else {
    badges.append(el("span", { class: "badge badge-real" }, "Real data · replayed answer, nothing spent"));
  }
  parts.push(badges);
  parts.push(el("p", { class: "answer-query" }, describeQuery(query)));

  const level = fmtLevel(release.level);
  if (release.type === "grouped") {
    parts.push(...groupedAnswer(release, query, level));
  } else if (Array.isArray(release.value)) {
    parts.push(...vectorAnswer(release, query, level));
  } else {
    parts.push(...scalarAnswer(release, level));
  }
  if (data.twin) {
    parts.push(el("p", { class: "synthetic-note" },
      "These numbers come from the synthetic twin, rows generated from the public schema only: " +
      "they say nothing about the real data, and nothing was spent."));
  }
  const spent = data.twin ? "as if spending" : "spent";
  const facts = `Mechanism ${release.mechanism ?? "—"} · ${spent} ε ${fmtEpsilon(release.epsilon)}` +
    (Number(release.delta) > 0 ? ` and δ ${fmt(release.delta)}` : "") + ` · ${coverage(release, level)}`;
  parts.push(el("p", { class: "hint" }, facts));
  out.classList.toggle("synthetic", Boolean(data.twin));
  out.replaceChildren(...parts);
}

// What the release promises at its level: an interval's coverage, or (a quantile, chosen by
// the exponential mechanism from a grid) a bound on the rank error, as the CLI states it.
function coverage(release, level) {
  if (release.ci !== null && release.ci !== undefined) {
    return `the ${level} interval covers the exact answer with ${level} probability over the noise.`;
  }
  const rank = rankError(release);
  if (rank) return `the rank error is at most ${rank} with ${level} probability over the noise.`;
  return "this statistic has no confidence interval.";
}

function rankError(release) {
  const r = Number(untag(release.details?.rank_error));
  if (!Number.isFinite(r)) return null;
  const rows = Math.round(r);
  const step = Number(untag(release.details?.resolution));
  return `${fmt(rows)} ${rows === 1 ? "row" : "rows"}` + (Number.isFinite(step) ? ` (grid step ${fmt(step)})` : "");
}

function ciOf(ci) {
  if (!Array.isArray(ci) || ci.length !== 2) return null;
  const lo = Number(untag(ci[0]));
  const hi = Number(untag(ci[1]));
  return Number.isFinite(lo) && Number.isFinite(hi) ? [lo, hi] : null;
}

function scalarAnswer(release, level) {
  const value = untag(release.value);
  const ci = ciOf(release.ci);
  const parts = [];
  const dl = el("dl", { class: "answer" });
  dl.append(el("dt", {}, "Answer"), el("dd", { class: "answer-value", id: "answer-value" }, fmt(value)));
  const rank = ci ? null : rankError(release);
  if (rank) {
    // No interval around a value picked from a grid: its error is in rows of the sorted data.
    dl.append(el("dt", {}, `Rank error (${level})`));
    dl.append(el("dd", { class: "answer-ci", id: "answer-rank-error" },
      `at most ${rank}: the answer's place in the sorted data is within that many rows of the exact one's`));
  } else {
    dl.append(el("dt", {}, `${level} confidence interval`));
    dl.append(el("dd", { class: "answer-ci", id: "answer-ci" }, ci ? `${fmt(ci[0])} to ${fmt(ci[1])}` : "none for this statistic"));
  }
  parts.push(dl);
  if (ci && typeof value === "number" && Number.isFinite(value)) parts.push(errorBar(value, ci, level));
  return parts;
}

// A histogram (one count per bin or category), or a quantile at several q.
function vectorAnswer(release, query, level) {
  const values = release.value.map((v) => Number(untag(v)));
  const labels = release.details?.labels ?? values.map((_, i) => `${i + 1}`);
  const ci = Array.isArray(release.ci) && release.ci.length === 2 ? release.ci : null;
  const lows = ci ? ci[0].map((v) => Number(untag(v))) : null;
  const highs = ci ? ci[1].map((v) => Number(untag(v))) : null;
  const title = `${KIND_NAMES[query.kind] ?? query.kind} of ${query.column ?? "all rows"}`;
  return [
    barChart({ title, labels: labels.map(fmt), values, lows, highs, level }),
    dataTable(title, labels.map(fmt), values, lows, highs, level, query.kind === "histogram" ? "Bin" : "Item"),
  ];
}

function groupedAnswer(release, query, level) {
  const keys = (release.keys ?? []).map(fmt);
  const by = (release.group_by ?? []).join(", ");
  const values = release.value ?? [];
  const cis = release.ci ?? [];
  const name = `${KIND_NAMES[query.kind] ?? query.kind} of ${query.column ?? "all rows"}`;
  if (values.every((v) => Array.isArray(v))) {
    // A histogram per group: one small chart each.
    const labels = (release.details?.labels ?? []).map(fmt);
    return keys.map((key, i) => {
      const ci = Array.isArray(cis[i]) ? cis[i] : null;
      const lows = ci ? ci[0].map((v) => Number(untag(v))) : null;
      const highs = ci ? ci[1].map((v) => Number(untag(v))) : null;
      const vs = values[i].map((v) => Number(untag(v)));
      const figure = el("div", { class: "group-chart" });
      figure.append(el("h3", {}, `${by} = ${key}`));
      const ls = labels.length === vs.length ? labels : vs.map((_, j) => `${j + 1}`);
      const title = `${name}, ${by} = ${key}`;
      figure.append(barChart({ title, labels: ls, values: vs, lows, highs, level }));
      figure.append(dataTable(title, ls, vs, lows, highs, level, "Bin"));
      return figure;
    });
  }
  const numeric = values.every((v) => typeof untag(v) === "number");
  const lows = cis.map((c) => ciOf(c)?.[0] ?? NaN);
  const highs = cis.map((c) => ciOf(c)?.[1] ?? NaN);
  const title = `${name} by ${by}`;
  const parts = [];
  if (numeric) {
    parts.push(barChart({ title, labels: keys, values: values.map((v) => Number(untag(v))), lows, highs, level }));
  }
  parts.push(dataTable(title, keys, values.map(untag), lows, highs, level, by || "Group"));
  return parts;
}

function dataTable(title, labels, values, lows, highs, level, head) {
  const details = el("details", { class: "chart-data" });
  details.append(el("summary", {}, "The answer as a table"));
  const table = el("table", { class: "data-table" });
  table.append(el("caption", {}, title));
  const hr = el("tr");
  hr.append(el("th", { scope: "col" }, head), el("th", { scope: "col" }, "Answer"));
  hr.append(el("th", { scope: "col" }, `${level} interval`));
  const head_ = el("thead");
  head_.append(hr);
  table.append(head_);
  const body = el("tbody");
  labels.forEach((label, i) => {
    const row = el("tr");
    const ci = lows && Number.isFinite(lows[i]) ? `${fmt(lows[i])} to ${fmt(highs[i])}` : "—";
    row.append(el("th", { scope: "row" }, label), el("td", {}, fmt(values[i])), el("td", {}, ci));
    body.append(row);
  });
  table.append(body);
  details.append(table);
  return details;
}

// -- charts (inline SVG) -------------------------------------------------------------

let chartCount = 0;

function niceTicks(lo, hi, count = 5) {
  const span = hi - lo || 1;
  const raw = span / count;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => span / s <= count) ?? 10 * mag;
  const ticks = [];
  for (let t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) ticks.push(Number(t.toPrecision(12)));
  return ticks;
}

function accessibleSvg(root, title, description) {
  const id = `chart-${++chartCount}`;
  root.setAttribute("role", "img");
  root.setAttribute("aria-labelledby", `${id}-title ${id}-desc`);
  root.append(svg("title", { id: `${id}-title` }, title), svg("desc", { id: `${id}-desc` }, description));
}

// One value with its confidence interval on a number line.
function errorBar(value, [lo, hi], level) {
  const width = 560;
  const height = 86;
  const pad = 40;
  const spread = hi - lo || Math.abs(value) || 1;
  const min = Math.min(lo, value) - spread * 0.35;
  const max = Math.max(hi, value) + spread * 0.35;
  const x = (v) => pad + ((v - min) / (max - min)) * (width - 2 * pad);
  const root = svg("svg", { class: "error-bar", viewBox: `0 0 ${width} ${height}`, width, height });
  accessibleSvg(root, `Answer ${fmt(value)} with its ${level} confidence interval`,
    `The interval runs from ${fmt(lo)} to ${fmt(hi)}.`);
  const axisY = 64;
  root.append(svg("line", { class: "axis", x1: pad / 2, x2: width - pad / 2, y1: axisY, y2: axisY }));
  for (const t of niceTicks(min, max, 6)) {
    root.append(svg("line", { class: "tick", x1: x(t), x2: x(t), y1: axisY, y2: axisY + 5 }));
    root.append(svg("text", { class: "tick-label", x: x(t), y: axisY + 18, "text-anchor": "middle" }, fmt(t)));
  }
  const y = 34;
  root.append(svg("line", { class: "whisker", x1: x(lo), x2: x(hi), y1: y, y2: y }));
  for (const end of [lo, hi]) root.append(svg("line", { class: "whisker", x1: x(end), x2: x(end), y1: y - 9, y2: y + 9 }));
  root.append(svg("circle", { class: "point", cx: x(value), cy: y, r: 6 }));
  root.append(svg("text", { class: "value-label", x: x(value), y: y - 14, "text-anchor": "middle" }, fmt(value)));
  return root;
}

// Bars with error bars; labels under the bars (slanted when there are many).
function barChart({ title, labels, values, lows, highs, level }) {
  const n = values.length;
  const slant = n > 6 || labels.some((l) => l.length > 8);
  const left = 64;
  const right = 16;
  const top = 16;
  const bottom = slant ? 96 : 40;
  const band = Math.max(28, Math.min(72, 640 / Math.max(n, 1)));
  const width = left + right + band * n;
  const height = 280;
  const finite = (a) => (a ?? []).filter((v) => Number.isFinite(v));
  const all = [...finite(values), ...finite(lows), ...finite(highs), 0];
  let min = Math.min(...all);
  let max = Math.max(...all);
  if (max === min) max = min + 1;
  const ticks = niceTicks(min, max, 5);
  min = Math.min(min, ticks[0]);
  max = Math.max(max, ticks[ticks.length - 1]);
  const plot = height - top - bottom;
  const y = (v) => top + (1 - (v - min) / (max - min)) * plot;
  const root = svg("svg", { class: "bar-chart", viewBox: `0 0 ${width} ${height}`, width, height });
  accessibleSvg(root, title, `${n} bars, each with its ${level} confidence interval as an error bar. ` +
    "The same numbers are in the table below the chart.");
  for (const t of ticks) {
    root.append(svg("line", { class: "grid-line", x1: left, x2: width - right, y1: y(t), y2: y(t) }));
    root.append(svg("text", { class: "tick-label", x: left - 6, y: y(t) + 4, "text-anchor": "end" }, fmt(t)));
  }
  const zero = y(Math.max(min, Math.min(0, max)));
  values.forEach((v, i) => {
    const cx = left + band * i + band / 2;
    const group = svg("g", { class: "bar-group" });
    const ci = lows && Number.isFinite(lows[i]) ? ` (${level} interval ${fmt(lows[i])} to ${fmt(highs[i])})` : "";
    group.append(svg("title", {}, `${labels[i]}: ${fmt(v)}${ci}`));
    if (Number.isFinite(v)) {
      const top_ = Math.min(y(v), zero);
      group.append(svg("rect", { class: "bar", x: cx - band * 0.35, width: band * 0.7, y: top_, height: Math.max(Math.abs(zero - y(v)), 1) }));
    }
    if (lows && Number.isFinite(lows[i]) && Number.isFinite(highs[i])) {
      const cap = band * 0.15;
      group.append(svg("line", { class: "whisker", x1: cx, x2: cx, y1: y(lows[i]), y2: y(highs[i]) }));
      for (const end of [lows[i], highs[i]]) {
        group.append(svg("line", { class: "whisker", x1: cx - cap, x2: cx + cap, y1: y(end), y2: y(end) }));
      }
    }
    const label = labels[i].length > 14 ? `${labels[i].slice(0, 13)}…` : labels[i];
    const ly = height - bottom + 16;
    const text = svg("text", { class: "bar-label", x: cx, y: ly, "text-anchor": slant ? "end" : "middle" }, label);
    if (slant) text.setAttribute("transform", `rotate(-40 ${cx} ${ly})`);
    group.append(text);
    root.append(group);
  });
  root.append(svg("line", { class: "axis", x1: left, x2: width - right, y1: zero, y2: zero }));
  const wrap = el("div", { class: "chart" });
  wrap.append(root);
  return wrap;
}

// -- history -------------------------------------------------------------------------

async function refreshHistory() {
  if (!state.dataset) return;
  try {
    const data = await api(`/history?dataset=${encodeURIComponent(state.dataset.name)}&limit=50`);
    const rows = Array.isArray(data) ? data : data?.history ?? data?.queries ?? data?.items ?? [];
    renderHistory(rows);
  } catch (err) {
    showError(err);
  }
}

function historyAnswer(entry) {
  const release = entry.response?.release ?? entry.release ?? null;
  if (!release) return "—";
  if (release.type === "grouped") return `${(release.keys ?? []).length} groups`;
  if (Array.isArray(release.value)) return `${release.value.length} values`;
  return fmt(release.value);
}

function renderHistory(rows) {
  const body = $("history-table").tBodies[0];
  body.replaceChildren();
  if (!rows.length) {
    const row = el("tr");
    row.append(el("td", { colspan: "5" }, "No queries yet."));
    body.append(row);
    return;
  }
  for (const entry of rows) {
    const row = el("tr");
    const when = entry.created ?? entry.created_at ?? entry.time ?? entry.at ?? "";
    const date = when ? new Date(typeof when === "number" ? when * 1000 : when) : null;
    const whenText = date && !Number.isNaN(date.getTime()) ? date.toLocaleString("en-GB") : String(when);
    const status = entry.status ?? (entry.twin ? "twin" : "answered");
    row.append(el("td", {}, whenText), el("td", {}, describeQuery(entry.query)));
    row.append(el("td", {}, fmtEpsilon(entry.epsilon ?? 0)), el("td", {}, String(status)));
    row.append(el("td", {}, historyAnswer(entry)));
    body.append(row);
  }
}

// -- wiring --------------------------------------------------------------------------

function start() {
  $("key-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const key = $("api-key").value.trim();
    if (!key) {
      fail("Paste your API key first.", $("api-key"));
      return;
    }
    $("api-key").removeAttribute("aria-invalid");
    if (await useKey(key)) $("dataset").focus();
  });
  $("forget-key").addEventListener("click", forgetKey);
  $("dataset").addEventListener("change", (event) => loadDataset(event.target.value));
  $("kind").addEventListener("change", () => fillColumns(false));
  $("column").addEventListener("change", () => showFields(true));
  $("filter-column").addEventListener("change", fillFilterValues);
  $("epsilon").addEventListener("input", updateRunLabel);
  $("twin").addEventListener("change", updateRunLabel);
  $("cost-button").addEventListener("click", cost);
  $("history-refresh").addEventListener("click", refreshHistory);
  $("query-form").addEventListener("submit", (event) => {
    event.preventDefault();
    run();
  });
  $("query-form").addEventListener("input", (event) => event.target.removeAttribute("aria-invalid"));
  // A changed query has another cost: the line quoting the old one goes.
  for (const type of ["input", "change"]) {
    $("query-form").addEventListener(type, () => { $("cost-result").textContent = ""; });
    $("query-form").addEventListener(type, previewError);
  }
  fillFilterValues();
  updateRunLabel();
  loadKinds();
  const saved = sessionStorage.getItem(KEY_STORAGE);
  if (saved) {
    $("api-key").value = saved;
    useKey(saved);
  }
}

start();
