// rvs dashboard: renders the `state` events of /api/v1/events (see
// crates/daemon/src/dash/mod.rs for their shape). Plain DOM, no framework,
// nothing fetched but this origin's own routes. Strings from the daemon are
// only ever set as text, never parsed as HTML.
'use strict';

(() => {
  const POINTS = 60; // sparkline history per series
  const TOKEN_KEY = 'rvs-api-token';
  const PROTO = { 6: 'tcp', 17: 'udp', 132: 'sctp' };
  const series = new Map(); // series key -> last POINTS values
  const cards = new Map(); // service id -> { card, rows: Map(rs name -> row) }
  let lastPlane = null;
  let lastPlaneAt = 0;
  let lastEventAt = 0;

  const $ = (id) => document.getElementById(id);

  function el(tag, props, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (k === 'class') e.className = v;
      else if (k === 'text') e.textContent = v;
      else if (k.startsWith('data-')) e.setAttribute(k, v);
      else e[k] = v;
    }
    for (const c of children) e.append(c);
    return e;
  }

  // --- identifiers, as the REST API names things -------------------------

  function host(addr) {
    return addr.includes(':') ? `[${addr}]` : addr;
  }

  function serviceId(key) {
    if (key.Addr) return `${PROTO[key.Addr.protocol] || key.Addr.protocol}-${key.Addr.addr}-${key.Addr.port}`;
    if (key.Fwmark) return `fwm-${key.Fwmark.mark}`;
    return JSON.stringify(key);
  }

  // The health checkers' name of a virtual server (rvs-check's vs_name).
  function checkName(key) {
    if (key.Addr) {
      const p = (PROTO[key.Addr.protocol] || String(key.Addr.protocol)).toUpperCase();
      return `${p} ${host(key.Addr.addr)}:${key.Addr.port}`;
    }
    if (key.Fwmark) return `FWM ${key.Fwmark.mark}`;
    return '';
  }

  function serviceTitle(key) {
    if (key.Addr) return checkName(key);
    if (key.Fwmark) return `FWM ${key.Fwmark.mark}${key.Fwmark.ipv6 ? ' IPv6' : ''}`;
    return JSON.stringify(key);
  }

  const rsName = (d) => `${host(d.addr)}:${d.port}`;
  const rsId = (d) => `${d.addr}-${d.port}`;

  // --- numbers and sparklines ------------------------------------------

  function human(n, unit) {
    const steps = ['', 'k', 'M', 'G', 'T'];
    let i = 0;
    while (Math.abs(n) >= 1000 && i < steps.length - 1) { n /= 1000; i += 1; }
    const s = i === 0 ? String(Math.round(n)) : n.toFixed(1);
    return `${s}${steps[i]}${unit || ''}`;
  }

  function record(key, value) {
    let a = series.get(key);
    if (!a) { a = []; series.set(key, a); }
    a.push(value);
    if (a.length > POINTS) a.shift();
    return a;
  }

  const SVG = 'http://www.w3.org/2000/svg';

  function spark(values, kind) {
    const svg = document.createElementNS(SVG, 'svg');
    svg.setAttribute('class', `spark ${kind || ''}`);
    svg.setAttribute('viewBox', '0 0 120 24');
    svg.setAttribute('preserveAspectRatio', 'none');
    const max = Math.max(1, ...values);
    const step = 120 / (POINTS - 1);
    const x0 = 120 - step * (values.length - 1);
    const pts = values.map((v, i) => `${(x0 + i * step).toFixed(1)},${(23 - (v / max) * 22).toFixed(1)}`);
    const line = document.createElementNS(SVG, 'polyline');
    line.setAttribute('points', pts.join(' '));
    const title = document.createElementNS(SVG, 'title');
    title.textContent = `max ${human(max)} over the last ${values.length} events`;
    svg.append(title, line);
    return svg;
  }

  function rateCell(td, key, value, unit, kind) {
    const values = record(key, value);
    td.replaceChildren(el('span', { text: human(value, unit) }), ' ', spark(values, kind));
  }

  // --- errors -------------------------------------------------------------

  function showError(text) {
    const box = $('errors');
    box.hidden = false;
    box.append(el('div', { text: `${new Date().toLocaleTimeString()} ${text}` }));
    while (box.childElementCount > 5) box.firstElementChild.remove();
  }

  function clearErrors() {
    $('errors').replaceChildren();
    $('errors').hidden = true;
  }

  // --- writes, through the REST API -------------------------------------

  function token() {
    return sessionStorage.getItem(TOKEN_KEY) || '';
  }

  async function write(method, path, body, what) {
    try {
      const headers = { Authorization: `Bearer ${token()}` };
      if (body !== undefined) headers['Content-Type'] = 'application/json';
      const r = await fetch(path, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        cache: 'no-store',
      });
      if (!r.ok) {
        const text = await r.text();
        let message = text.trim();
        try {
          const j = JSON.parse(text);
          message = j.message || j.error || message;
          if (j.field) message += ` (field ${j.field})`;
          if (j.code) message = `${j.code}: ${message}`;
        } catch (_) { /* not JSON: the text as it came */ }
        showError(`${what}: HTTP ${r.status}${message ? ` — ${message}` : ''}`);
        return false;
      }
      return true;
    } catch (e) {
      showError(`${what}: ${e.message || e}`);
      return false;
    }
  }

  function realPath(svc, rs) {
    return `/api/v1/services/${encodeURIComponent(svc)}/reals/${encodeURIComponent(rs)}`;
  }

  function actions(svc, rs, name) {
    const weight = el('input', { type: 'number', min: 0, max: 65535, placeholder: 'weight', 'data-role': 'weight' });
    const drain = el('button', { type: 'button', text: 'Drain', 'data-action': 'drain' });
    const undrain = el('button', { type: 'button', text: 'Undrain', 'data-action': 'undrain' });
    const set = el('button', { type: 'button', text: 'Set', 'data-action': 'weight' });
    drain.addEventListener('click', () => write('POST', `${realPath(svc, rs)}/drain`, undefined, `drain ${name}`));
    undrain.addEventListener('click', () => write('POST', `${realPath(svc, rs)}/undrain`, undefined, `undrain ${name}`));
    set.addEventListener('click', () => {
      const w = Number(weight.value);
      if (weight.value === '' || !Number.isInteger(w) || w < 0) {
        showError(`weight ${name}: a whole number of 0 or more, not "${weight.value}"`);
        return;
      }
      write('PATCH', realPath(svc, rs), { weight: w }, `weight ${name}`).then((ok) => { if (ok) weight.value = ''; });
    });
    return el('div', { class: 'actions' }, drain, undrain, weight, set);
  }

  // --- services -----------------------------------------------------------

  function card(svc) {
    let c = cards.get(svc);
    if (c) return c;
    const head = el('div', { class: 'service-head' });
    const tbody = el('tbody');
    const table = el('table', {},
      el('thead', {}, el('tr', {},
        el('th', { text: 'real server' }), el('th', { class: 'num', text: 'weight' }),
        el('th', { text: 'health' }), el('th', { class: 'num', text: 'active' }),
        el('th', { class: 'num', text: 'inactive' }), el('th', { text: 'conn/s' }),
        el('th', { text: 'bytes/s' }), el('th', { class: 'actions-head', text: 'change' }))),
      tbody);
    const e = el('div', { class: 'service', 'data-service': svc }, head, table);
    c = { e, head, tbody, rows: new Map() };
    cards.set(svc, c);
    return c;
  }

  function row(c, svc, name, id) {
    let r = c.rows.get(name);
    if (r) return r;
    const cells = {};
    const tr = el('tr', { 'data-rs': name, 'data-rs-id': id });
    for (const k of ['addr', 'weight', 'health', 'active', 'inactive', 'cps', 'bps', 'act']) {
      const cls = ['weight', 'active', 'inactive'].includes(k) ? `num ${k}` : k;
      cells[k] = el('td', { class: k === 'act' ? 'actions-cell' : cls });
      tr.append(cells[k]);
    }
    cells.addr.textContent = name;
    cells.act.append(actions(svc, id, name));
    r = { tr, cells };
    c.rows.set(name, r);
    return r;
  }

  // The checkers' view of a service: by name, else a group holding it.
  function checksOf(checks, key, dests) {
    const name = checkName(key);
    let vs = checks.find((v) => v.name === name);
    if (!vs && dests.length) {
      const want = new Set(dests.map(rsName));
      vs = checks.find((v) => v.name.startsWith('group ') && v.reals.some((r) => want.has(r.name)));
    }
    return vs;
  }

  function renderServices(state, checks) {
    const services = state.services || [];
    $('no-services').hidden = services.length > 0;
    const seen = new Set();
    const root = $('services');
    for (const s of services) {
      const svc = serviceId(s.key);
      seen.add(svc);
      const c = card(svc);
      if (c.e.parentNode !== root) root.append(c.e);
      const vs = checksOf(checks, s.key, s.dests || []);
      const health = new Map((vs ? vs.reals : []).map((r) => [r.name, r]));
      c.e.classList.toggle('noquorum', !!vs && !vs.quorum_up);
      const rates = s.rates || {};
      const cpsCell = el('span');
      const bpsCell = el('span');
      rateCell(cpsCell, `s:${svc}:cps`, rates.cps || 0, ' conn/s');
      rateCell(bpsCell, `s:${svc}:bps`, (rates.inbps || 0) + (rates.outbps || 0), 'B/s', 'bytes');
      const facts = [s.scheduler];
      if (s.persistent != null) facts.push(`persistent ${s.persistent} s`);
      if (s.owner) facts.push(`from ${s.owner}`);
      if (vs) facts.push(vs.quorum_up ? 'quorum up' : 'QUORUM DOWN');
      c.head.replaceChildren(
        el('h3', { text: serviceTitle(s.key) }),
        el('span', { class: 'muted', text: facts.join(' · ') }),
        el('span', { class: 'rates' }, cpsCell, bpsCell));
      const rowsSeen = new Set();
      for (const d of s.dests || []) {
        const name = rsName(d);
        rowsSeen.add(name);
        const r = row(c, svc, name, rsId(d));
        const h = health.get(name);
        const down = !!h && !h.alive;
        r.tr.classList.toggle('down', down);
        r.tr.classList.toggle('up', !!h && h.alive);
        r.tr.classList.toggle('drained', !down && d.weight === 0);
        r.cells.weight.textContent = String(d.weight);
        r.cells.health.textContent = h ? (h.alive ? 'up' : 'down') : '—';
        r.cells.health.title = h ? (h.down_reason || h.checkers.map((k) => k.label).join(', ')) : 'no health checker';
        r.cells.active.textContent = String(d.active);
        r.cells.inactive.textContent = String(d.inactive);
        const dr = d.rates || {};
        rateCell(r.cells.cps, `r:${svc}:${name}:cps`, dr.cps || 0, '');
        rateCell(r.cells.bps, `r:${svc}:${name}:bps`, (dr.inbps || 0) + (dr.outbps || 0), 'B', 'bytes');
        if (r.tr.parentNode !== c.tbody) c.tbody.append(r.tr);
      }
      // Real servers the checkers took out of the table (no inhibit_on_failure).
      for (const h of vs ? vs.reals : []) {
        if (rowsSeen.has(h.name)) continue;
        rowsSeen.add(h.name);
        const m = /^\[?(.*?)\]?:(\d+)$/.exec(h.name);
        const r = row(c, svc, h.name, m ? `${m[1]}-${m[2]}` : h.name);
        r.tr.classList.toggle('down', !h.alive);
        r.tr.classList.toggle('up', h.alive);
        r.tr.classList.remove('drained');
        r.cells.weight.textContent = '—';
        r.cells.weight.title = `out of the table (configured weight ${h.configured_weight})`;
        r.cells.health.textContent = h.alive ? 'up' : 'down';
        r.cells.health.title = h.down_reason || '';
        r.cells.active.textContent = '—';
        r.cells.inactive.textContent = '—';
        rateCell(r.cells.cps, `r:${svc}:${h.name}:cps`, 0, '');
        rateCell(r.cells.bps, `r:${svc}:${h.name}:bps`, 0, 'B', 'bytes');
        if (r.tr.parentNode !== c.tbody) c.tbody.append(r.tr);
      }
      for (const [name, r] of c.rows) {
        if (!rowsSeen.has(name)) { r.tr.remove(); c.rows.delete(name); }
      }
    }
    for (const [svc, c] of cards) {
      if (!seen.has(svc)) { c.e.remove(); cards.delete(svc); }
    }
  }

  // --- the other panels ---------------------------------------------------

  function fill(tableId, rows) {
    const tbody = $(tableId).tBodies[0];
    tbody.replaceChildren(...rows.map((cells) => el('tr', {}, ...cells.map((c) =>
      (c instanceof Node ? el('td', {}, c) : el('td', { text: String(c) }))))));
  }

  function renderVrrp(vrrp) {
    fill('vrrp', vrrp.length ? vrrp.map((v) => [el('span', { text: v.instance }),
      el('span', { class: `state-${v.state}`, text: v.state }), v.priority]) : [['none running', '', '']]);
  }

  function renderAnnounce(a) {
    const note = $('announce-note');
    if (!a || !a.enabled) {
      note.textContent = 'VIPs are not announced (no announce settings).';
      fill('vips', []);
      return;
    }
    note.textContent = `table ${a.table}, proto ${a.proto}, director ${a.director}${a.error ? ` — error: ${a.error}` : ''}`;
    fill('vips', (a.vips || []).map((v) => [v.vip,
      el('span', { class: v.state === 'announced' ? 'state-MASTER' : 'state-FAULT', text: v.state }),
      v.route ? 'in table' : 'absent', v.reason || '']));
  }

  function renderSync(daemons, sync) {
    fill('sync', daemons.length ? daemons.map((d) => [d.master ? 'master' : 'backup', d.mcast_ifn,
      d.syncid, d.mcast_group ? `${d.mcast_group}:${d.mcast_port}` : '']) : [['none running', '', '', '']]);
    const lag = $('sync-lag');
    const parts = [];
    const t = (sync && sync.traffic) || {};
    if (sync && sync.master && t.master) {
      parts.push(`master: ${human(t.master[0])} datagrams sent${t.master[2] ? `, ${human(t.master[2])} send errors` : ''}`);
    }
    if (sync && sync.backup) {
      const heard = sync.heard_ms_ago == null ? 'peers not heard yet' : `peers last heard ${(sync.heard_ms_ago / 1000).toFixed(1)} s ago`;
      const got = t.backup ? `, ${human(t.backup[3])} datagrams received` : '';
      parts.push(`backup: ${heard}; ${sync.received} entries from peers${got}${sync.warming ? '; still gathering their tables' : ''}`);
    }
    lag.textContent = parts.join(' — ');
  }

  function renderPlane(plane) {
    const now = Date.now();
    const dt = lastPlane ? (now - lastPlaneAt) / 1000 : 0;
    const names = Object.keys(plane).sort();
    const bad = /(refused|drop|shed|exhausted|errors|failures|rejected|noroom|unknown|guarded)/;
    fill('plane', names.length ? names.map((n) => {
      const v = plane[n];
      const rate = lastPlane && dt > 0 && n.endsWith('_total') && n in lastPlane ? (v - lastPlane[n]) / dt : null;
      return [el('code', { text: n }), el('span', { class: v > 0 && bad.test(n) ? 'nonzero' : '', text: human(v) }),
        rate == null ? '' : human(rate)];
    }) : [['this data plane keeps no counters of its own', '', '']]);
    lastPlane = plane;
    lastPlaneAt = now;
  }

  function render(ev) {
    lastEventAt = Date.now();
    setStatus(true);
    $('generation').textContent = `generation ${ev.generation}`;
    const state = ev.state || {};
    const checks = Array.isArray(ev.checks) ? ev.checks : [];
    renderServices(state, checks);
    renderVrrp(ev.vrrp || []);
    renderAnnounce(state.announce);
    renderSync(state.daemons || [], ev.sync);
    renderPlane(ev.plane || {});
  }

  // --- the stream -----------------------------------------------------------

  function setStatus(live) {
    const s = $('status');
    s.textContent = live ? 'live' : 'reconnecting…';
    s.className = `status ${live ? 'live' : 'stale'}`;
  }

  function connect() {
    const es = new EventSource('/api/v1/events');
    es.addEventListener('state', (e) => {
      try {
        render(JSON.parse(e.data));
      } catch (err) {
        showError(`bad event: ${err.message || err}`);
      }
    });
    es.onerror = () => {
      setStatus(false);
      // A refused stream (503: too many open) is not retried by the
      // browser itself.
      if (es.readyState === EventSource.CLOSED) setTimeout(connect, 5000);
    };
  }

  // Events come at least every second: three without one is a stale page.
  setInterval(() => { if (Date.now() - lastEventAt > 3000) setStatus(false); }, 1000);

  // --- the token ----------------------------------------------------------

  function applyToken() {
    document.body.classList.toggle('authed', token() !== '');
    $('token').value = '';
    $('token').placeholder = token() ? 'token set (this tab)' : 'bearer token for writes';
  }

  document.addEventListener('DOMContentLoaded', () => {
    $('auth').addEventListener('submit', (e) => {
      e.preventDefault();
      const t = $('token').value.trim();
      if (t) sessionStorage.setItem(TOKEN_KEY, t);
      applyToken();
    });
    $('token-forget').addEventListener('click', () => {
      sessionStorage.removeItem(TOKEN_KEY);
      applyToken();
    });
    $('errors').addEventListener('click', clearErrors);
    $('errors').title = 'click to dismiss';
    applyToken();
    connect();
  });
})();
