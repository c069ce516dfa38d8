// The peer's web app: plain JavaScript, no library, no external asset (it works offline).
// Every text from the network is put in the page as text (textContent), never as HTML.
"use strict";

const $ = (selector, root = document) => root.querySelector(selector);
const $$ = (selector, root = document) => Array.from(root.querySelectorAll(selector));

function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "class") node.className = value;
    else if (name === "dataset") Object.assign(node.dataset, value);
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : value);
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

class ApiError extends Error {
  constructor(status, body) {
    super(body.message || `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}

async function api(method, path, body, headers = {}) {
  const options = { method, headers: { ...headers }, credentials: "same-origin" };
  if (body instanceof Blob) {
    options.body = body;
  } else if (body !== undefined) {
    options.body = JSON.stringify(body);
    options.headers["content-type"] = "application/json";
  }
  const response = await fetch(path, options);
  let answer;
  try {
    answer = await response.json();
  } catch {
    answer = { message: `${response.status} ${response.statusText}` };
  }
  if (!response.ok) throw new ApiError(response.status, answer);
  return answer;
}

function debounce(fn, ms) {
  let timer;
  return (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), ms);
  };
}

function toast(text, kind = "info") {
  const item = el("div", { class: `toast ${kind}`, role: "status" }, text);
  $("#toasts").append(item);
  setTimeout(() => item.remove(), 6000);
}

function when(seconds) {
  if (seconds === null || seconds === undefined) return "—";
  return new Date(seconds * 1000).toLocaleString();
}

function bytes(count) {
  if (count < 1024) return `${count} bytes`;
  const units = ["kB", "MB", "GB", "TB"];
  let value = count;
  let unit = -1;
  do {
    value /= 1024;
    unit += 1;
  } while (value >= 1024 && unit < units.length - 1);
  return `${value.toFixed(value < 10 ? 1 : 0)} ${units[unit]}`;
}

function short(id) {
  return id && id.length > 20 ? `${id.slice(0, 12)}…${id.slice(-6)}` : id;
}

function formatValue(statement) {
  if (statement.type === "date") {
    const date = new Date(`${statement.value.slice(0, 10)}T00:00:00Z`);
    if (!Number.isNaN(date.getTime())) {
      return date.toLocaleDateString(undefined, { year: "numeric", month: "long", day: "numeric", timeZone: "UTC" });
    }
  }
  if (statement.type === "datetime") {
    const date = new Date(statement.value);
    if (!Number.isNaN(date.getTime())) return date.toLocaleString();
  }
  return statement.value;
}

// -- pages -------------------------------------------------------------------------------------
const state = {
  status: null,
  records: new Map(), // record key (owner + publication) -> record
  lastSequence: 0,
  unread: 0,
  owners: new Map(), // public id -> {online, checked}
  fetching: new Map(), // rendezvous key -> note about its owner
};

function showPage() {
  const page = (location.hash || "#follow").slice(1);
  for (const section of $$(".page")) section.hidden = section.id !== page;
  for (const link of $$("nav a")) link.classList.toggle("on", link.dataset.page === page);
  if (page === "inbox") {
    state.unread = 0;
    renderUnread();
  }
  if (page === "fetch") loadFetches();
  if (page === "share") loadPublished();
  if (page === "status") renderStatus();
}

function renderUnread() {
  const badge = $("#unread");
  badge.hidden = state.unread === 0;
  badge.textContent = String(state.unread);
}

// -- Follow ------------------------------------------------------------------------------------
let followMode = "form";

function addCondition(values = {}) {
  const row = $("#condition-template").content.firstElementChild.cloneNode(true);
  $(".c-property", row).value = values.property || "";
  $(".c-operator", row).value = values.operator || "contains";
  $(".c-type", row).value = values.type || "auto";
  const list = $(".c-values", row);
  const shown = values.values && values.values.length ? values.values : [""];
  for (const value of shown) addValue(row, value);
  $(".c-or", row).addEventListener("click", () => {
    addValue(row, "");
    preview();
  });
  $(".c-remove", row).addEventListener("click", () => {
    row.remove();
    preview();
  });
  $(".c-operator", row).addEventListener("change", () => {
    shapeCondition(row);
    preview();
  });
  $(".c-type", row).addEventListener("change", () => {
    shapeCondition(row);
    preview();
  });
  row.addEventListener("input", preview);
  $("#conditions").append(row);
  shapeCondition(row);
  list.querySelector("input")?.focus();
  return row;
}

function addValue(row, value) {
  const list = $(".c-values", row);
  const input = el("input", { class: "c-value", value, autocomplete: "off" });
  if (list.children.length) list.append(el("span", { class: "or" }, "or"));
  list.append(input);
  shapeCondition(row);
}

function shapeCondition(row) {
  const operator = $(".c-operator", row).value;
  const type = $(".c-type", row).value;
  const inputs = $$(".c-value", row);
  if (operator === "between") {
    while (inputs.length < 2) {
      addValue(row, "");
      inputs.push($$(".c-value", row).at(-1));
    }
  }
  inputs.forEach((input, n) => {
    input.hidden = operator === "exists" || (operator === "between" && n > 1);
    input.type = type === "date" ? "text" : "text";
    input.placeholder =
      operator === "between" ? (n === 0 ? "from" : "to") : type === "date" ? "2004-05-31" : type === "number" ? "2004" : "value";
  });
  for (const word of $$(".or", row)) word.textContent = operator === "between" ? "and" : "or";
  $(".c-or", row).hidden = operator === "exists" || operator === "between";
  $(".c-type", row).hidden = operator === "exists" || operator === "contains";
}

function formValue() {
  return {
    class: $("#q-class").value,
    conditions: $$("#conditions .condition").map((row) => ({
      property: $(".c-property", row).value,
      operator: $(".c-operator", row).value,
      type: $(".c-type", row).value,
      values: $$(".c-value", row).filter((input) => !input.hidden).map((input) => input.value),
    })),
  };
}

let currentQuery = null;

function showQuery(answer) {
  currentQuery = answer ? answer.text : null;
  $("#q-qel").textContent = answer ? answer.qel : "—";
  $("#q-sparql").textContent = answer ? answer.sparql : "—";
  $("#subscribe").disabled = !answer;
}

const preview = debounce(async () => {
  if (followMode !== "form") return;
  for (const box of $$(".c-error")) box.hidden = true;
  $("#q-form-error").hidden = true;
  try {
    showQuery(await api("POST", "/api/query/build", formValue()));
  } catch (error) {
    showQuery(null);
    const field = error.body && error.body.field;
    const match = field && /^conditions\.(\d+)/.exec(field);
    const row = match && $$("#conditions .condition")[Number(match[1])];
    const box = row ? $(".c-error", row) : $("#q-form-error");
    box.textContent = error.message;
    box.hidden = false;
  }
}, 250);

const checkTyped = debounce(async () => {
  const text = $("#q-text").value;
  const box = $("#q-error");
  if (!text.trim()) {
    box.hidden = true;
    showQuery(null);
    return;
  }
  try {
    showQuery(await api("POST", "/api/query/check", { query: text }));
    box.hidden = true;
    $("#q-text").removeAttribute("aria-invalid");
  } catch (error) {
    showQuery(null);
    $("#q-text").setAttribute("aria-invalid", "true");
    $("#q-error-message").textContent = error.message;
    const { line, column } = error.body || {};
    const where = $("#q-error-where");
    if (line) {
      const lineText = text.split("\n")[line - 1] ?? "";
      where.textContent = `${lineText}\n${" ".repeat(Math.max(0, column - 1))}^ line ${line}, column ${column}`;
      where.dataset.line = line;
      where.dataset.column = column;
      where.hidden = false;
    } else {
      where.hidden = true;
    }
    box.hidden = false;
  }
}, 200);

function setFollowMode(mode) {
  followMode = mode;
  for (const button of $$("[data-mode]")) button.classList.toggle("on", button.dataset.mode === mode);
  $("#follow-form").hidden = mode !== "form";
  $("#follow-text").hidden = mode !== "text";
  showQuery(null);
  if (mode === "form") preview();
  else checkTyped();
}

function expiry(select, custom) {
  if (select.value !== "custom") return select.value || undefined;
  return custom.value ? new Date(custom.value).toISOString() : undefined;
}

async function subscribe() {
  const result = $("#subscribe-result");
  const body = {
    query: currentQuery,
    id: $("#q-id").value.trim() || undefined,
    on_change: $("#q-on-change").checked,
    expires: expiry($("#q-expires"), $("#q-expires-at")),
  };
  $("#subscribe").disabled = true;
  try {
    const answer = await api("POST", "/api/subscribe", body);
    result.className = "result ok";
    result.textContent = `${answer.repeated ? "Already following" : "Following"} “${answer.id}”: ${answer.query}`;
    await refreshStatus();
  } catch (error) {
    result.className = "result error";
    result.textContent = error.message;
  } finally {
    result.hidden = false;
    $("#subscribe").disabled = !currentQuery;
  }
}

function renderSubscriptions() {
  const status = state.status;
  const body = $("#subscriptions tbody");
  body.replaceChildren();
  const subscriptions = Object.entries(status ? status.subscriptions : {});
  $("#no-subscriptions").hidden = subscriptions.length > 0;
  const filter = $("#filter-subscription");
  const chosen = filter.value;
  filter.replaceChildren(el("option", { value: "" }, "all"));
  for (const [id, query] of subscriptions) {
    const onChange = status.on_change.includes(id);
    body.append(
      el(
        "tr",
        { dataset: { subscription: id } },
        el("td", {}, el("strong", {}, id), onChange ? el("span", { class: "tag" }, "on change") : null),
        el("td", {}, el("code", {}, query.split(/\s+/).join(" "))),
        el("td", {}, el("button", { type: "button", onclick: () => unsubscribe(id) }, "Stop following")),
      ),
    );
    filter.append(el("option", { value: id, selected: id === chosen }, id));
  }
}

async function unsubscribe(id) {
  try {
    await api("POST", "/api/unsubscribe", { id });
    toast(`No longer following ${id}`);
    await refreshStatus();
  } catch (error) {
    toast(error.message, "error");
  }
}

// -- Inbox -------------------------------------------------------------------------------------
const recordKey = (record) => `${record.owner}\u0000${record.publication}`;

function takeRecord(record, live) {
  const key = recordKey(record);
  const known = state.records.get(key);
  if (known && known.sequence >= record.sequence) return;
  state.records.set(key, record);
  state.lastSequence = Math.max(state.lastSequence, record.sequence);
  renderRecord(record);
  if (live) {
    const title = record.readable ? record.readable.title : record.publication;
    const verb = { added: "New", changed: "Changed", removed: "Withdrawn" }[record.kind] || "New";
    toast(`${verb}: ${title}`);
    if ((location.hash || "#follow") !== "#inbox") {
      state.unread += 1;
      renderUnread();
    }
  }
}

function renderRecord(record) {
  const key = recordKey(record);
  const old = $$("#records .record").find((node) => node.dataset.key === key);
  const shown = record.readable;
  const kind = record.kind || "added";
  const card = el(
    "article",
    {
      class: `record ${kind}`,
      dataset: { key, kind, publication: record.publication, sequence: record.sequence, owner: record.owner },
    },
    el(
      "header",
      {},
      el("span", { class: `kind ${kind}` }, kind),
      el("h3", {}, shown ? shown.title : record.publication),
      el("span", { class: "muted when" }, when(record.received_at)),
    ),
    shown
      ? el(
          "dl",
          {},
          shown.statements.map((statement) => [
            el("dt", { title: statement.iri }, statement.property),
            el("dd", { title: statement.full || statement.value }, formatValue(statement), statement.lang ? el("span", { class: "muted" }, ` (${statement.lang})`) : null),
          ]),
        )
      : el("p", { class: "error" }, record.problem || "this notification cannot be read"),
    el(
      "p",
      { class: "meta" },
      "About ",
      el("code", {}, record.subject),
      " · published by ",
      el("code", { class: "owner", title: record.owner }, short(record.owner)),
      " ",
      el("span", { class: "presence", dataset: { owner: record.owner } }, "…"),
      ` · matched ${record.subscriptions.join(", ") || "—"} · ${record.hops} ${record.hops === 1 ? "hop" : "hops"}`,
    ),
    shown && shown.file && kind !== "removed"
      ? el(
          "p",
          { class: "file" },
          `A file of ${bytes(shown.file.size)} (SHA-256 ${shown.file.sha256.slice(0, 16)}…) `,
          el("button", { type: "button", class: "fetch", onclick: () => startFetch(record) }, "Fetch the file"),
          el("span", { class: "fetch-state" }),
        )
      : null,
  );
  if (old) old.remove();
  $("#records").prepend(card);
  $("#inbox-empty").hidden = true;
  applyFilters();
  presence(record.owner);
}

function applyFilters() {
  const subscription = $("#filter-subscription").value;
  const text = $("#filter-text").value.trim().toLowerCase();
  const removed = $("#filter-removed").checked;
  for (const card of $$("#records .record")) {
    const record = [...state.records.values()].find((r) => recordKey(r) === card.dataset.key);
    if (!record) continue;
    const matches =
      (!subscription || record.subscriptions.includes(subscription)) &&
      (removed || record.kind !== "removed") &&
      (!text || card.textContent.toLowerCase().includes(text) || record.owner.includes(text));
    card.hidden = !matches;
  }
}

async function presence(owner, force = false) {
  const known = state.owners.get(owner);
  const fresh = known && Date.now() - known.checked < 30000;
  if (known && (fresh || known.pending) && !force) {
    paintPresence(owner);
    return;
  }
  state.owners.set(owner, { ...(known || {}), pending: true, checked: Date.now() });
  let online = null;
  let problem = null;
  try {
    online = (await api("POST", "/api/locate", { public_id: owner })).online;
  } catch (error) {
    problem = error.message;
  }
  state.owners.set(owner, { online, problem, checked: Date.now(), pending: false });
  paintPresence(owner);
}

function paintPresence(owner) {
  const known = state.owners.get(owner) || {};
  for (const node of $$(".presence")) {
    if (node.dataset.owner !== owner) continue;
    node.className = `presence ${known.online === true ? "online" : known.online === false ? "offline" : "unknown"}`;
    node.textContent = known.pending ? "(asking…)" : known.online === true ? "online now" : known.online === false ? "offline now" : "(not known)";
    node.title = known.problem || `asked the network at ${new Date(known.checked || Date.now()).toLocaleTimeString()}; click to ask again`;
    node.onclick = () => presence(owner, true);
  }
}

async function loadInbox() {
  let after = 0;
  for (;;) {
    const page = await api("GET", `/api/inbox?after=${after}`);
    for (const record of page.records) takeRecord(record, false);
    if (!page.records.length) break;
    after = page.records.at(-1).sequence;
  }
  $("#inbox-empty").hidden = state.records.size > 0;
  follow();
}

function follow() {
  const source = new EventSource(`/api/events?after=${state.lastSequence}`);
  source.addEventListener("record", (message) => takeRecord(JSON.parse(message.data), true));
  source.addEventListener("open", () => document.body.classList.remove("stream-lost"));
  source.addEventListener("error", () => document.body.classList.add("stream-lost"));
}

// -- Fetch -------------------------------------------------------------------------------------
async function startFetch(record) {
  const card = $$("#records .record").find((node) => node.dataset.key === recordKey(record));
  const note = card && $(".fetch-state", card);
  if (note) note.textContent = " asking…";
  try {
    const answer = await api("POST", "/api/fetch", { publication: record.publication, owner: record.owner });
    const fetch = answer.fetch;
    if (answer.owner_online === false) {
      state.fetching.set(fetch.rendezvous, "offline");
    } else if (answer.owner_online === true) {
      state.fetching.set(fetch.rendezvous, "online");
    }
    if (note) note.textContent = ` ${describeFetch(fetch)} (see Fetch)`;
    location.hash = "#fetch";
  } catch (error) {
    if (note) note.textContent = ` ${error.message}`;
    toast(error.message, "error");
  }
}

function describeFetch(fetch) {
  if (fetch.state === "done") return "fetched, SHA-256 verified";
  if (fetch.state === "failed") return `failed: ${fetch.reason}`;
  return `${bytes(fetch.received)} of ${bytes(fetch.size)}`;
}

let fetchTimer = null;

async function loadFetches() {
  clearTimeout(fetchTimer);
  let answer;
  try {
    answer = await api("GET", "/api/fetches");
  } catch (error) {
    toast(error.message, "error");
    return;
  }
  const list = $("#fetches");
  list.replaceChildren();
  $("#fetches-empty").hidden = answer.fetches.length > 0;
  let waiting = false;
  for (const fetch of answer.fetches) {
    waiting = waiting || fetch.state === "waiting";
    const ownerNote = state.fetching.get(fetch.rendezvous);
    const percent = fetch.size ? Math.floor((100 * fetch.received) / fetch.size) : 100;
    const link = (disposition, text) =>
      el("a", { href: `/api/file?rendezvous=${fetch.rendezvous}&disposition=${disposition}`, class: "button", target: disposition === "inline" ? "_blank" : undefined, download: disposition === "attachment" ? fetch.name : undefined, rel: "noopener" }, text);
    list.append(
      el(
        "article",
        { class: `fetch-item ${fetch.state}`, dataset: { rendezvous: fetch.rendezvous, publication: fetch.publication, state: fetch.state } },
        el("h3", {}, fetch.name, el("span", { class: "muted" }, ` · ${fetch.publication}`)),
        el("progress", { max: 100, value: percent }),
        el("p", { class: "fetch-text" }, describeFetch(fetch)),
        fetch.state === "waiting" && ownerNote === "offline"
          ? el("p", { class: "note rendezvous" }, "The owner is offline. Your access point keeps the request (a rendezvous): the file arrives when the owner is back online, even if you close this page.")
          : fetch.state === "waiting"
            ? el("p", { class: "note" }, "Coming through your access point…")
            : null,
        fetch.state === "done"
          ? el("p", {}, el("span", { class: "verified" }, `✓ SHA-256 ${fetch.sha256} verified`), " ", link("inline", "Open"), " ", link("attachment", "Save"))
          : null,
        fetch.state === "failed" ? el("p", { class: "error" }, fetch.reason, " — fetching it again from the inbox retries.") : null,
      ),
    );
  }
  if (waiting && location.hash === "#fetch") fetchTimer = setTimeout(loadFetches, 1000);
}

// -- Share -------------------------------------------------------------------------------------
let shareMode = "file";
let pendingChange = null; // {id, change} while editing a new version or an extension

function setShareMode(mode) {
  shareMode = mode;
  for (const button of $$("[data-share]")) button.classList.toggle("on", button.dataset.share === mode);
  $("#share-file").hidden = mode !== "file";
  $("#share-document").hidden = mode !== "document";
}

function cancelChange() {
  pendingChange = null;
  $("#s-change-note").hidden = true;
  $("#s-id").disabled = false;
  $("#publish").textContent = "Publish";
  $("#publish-cancel-change").hidden = true;
}

function editChange(item, change) {
  pendingChange = { id: item.id, change };
  setShareMode("document");
  $("#s-format").value = "turtle";
  $("#s-document").value =
    change === "update" ? item.turtle : `<${item.subject}>\n    <http://purl.org/dc/elements/1.1/subject> "" .\n`;
  $("#s-id").value = item.id;
  $("#s-id").disabled = true;
  const note = $("#s-change-note");
  note.textContent =
    change === "update"
      ? `A new version of ${item.id}: it replaces what was published (the file stays).`
      : `Statements added to ${item.id} (about <${item.subject}>).`;
  note.hidden = false;
  $("#publish").textContent = change === "update" ? "Publish the new version" : "Add the statements";
  $("#publish-cancel-change").hidden = false;
  $("#s-document").focus();
  window.scrollTo(0, 0);
}

async function publish() {
  const result = $("#publish-result");
  const common = {
    id: $("#s-id").value.trim() || undefined,
    expires: $("#s-expires").value || undefined,
  };
  $("#publish").disabled = true;
  try {
    let answer;
    if (shareMode === "file") {
      const description = {
        ...common,
        metadata: {
          identifier: $("#s-identifier").value,
          class: $("#s-class").value,
          title: $("#s-title").value,
          creators: $("#s-creators").value,
          date: $("#s-date").value,
          subjects: $("#s-subjects").value,
        },
      };
      const file = $("#s-file").files[0];
      answer = file
        ? await api("POST", "/api/publish/file", file, { "x-publish": encodeURIComponent(JSON.stringify(description)) })
        : await api("POST", "/api/publish", description);
    } else {
      answer = await api("POST", "/api/publish", {
        ...common,
        ...(pendingChange || {}),
        document: $("#s-document").value,
        format: $("#s-format").value,
      });
    }
    result.className = "result ok";
    result.replaceChildren(
      ...answer.results.map((r) => el("div", {}, `${r.outcome} ${r.id} <${r.subject}>`, r.size !== undefined ? ` with its file (${bytes(r.size)})` : "")),
    );
    cancelChange();
    $("#share-file").reset();
    $("#s-id").value = "";
    await loadPublished();
  } catch (error) {
    result.className = "result error";
    const lines = (error.body && error.body.results) || [];
    result.replaceChildren(el("div", {}, error.message), ...lines.map((r) => el("div", {}, `${r.outcome} ${r.id}${r.reason ? `: ${r.reason}` : ""}`)));
  } finally {
    result.hidden = false;
    $("#publish").disabled = false;
  }
}

async function retract(item) {
  if (!confirm(`Withdraw ${item.readable ? item.readable.title : item.id} from the network? Everyone who was told of it hears it is withdrawn.`)) return;
  try {
    await api("POST", "/api/retract", { id: item.id });
    toast(`Withdrawn: ${item.id}`);
    await loadPublished();
  } catch (error) {
    toast(error.message, "error");
  }
}

async function loadPublished() {
  let answer;
  try {
    answer = await api("GET", "/api/published");
  } catch (error) {
    toast(error.message, "error");
    return;
  }
  if (!$("#s-identifier").value) $("#s-identifier").value = answer.new_identifier;
  $("#ad-current").textContent = answer.advertisement || "none";
  const list = $("#published");
  list.replaceChildren();
  $("#published-empty").hidden = answer.published.length > 0;
  for (const item of answer.published) {
    list.append(
      el(
        "article",
        { class: `published ${item.retracted ? "retracted" : ""}`, dataset: { id: item.id } },
        el("h3", {}, item.readable ? item.readable.title : item.id, item.retracted ? el("span", { class: "kind removed" }, "withdrawn") : null),
        el("p", { class: "muted" }, `${item.id} · <${item.subject}> · ${item.changes} change(s), last ${when(item.last_changed)}`, item.expires ? ` · expires ${when(item.expires)}` : ""),
        item.retracted
          ? null
          : el(
              "p",
              {},
              el("button", { type: "button", class: "update", onclick: () => editChange(item, "update") }, "New version"),
              " ",
              el("button", { type: "button", class: "extend", onclick: () => editChange(item, "extend") }, "Add statements"),
              " ",
              el("button", { type: "button", class: "retract", onclick: () => retract(item) }, "Withdraw"),
            ),
      ),
    );
  }
}

const SCHEMAS = ["dc", "dcterms", "foaf", "lom"];

function renderSchemas() {
  const box = $("#ad-schemas");
  for (const name of SCHEMAS) {
    box.append(el("label", { class: "check" }, el("input", { type: "checkbox", value: name }), ` ${name}`));
  }
}

async function advertise() {
  const result = $("#advertise-result");
  try {
    const answer = await api("POST", "/api/advertise", {
      schemas: $$("#ad-schemas input:checked").map((input) => input.value),
      properties: $("#ad-properties").value.split(/[\s,;]+/).filter(Boolean),
    });
    result.className = "result ok";
    result.textContent = `Advertised ${answer.text}`;
    $("#ad-current").textContent = answer.text;
  } catch (error) {
    result.className = "result error";
    result.textContent = error.message;
  }
  result.hidden = false;
}

// -- Status ------------------------------------------------------------------------------------
async function refreshStatus() {
  try {
    state.status = await api("GET", "/api/status");
  } catch (error) {
    $("#link-state").className = "dot down";
    $("#link-text").textContent = error.status === 401 ? "not signed in: run `peer ui`" : "the daemon does not answer";
    return;
  }
  const status = state.status;
  document.title = `peer ${status.name}`;
  $("#peer-name").textContent = status.name;
  $("#link-state").className = `dot ${status.connected ? "up" : "down"}`;
  $("#link-text").textContent = status.connected ? `connected to ${status.superpeer_id}` : "not connected";
  renderSubscriptions();
  if (!$("#status").hidden) renderStatus();
}

function renderStatus() {
  const status = state.status;
  if (!status) return;
  const rows = [];
  const fact = (name, ...value) => rows.push(el("tr", { dataset: { fact: name } }, el("th", {}, name), el("td", {}, ...value)));
  fact("Peer", status.name);
  if (status.identity) {
    fact("Public identifier", el("code", {}, status.identity.public_id));
    fact("Key fingerprint", el("code", {}, status.identity.key_fingerprint), ` (RSA ${status.identity.key_bits} bits)`);
  } else {
    fact("Public identifier", `${status.peer_id} (plaintext network: no key)`);
  }
  fact("Access point", `${status.access_point}${status.superpeer_id ? ` (super-peer ${status.superpeer_id})` : ""}`);
  fact(
    "Connection",
    status.connected
      ? `connected since ${when(status.since)}`
      : `not connected${status.last_error ? ` (${status.last_error})` : ""}${status.retry_at ? `; next attempt at ${when(status.retry_at)}` : ""}`,
  );
  fact("Security", status.security.tls ? `TLS 1.3, trusting ${status.security.trust}; ${status.security.registered_with ? `registered with ${status.security.registered_with}` : "not registered yet"}` : "plaintext");
  fact(
    "Moves",
    status.moves.length
      ? el("ul", {}, status.moves.map((move) => el("li", {}, `${when(move.at)}: from ${move.from} to ${move.to}`)))
      : "none since the daemon started",
  );
  const offset = status.clock_offset_seconds;
  fact(
    "Clock offset from the access point",
    offset === undefined || offset === null ? "not measured" : `${offset >= 0 ? "+" : ""}${offset.toFixed(3)} s${Math.abs(offset) > 1 ? " (this computer's clock is off)" : ""}`,
  );
  const waiting = status.rendezvous_waiting;
  const outbox = status.outbox;
  fact(
    "Waiting at the access point",
    el(
      "div",
      {},
      outbox === undefined || outbox === null
        ? el("div", {}, "Notifications kept while offline: delivered at each connection (the access point does not report how many wait).")
        : el("div", {}, `Outbox: ${JSON.stringify(outbox)}`),
      el("div", {}, waiting.length ? `Files waiting for their owners (rendezvous): ${waiting.map((w) => w.publication).join(", ")}` : "No file waiting for its owner."),
      status.expired_while_away ? el("div", {}, `${status.expired_while_away} notification(s) expired while this peer was away.`) : null,
    ),
  );
  fact("Inbox", `${status.inbox.records} notification(s); ${status.inbox.duplicates_ignored} repeat(s) ignored`);
  const kept = status.kept;
  if (kept && (kept.publications || kept.forgotten)) {
    fact("Held by one super-peer alone", `${kept.publications} publication(s) sent again until a second copy is made; ${kept.forgotten} forgotten unconfirmed`);
  }
  const c = status.counters;
  fact("Requests", `${c.requests} sent, ${c.acknowledged} acknowledged, ${c.refused} refused, ${c.failed} failed; ${c.connections} connection(s)`);
  if (status.problems.length) fact("Problems", el("ul", {}, status.problems.map((p) => el("li", { class: "error" }, p))));
  fact("Web app", status.ui || "—");
  $("#facts").replaceChildren(...rows);
  const notify = status.desktop_notifications;
  $("#notify-toggle").checked = notify.enabled;
  $("#notify-note").textContent = notify.available ? "Shown with notify-send." : "notify-send is not installed on this computer: nothing is shown on the desktop (the inbox still updates live).";
}

async function toggleNotifications() {
  try {
    await api("POST", "/api/settings", { desktop_notifications: $("#notify-toggle").checked });
    await refreshStatus();
  } catch (error) {
    toast(error.message, "error");
  }
}

// -- start -------------------------------------------------------------------------------------
function start() {
  window.addEventListener("hashchange", showPage);
  for (const button of $$("[data-mode]")) button.addEventListener("click", () => setFollowMode(button.dataset.mode));
  for (const button of $$("[data-share]")) button.addEventListener("click", () => {
    cancelChange();
    setShareMode(button.dataset.share);
  });
  $("#add-condition").addEventListener("click", () => {
    addCondition();
    preview();
  });
  $("#q-class").addEventListener("input", preview);
  $("#q-text").addEventListener("input", checkTyped);
  $("#q-expires").addEventListener("change", () => {
    $("#q-expires-at").hidden = $("#q-expires").value !== "custom";
  });
  $("#subscribe").addEventListener("click", subscribe);
  for (const id of ["#filter-subscription", "#filter-text", "#filter-removed"]) {
    $(id).addEventListener("input", applyFilters);
  }
  $("#publish").addEventListener("click", publish);
  $("#publish-cancel-change").addEventListener("click", cancelChange);
  $("#s-document-file").addEventListener("change", async () => {
    const file = $("#s-document-file").files[0];
    if (!file) return;
    $("#s-document").value = await file.text();
    const format = { ttl: "turtle", nt: "nt", rdf: "xml", xml: "xml", jsonld: "json-ld", json: "json-ld" }[file.name.split(".").pop()];
    if (format) $("#s-format").value = format;
  });
  $("#advertise").addEventListener("click", advertise);
  $("#notify-toggle").addEventListener("change", toggleNotifications);
  renderSchemas();
  addCondition();
  showPage();
  refreshStatus();
  setInterval(refreshStatus, 3000);
  loadInbox().catch((error) => toast(error.message, "error"));
}

document.addEventListener("DOMContentLoaded", start);
