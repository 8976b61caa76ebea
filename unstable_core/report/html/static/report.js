// unstable's report page: draws the data block (#report-data) as sections, charts and a game browser.
// Everything read from the data is set with textContent: a game's text is data, never markup.
"use strict";
(function () {
  const DATA = JSON.parse(document.getElementById("report-data").textContent);
  const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b"];
  const REF_COLORS = ["#555555", "#b8860b", "#2e8b57", "#8b008b", "#cd5c5c"];

  function el(tag, attrs, text) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function table(spec) {
    const long = spec.rows.length > 20;  // a long table starts folded: its title says how long
    const wrap = el(long ? "details" : "div", { class: "table-wrap" });
    if (long) wrap.appendChild(el("summary", {}, `${spec.title} (${spec.rows.length} rows)`));
    else if (spec.title) wrap.appendChild(el("h3", {}, spec.title));
    const t = el("table");
    const head = el("tr");
    spec.columns.forEach((c) => head.appendChild(el("th", {}, c)));
    t.appendChild(el("thead")).appendChild(head);
    const body = t.appendChild(el("tbody"));
    spec.rows.forEach((row) => {
      const tr = body.appendChild(el("tr"));
      row.forEach((c) => tr.appendChild(el("td", {}, c)));
    });
    if (!spec.rows.length) body.appendChild(el("tr")).appendChild(el("td", { colspan: spec.columns.length }, "none"));
    wrap.appendChild(t);
    return wrap;
  }

  function alpha(hex, a) {
    const n = parseInt(hex.slice(1), 16);
    return `rgba(${(n >> 16) & 255},${(n >> 8) & 255},${n & 255},${a})`;
  }

  function chartDatasets(spec) {
    const sets = [];
    const xs = spec.series.flatMap((s) => s.x);
    const xmin = Math.min(...xs), xmax = Math.max(...xs);
    spec.series.forEach((s, i) => {
      const color = COLORS[i % COLORS.length];
      const pts = (ys) => s.x.map((x, j) => ({ x: x, y: ys[j] }));
      if (s.lo && s.hi) {
        sets.push({ label: "", data: pts(s.lo), borderWidth: 0, pointRadius: 0, fill: false, band: true });
        sets.push({ label: "", data: pts(s.hi), borderWidth: 0, pointRadius: 0, backgroundColor: alpha(color, 0.2),
                    fill: "-1", band: true });
      }
      sets.push({ label: s.label + (s.lo ? ` (band: ${s.band || "95%"})` : ""), data: pts(s.y), borderColor: color,
                  backgroundColor: color, pointRadius: s.x.length > 60 ? 0 : 3, fill: false });
    });
    spec.refs.forEach((r, i) => {
      sets.push({ label: r.label + " = " + Number(r.y).toFixed(3), data: [{ x: xmin, y: r.y }, { x: xmax, y: r.y }],
                  borderColor: REF_COLORS[i % REF_COLORS.length], borderDash: [6, 4], pointRadius: 0, fill: false });
    });
    return sets;
  }

  function drawChart(spec, parent) {
    const box = parent.appendChild(el("div", { class: "chart" }));
    box.appendChild(el("h3", {}, spec.title));
    const canvas = box.appendChild(el("div", { class: "canvas-box" })).appendChild(el("canvas"));
    const y = { title: { display: true, text: spec.ylabel } };
    if (spec.y) { y.min = spec.y[0]; y.max = spec.y[1]; }
    new Chart(canvas, {
      type: "line",
      data: { datasets: chartDatasets(spec) },
      options: {
        animation: false, responsive: true, maintainAspectRatio: false, parsing: true,
        scales: { x: { type: "linear", title: { display: true, text: spec.xlabel }, ticks: { precision: 0 } }, y: y },
        plugins: {
          legend: { labels: { boxWidth: 14, font: { size: 11 }, filter: (item, d) => !d.datasets[item.datasetIndex].band } },
          tooltip: { filter: (item) => !item.dataset.band },
        },
      },
    });
  }

  function section(spec) {
    const s = el("section", { id: "section-" + spec.id });
    s.appendChild(el("h2", {}, spec.title));
    const charts = spec.charts || [], tables = spec.tables || [];
    if (!charts.length && !tables.length && !spec.text) s.appendChild(el("p", { class: "muted" }, "nothing recorded"));
    if (charts.length) {
      const grid = s.appendChild(el("div", { class: "charts" }));
      charts.forEach((c) => drawChart(c, grid));
    }
    tables.forEach((t) => s.appendChild(table(t)));
    if (spec.text) {
      const d = s.appendChild(el("details"));
      d.appendChild(el("summary", {}, "config.toml"));
      d.appendChild(el("pre", { class: "config" }, spec.text));
    }
    return s;
  }

  // ---- the game browser ----
  const G = DATA.games;
  const F = Object.fromEntries(G.fields.map((f, i) => [f, i]));
  const FILTERS = ["checkpoint", "opponent", "env", "outcome", "kind"];
  const chunks = {};
  let shown = 200, current = null;

  async function inflate(i) {
    if (!chunks[i]) {
      chunks[i] = (async () => {
        const bin = Uint8Array.from(atob(G.chunks[i]), (c) => c.charCodeAt(0));
        const stream = new Blob([bin]).stream().pipeThrough(new DecompressionStream("gzip"));
        return JSON.parse(await new Response(stream).text());
      })();
    }
    return chunks[i];
  }

  function filtered() {
    const want = FILTERS.map((f) => [F[f], document.getElementById("f-" + f).value]);
    return G.rows.filter((r) => want.every(([i, v]) => v === "" || String(r[i]) === v));
  }

  function listGames() {
    const rows = filtered();
    const body = document.getElementById("game-rows");
    body.replaceChildren();
    rows.slice(0, shown).forEach((r) => {
      const tr = body.appendChild(el("tr", { class: "game-row", "data-n": r[F.n] }));
      ["game", "env", "checkpoint", "opponent", "outcome", "turns", "kind"].forEach((f) => tr.appendChild(el("td", {}, r[F[f]])));
      tr.addEventListener("click", () => openGame(r[F.n]));
    });
    document.getElementById("game-count").textContent = `${Math.min(shown, rows.length)} of ${rows.length} games shown (${G.rows.length} in all)`;
    document.getElementById("more-games").hidden = rows.length <= shown;
  }

  function num(v, digits) {
    return v === null || v === undefined ? "-" : Number(v).toFixed(digits);
  }

  function legalTable(turn) {
    if (!turn.legal) return el("p", { class: "muted" }, "legal answers: not known for this game");
    const rows = turn.legal.moves.map((m, i) => [m, i === turn.legal.played ? "played" : "",
      turn.legal.probs ? num(turn.legal.probs[i], 3) : "-"]);
    const box = el("div");
    box.appendChild(table({ title: "legal answers", columns: ["answer", "", "probability"], rows: rows }));
    const note = turn.legal.probs ? turn.legal.source + "; the rest of the probability goes to answers that are not legal" : G.legal_note;
    box.appendChild(el("p", { class: "muted legal-note" }, "probabilities: " + note));
    return box;
  }

  function showTurn(k) {
    const game = current.game, turn = game.turns[k];
    current.k = k;
    document.getElementById("turn-pos").textContent = `turn ${k + 1} of ${game.turns.length}`;
    document.getElementById("turn-prev").disabled = k === 0;
    document.getElementById("turn-next").disabled = k >= game.turns.length - 1;
    const box = document.getElementById("turn");
    box.replaceChildren();
    if (!turn) { box.appendChild(el("p", { class: "muted" }, "this game has no turn recorded")); return; }
    box.appendChild(el("h4", {}, `seat ${turn.pid} (${turn.model}, policy version ${turn.version}), turn ${turn.turn}`));
    box.appendChild(el("div", { class: "label" }, "observation (the prompt)"));
    box.appendChild(el("pre", { class: "obs" }, turn.obs));
    box.appendChild(el("div", { class: "label" }, "answer"));
    box.appendChild(el("pre", { class: "answer" }, turn.answer));
    const lp = turn.logprob === null ? "-" : `${num(turn.logprob, 3)} over ${turn.tokens} tokens (${num(turn.logprob / Math.max(1, turn.tokens), 3)} per token)`;
    const adv = turn.advantage === null || turn.advantage === undefined
      ? "not recorded (the sampling transforms make it per batch; the reward is what they start from)" : num(turn.advantage, 3);
    box.appendChild(table({ title: "", columns: ["reward", "final reward", "shaping", "advantage", "sampled log-prob", "invalid move", "formatted", "finish"],
      rows: [[num(turn.reward, 3), num(turn.final_reward, 3), num(turn.shaping, 3), adv, lp, String(turn.invalid), String(turn.format_ok), turn.finish || "-"]] }));
    box.appendChild(legalTable(turn));
  }

  async function openGame(n) {
    const row = G.rows[n];
    const replay = document.getElementById("replay");
    replay.hidden = false;
    document.getElementById("replay-title").textContent =
      `game ${row[F.game]}: ${row[F.env]}, ${row[F.checkpoint]} vs ${row[F.opponent]}: ${row[F.outcome]}`;
    if (typeof DecompressionStream === "undefined") {
      document.getElementById("replay-info").textContent =
        "This browser cannot open the games (they are gzip-compressed): use Chrome 80, Firefox 113, Safari 16.4 or newer.";
      return;
    }
    const game = (await inflate(Math.floor(n / G.chunk)))[n % G.chunk];
    document.getElementById("replay-info").textContent =
      `seats ${JSON.stringify(game.models)}, final rewards ${JSON.stringify(game.final_rewards)}` +
      (game.reason ? `; ${game.reason}` : "") + (game.error ? `; error: ${game.error}` : "");
    current = { n: n, game: game, k: 0 };
    showTurn(0);
    replay.scrollIntoView();
  }

  function gameBrowser() {
    const s = el("section", { id: "section-games" });
    s.appendChild(el("h2", {}, "Games"));
    const bar = s.appendChild(el("div", { class: "filters" }));
    FILTERS.forEach((f) => {
      const label = bar.appendChild(el("label", {}, f + " "));
      const sel = label.appendChild(el("select", { id: "f-" + f }));
      sel.appendChild(el("option", { value: "" }, "all"));
      [...new Set(G.rows.map((r) => String(r[F[f]])))].sort((a, b) => a.localeCompare(b, undefined, { numeric: true })).forEach((v) => sel.appendChild(el("option", { value: v }, v)));
      sel.addEventListener("change", () => { shown = 200; listGames(); });
    });
    s.appendChild(el("p", { id: "game-count", class: "muted" }));
    const t = el("table", { id: "game-list" });
    const head = el("tr");
    ["game", "env", "checkpoint", "opponent", "outcome", "turns", "kind"].forEach((c) => head.appendChild(el("th", {}, c)));
    t.appendChild(el("thead")).appendChild(head);
    t.appendChild(el("tbody", { id: "game-rows" }));
    s.appendChild(el("div", { class: "table-wrap games" })).appendChild(t);
    const more = s.appendChild(el("button", { id: "more-games" }, "show more games"));
    more.addEventListener("click", () => { shown += 500; listGames(); });
    const replay = s.appendChild(el("div", { id: "replay", hidden: "" }));
    replay.appendChild(el("h3", { id: "replay-title" }));
    replay.appendChild(el("p", { id: "replay-info", class: "muted" }));
    const nav = replay.appendChild(el("div", { class: "nav" }));
    nav.appendChild(el("button", { id: "turn-prev" }, "previous turn")).addEventListener("click", () => showTurn(current.k - 1));
    nav.appendChild(el("span", { id: "turn-pos" }));
    nav.appendChild(el("button", { id: "turn-next" }, "next turn")).addEventListener("click", () => showTurn(current.k + 1));
    replay.appendChild(el("div", { id: "turn" }));
    return s;
  }

  function header() {
    const h = el("header");
    h.appendChild(el("h1", {}, `unstable report: ${DATA.title}`));
    h.appendChild(el("p", { id: "state" }, `${DATA.kind} · state: ${DATA.state} · written ${DATA.written}`));
    DATA.notes.forEach((n) => h.appendChild(el("p", { class: "note" }, n)));
    if (DATA.verdict) h.appendChild(el("p", { id: "verdict", class: "verdict " + DATA.verdict.status.replace(/ /g, "-") }, "result: " + DATA.verdict.sentence));
    const facts = h.appendChild(el("p", { class: "muted" }));
    facts.textContent = DATA.facts.map((f) => f[0] + ": " + f[1]).join(" · ");
    const nav = h.appendChild(el("nav"));
    [...DATA.sections, { id: "games", title: "Games" }].forEach((s) => nav.appendChild(el("a", { href: "#section-" + s.id }, s.title)));
    return h;
  }

  const app = document.getElementById("app");
  app.replaceChildren(header());
  DATA.sections.forEach((s) => app.appendChild(section(s)));
  app.appendChild(gameBrowser());
  listGames();
  document.body.setAttribute("data-ready-ms", String(Math.round(performance.now())));
  document.body.setAttribute("data-ready", "1");
})();
