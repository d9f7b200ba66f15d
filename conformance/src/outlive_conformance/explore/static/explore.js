// The explorer page: read the form, ask the server to run it, show what came back.
// Plain browser JavaScript, no libraries and no build step. The drawings are SVG made by the
// server (the same renderer as `outlive run --svg`); this file only places them and the tables.
"use strict";

const $ = (sel) => document.querySelector(sel);
let config = null;
let sequence = 0;          // answers to older requests are dropped
let editedToml = false;

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k.startsWith("data-")) node.setAttribute(k, v);
    else node[k] = v;
  }
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

function show(value) {
  return value === null || value === undefined ? "—" : String(value);
}

function setState(state, text) {
  document.body.dataset.state = state;
  $("#status").textContent = text;
}

function showError(kind, message) {
  const box = $("#error");
  box.replaceChildren(el("strong", {}, kind + ": "), el("span", { class: "message" }, message));
  box.hidden = false;
}

function clearError() {
  $("#error").hidden = true;
  $("#error").replaceChildren();
}

function currentScenario() {
  return config.scenarios.find((s) => s.id === $("#scenario").value) || config.scenarios[0];
}

function buildSwitches() {
  const box = $("#switches");
  box.replaceChildren();
  const sc = currentScenario();
  for (const sw of config.switches) {
    const fs = el("fieldset", { id: "sw-" + sw.name });
    fs.append(el("legend", {}, sw.title));
    for (const v of sw.values) {
      let label = v.label;
      if (sw.name === "change" && sc.change_at[v.value] !== undefined) label += ` (t${sc.change_at[v.value]})`;
      const input = el("input", { type: "radio", name: "sw-" + sw.name, value: v.value });
      input.checked = sc.defaults[sw.name] === v.value;
      input.addEventListener("change", () => run());
      const opt = el("label", { class: "choice" }, input, " " + label);
      if (sc.defaults[sw.name] === v.value) opt.classList.add("main-value");
      fs.append(opt);
    }
    box.append(fs);
  }
}

function switches() {
  const out = {};
  for (const sw of config.switches) {
    const checked = document.querySelector(`input[name="sw-${sw.name}"]:checked`);
    if (checked) out[sw.name] = checked.value;
  }
  return out;
}

function resetToMain() {
  const sc = currentScenario();
  for (const sw of config.switches) {
    for (const input of document.querySelectorAll(`input[name="sw-${sw.name}"]`)) {
      input.checked = input.value === sc.defaults[sw.name];
    }
  }
}

async function run(useToml = false) {
  const mine = ++sequence;
  const body = { scenario: $("#scenario").value, backend: $("#backend").value, switches: switches() };
  if (useToml || editedToml) body.toml = $("#toml").value;
  setState("running", `Running on memory://${body.backend !== "memory://" ? " and " + body.backend : ""}…`);
  let answer;
  try {
    const response = await fetch("/api/run", {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
    });
    answer = await response.json();
  } catch (err) {
    if (mine !== sequence) return;
    showError("Unreachable", "the explorer server did not answer: " + err);
    setState("error", "Not run.");
    return;
  }
  if (mine !== sequence) return;
  if (answer.error) {
    showError(answer.error.type, answer.error.message);
    const shown = $("#drawings").children.length > 0;
    document.body.classList.toggle("outdated", shown);
    setState("error", "Not run: see the message above." + (shown ? " Below, faded: the last run that did run." : ""));
    return;
  }
  clearError();
  document.body.classList.remove("outdated");
  render(answer);
  const failed = answer.runs.filter((r) => !r.ok);
  if (failed.length) {
    const f = failed[0];
    showError(f.error.type, f.error.message.includes(f.backend) ? f.error.message : `${f.backend}: ${f.error.message}`);
    setState("error", "Ran on memory:// only; the other backend failed (see above).");
  } else {
    setState("done", `Ran ${answer.is_main ? "the main run" : "this run"} on ${answer.runs.map((r) => r.backend).join(" and ")}.`);
  }
}

function card(measure, label, value, main) {
  const same = JSON.stringify(value) === JSON.stringify(main);
  return el("div", { class: "card" + (same ? "" : " changed"), "data-measure": measure },
    el("div", { class: "value" }, show(value)),
    el("div", { class: "label" }, label),
    el("div", { class: "main" }, same ? "as in the main run" : "main run: " + show(main)));
}

function render(answer) {
  const byName = Object.fromEntries(answer.against_main.map((m) => [m.measure, m]));
  const pick = (label) => byName[label] || { this: null, main: null };
  $("#cards").replaceChildren(
    card("model_calls", "model calls", pick("model calls").this, pick("model calls").main),
    card("posts", "posts", pick("posts").this, pick("posts").main),
    card("stale_writes_applied", "stale writes applied", pick("stale writes applied").this, pick("stale writes applied").main),
    card("final_acceptance_tick", "accepted at tick", pick("final acceptance tick").this, pick("final acceptance tick").main),
    card("newsletter_figure", "newsletter quotes (million)", pick("figure the newsletter quotes").this, pick("figure the newsletter quotes").main),
  );
  const memory = answer.runs[0];
  const verdict = el("div", { class: "card verdict " + (memory.clean ? "clean" : "broken"), "data-measure": "verdict" },
    el("div", { class: "value" }, memory.clean ? "clean" : "broken"),
    el("div", { class: "label" }, "verdict"),
    el("div", { class: "main" }, memory.clean ? "no invariant broken" : memory.broken.join(", ")));
  $("#cards").append(verdict);

  const drawings = $("#drawings");
  drawings.replaceChildren();
  for (const r of answer.runs) {
    const panel = el("figure", { class: "drawing", "data-backend": r.backend });
    const head = el("figcaption", {}, el("code", {}, r.backend), " ");
    if (r.ok) {
      head.append(el("span", { class: "badge " + (r.clean ? "clean" : "broken") }, r.clean ? "clean" : "broken"));
      panel.append(head);
      const holder = el("div", { class: "svg-holder" });
      holder.innerHTML = r.svg;     // made by our own server from escaped text
      panel.append(holder);
    } else {
      head.append(el("span", { class: "badge broken" }, "failed"));
      panel.append(head, el("p", { class: "backend-error" }, `${r.error.type}: ${r.error.message}`));
    }
    drawings.append(panel);
  }
  const agreement = $("#agreement");
  if (answer.agreement) {
    agreement.hidden = false;
    agreement.className = answer.agreement.identical ? "agree" : "disagree";
    agreement.replaceChildren(answer.agreement.identical
      ? "Identical on both backends: every count, record and trace line."
      : el("span", {}, "The backends differ: ", el("ul", {}, ...answer.agreement.differences.map((d) => el("li", {}, d)))));
  } else {
    agreement.hidden = true;
  }

  $("#against-main tbody").replaceChildren(...answer.against_main.map((m) =>
    el("tr", { class: m.same ? "" : "changed" }, el("td", {}, m.measure), el("td", {}, show(m.this)), el("td", {}, show(m.main)))));
  $("#invariants tbody").replaceChildren(...Object.entries(answer.invariants).map(([k, ok]) =>
    el("tr", { class: ok ? "" : "changed", "data-invariant": k }, el("td", {}, k.replaceAll("_", " ")), el("td", { class: ok ? "ok" : "bad" }, ok ? "holds" : "BROKEN"))));

  const n = answer.necessity;
  $("#place").textContent = "This run: " + n.place + ".";
  $("#necessity tbody").replaceChildren(
    el("tr", { class: n.removed.length === 0 ? "here" : "", "data-protection": "none" },
      el("td", {}, "none (all four on)"),
      el("td", {}, `broke ${n.protected.runs - n.protected.clean}/${n.protected.runs} runs`),
      el("td", {}, ""),
      el("td", {}, n.removed.length === 0 ? "◀ here" : "")),
    ...n.rows.map((r) => el("tr", { class: r.here ? "here" : "", "data-protection": r.protection },
      el("td", {}, r.words), el("td", {}, r.described),
      el("td", { class: r.claim ? (r.claim.holds ? "ok" : "bad") : "" },
        r.claim ? `${r.claim.holds ? "as the scenario says" : "NOT as the scenario says"}` : "not stated"),
      el("td", {}, r.here ? "◀ here" + (r.in_breaking_story === null ? "" : r.in_breaking_story ? " (where it breaks)" : " (where it does not break)") : ""))));
  $("#sweep-note").textContent = `${n.clean} of ${n.total} combinations are clean. ` +
    n.claims.filter((c) => c.must).map((c) => `${c.holds ? "Holds" : "FAILS"}: ${c.text} [${c.detail}].`).join(" ");

  $("#neighbours tbody").replaceChildren(...answer.neighbours.map((x) =>
    el("tr", { class: x.clean ? "" : "changed" }, el("td", {}, x.switch), el("td", {}, x.value),
      el("td", { class: x.clean ? "ok" : "bad" }, x.clean ? "clean" : "broken: " + x.broken.join(", ")),
      el("td", {}, x.model_calls), el("td", {}, x.posts), el("td", {}, x.stale_writes_applied), el("td", {}, show(x.newsletter_figure)))));

  $("#trace").replaceChildren(...(memory.trace || []).map((t) =>
    el("li", { class: "kind-" + t.kind }, el("span", { class: "tick" }, "t" + t.tick), " ", el("span", { class: "kind" }, t.kind), " ", t.text)));
}

async function start() {
  try {
    const response = await fetch("/api/config");
    config = await response.json();
    if (config.error) throw new Error(config.error.message);
  } catch (err) {
    showError("Unreachable", "could not load the explorer's configuration: " + err);
    setState("error", "Not loaded.");
    return;
  }
  $("#scenario").replaceChildren(...config.scenarios.map((s) => el("option", { value: s.id }, `${s.name} (${s.origin})`)));
  $("#backend").replaceChildren(...config.backends.map((b) => el("option", { value: b }, b === "memory://" ? "memory:// only" : b)));
  const loadScenario = () => {
    const sc = currentScenario();
    $("#toml").value = sc.text;
    $("#work-id").textContent = sc.work_id;
    editedToml = false;
    buildSwitches();
  };
  loadScenario();
  $("#scenario").addEventListener("change", () => { loadScenario(); run(); });
  $("#backend").addEventListener("change", () => run());
  $("#toml").addEventListener("input", () => { editedToml = true; });
  $("#form").addEventListener("submit", (ev) => { ev.preventDefault(); run(); });
  $("#main-run").addEventListener("click", () => { resetToMain(); run(); });
  $("#run-toml").addEventListener("click", () => { editedToml = true; run(true); });
  $("#reset-toml").addEventListener("click", () => { $("#toml").value = currentScenario().text; editedToml = false; run(); });
  await run();
}

start();
