// saldo's interactive API reference: renders /openapi.json (same origin) into the page and
// lets a reader send a request with a bearer token typed into the page. Plain DOM, no
// dependencies, no inline code: the page is served with a CSP that allows only 'self'.
'use strict';

(function () {
  const METHODS = ['get', 'put', 'post', 'delete', 'patch'];

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v !== undefined && v !== null) node.setAttribute(k, String(v));
    }
    for (const child of children.flat()) {
      if (child === undefined || child === null) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  // A description's Markdown, as far as the document uses it: `inline code` becomes <code>,
  // the rest stays text (never HTML: the document is data, not markup).
  function md(text) {
    const parts = String(text || '').split('`');
    if (parts.length % 2 === 0) return [text]; // an unpaired backtick: show the text as it is
    return parts.map((part, i) => (i % 2 ? el('code', {}, part) : part)).filter((p) => p !== '');
  }

  // The scheme of the operator routes, as the document's security requirements name it.
  const ADMIN_SCHEME = 'admin_token';

  // True when every way to call the operation needs the admin token (and nothing else does).
  function adminOnly(op) {
    const reqs = op.security || [];
    return reqs.length > 0 && reqs.every((r) => {
      const names = Object.keys(r);
      return names.length === 1 && names[0] === ADMIN_SCHEME;
    });
  }

  function resolve(doc, schema) {
    let s = schema || {};
    for (let i = 0; i < 8 && s.$ref; i++) {
      const name = s.$ref.split('/').pop();
      s = (doc.components && doc.components.schemas && doc.components.schemas[name]) || {};
    }
    return s;
  }

  function refName(schema) {
    return schema && schema.$ref ? schema.$ref.split('/').pop() : null;
  }

  // One line saying what values a schema allows: type, range, length, pattern, items.
  function describe(doc, schema) {
    if (!schema) return '';
    const name = refName(schema);
    const s = resolve(doc, schema);
    const parts = [];
    if (name) parts.push(name);
    if (s.oneOf || s.anyOf || s.allOf) {
      const list = s.oneOf || s.anyOf || s.allOf;
      parts.push((s.oneOf ? 'one of: ' : s.anyOf ? 'any of: ' : 'all of: ') +
        list.map((x) => describe(doc, x)).join(' | '));
    }
    const type = Array.isArray(s.type) ? s.type.join(' or ') : s.type;
    if (type && !name) parts.push(type + (s.format ? ' (' + s.format + ')' : ''));
    if (s.enum) parts.push('one of ' + s.enum.map((v) => JSON.stringify(v)).join(', '));
    if (s.minimum !== undefined || s.maximum !== undefined) {
      parts.push((s.minimum !== undefined ? s.minimum : '…') + '..=' + (s.maximum !== undefined ? s.maximum : '…'));
    }
    if (s.minLength !== undefined || s.maxLength !== undefined) {
      parts.push('length ' + (s.minLength || 0) + '..=' + (s.maxLength !== undefined ? s.maxLength : '…'));
    }
    if (s.pattern) parts.push('pattern ' + s.pattern);
    if (s.items) {
      let n = '';
      if (s.minItems !== undefined || s.maxItems !== undefined) {
        n = ' (' + (s.minItems || 0) + '..=' + (s.maxItems !== undefined ? s.maxItems : '…') + ' items)';
      }
      parts.push('array of ' + describe(doc, s.items) + n);
    }
    return parts.join(', ');
  }

  function propertiesTable(doc, schema) {
    const s = resolve(doc, schema);
    if (!s.properties) return el('p', { class: 'constraint' }, describe(doc, schema));
    const required = new Set(s.required || []);
    return el('table', {},
      el('tr', {}, el('th', {}, 'field'), el('th', {}, 'allowed'), el('th', {}, 'description')),
      Object.entries(s.properties).map(([k, v]) => el('tr', {},
        el('td', {}, el('code', {}, k), required.has(k) ? ' *' : ''),
        el('td', { class: 'constraint' }, describe(doc, v)),
        el('td', {}, md(resolve(doc, v).description || v.description || '')))));
  }

  // A starting body for "Try it": the smallest values the schema allows.
  function sample(doc, schema, depth) {
    const s = resolve(doc, schema);
    if (depth > 4) return null;
    if (s.oneOf) return sample(doc, s.oneOf[s.oneOf.length - 1], depth + 1);
    const type = Array.isArray(s.type) ? s.type.find((t) => t !== 'null') : s.type;
    if (s.enum) return s.enum[0];
    if (type === 'object' || s.properties) {
      const out = {};
      for (const k of s.required || Object.keys(s.properties || {})) {
        out[k] = sample(doc, s.properties[k], depth + 1);
      }
      return out;
    }
    if (type === 'array') return [sample(doc, s.items, depth + 1)];
    if (type === 'integer' || type === 'number') return s.minimum !== undefined ? Math.max(s.minimum, 1) : 1;
    if (type === 'boolean') return false;
    if (type === 'string') return 'example-1';
    return null;
  }

  function tryIt(doc, method, path, op) {
    const params = op.parameters || [];
    const inputs = params.map((p) => ({ p, input: el('input', { name: p.name, placeholder: describe(doc, p.schema) }) }));
    const media = op.requestBody && op.requestBody.content && op.requestBody.content['application/json'];
    const body = media ? el('textarea', { spellcheck: 'false' }, JSON.stringify(sample(doc, media.schema, 0), null, 2)) : null;
    const out = el('pre', { class: 'muted' }, 'No request sent yet.');
    const button = el('button', { type: 'button' }, 'Send');
    button.addEventListener('click', async () => {
      let url = path;
      const query = new URLSearchParams();
      for (const { p, input } of inputs) {
        if (input.value === '') continue;
        if (p.in === 'path') url = url.replace('{' + p.name + '}', encodeURIComponent(input.value));
        else if (p.in === 'query') query.append(p.name, input.value);
      }
      if ([...query].length) url += '?' + query.toString();
      const headers = {};
      const token = document.getElementById('token').value.trim();
      if (token) headers.Authorization = 'Bearer ' + token;
      const init = { method: method.toUpperCase(), headers };
      if (body) { headers['Content-Type'] = 'application/json'; init.body = body.value; }
      out.className = 'muted';
      out.textContent = init.method + ' ' + url + ' …';
      try {
        const r = await fetch(url, init);
        const text = await r.text();
        let shown = text;
        try { shown = JSON.stringify(JSON.parse(text), null, 2); } catch (_) { /* not JSON */ }
        out.className = 'status-' + String(r.status)[0];
        out.textContent = r.status + ' ' + r.statusText + '\n' + shown;
      } catch (e) {
        out.className = 'status-5';
        out.textContent = 'request failed: ' + e;
      }
    });
    return el('div', { class: 'try' }, el('strong', {}, 'Try it'),
      inputs.map(({ p, input }) => el('p', {}, el('label', {}, el('code', {}, p.name), ' (' + p.in + ') ', input))),
      body, el('p', {}, button), out);
  }

  function operation(doc, method, path, op) {
    const key = method.toUpperCase() + ' ' + path;
    const admin = adminOnly(op);
    const security = admin
      ? 'Admin token only (Bearer ' + ADMIN_SCHEME + ')'
      : op.security && op.security.length
        ? 'Bearer token: ' + op.security.map((r) => Object.keys(r).join(' + ')).join(' or ')
        : 'No token needed';
    const params = op.parameters || [];
    const media = op.requestBody && op.requestBody.content && op.requestBody.content['application/json'];
    return el('details', { class: 'op', 'data-operation': key, id: op.operationId ? 'op-' + op.operationId : null },
      el('summary', {},
        el('span', { class: 'method m-' + method }, method),
        el('span', { class: 'path' }, path),
        el('span', { class: 'summary' }, md(op.summary)),
        admin ? el('span', { class: 'badge admin-only', title: 'Needs the admin token' }, 'admin') : null),
      el('div', { class: 'op-body' },
        op.description ? el('p', {}, md(op.description)) : null,
        el('p', { class: 'muted' }, security),
        params.length ? [el('h4', {}, 'Parameters'), el('table', {},
          el('tr', {}, el('th', {}, 'name'), el('th', {}, 'in'), el('th', {}, 'allowed'), el('th', {}, 'description')),
          params.map((p) => el('tr', {},
            el('td', {}, el('code', {}, p.name), p.required ? ' *' : ''),
            el('td', {}, p.in),
            el('td', { class: 'constraint' }, describe(doc, p.schema)),
            el('td', {}, md(p.description || (p.schema && p.schema.description) || '')))))] : null,
        media ? [el('h4', {}, 'Body (application/json)'), propertiesTable(doc, media.schema)] : null,
        el('h4', {}, 'Responses'),
        el('table', {}, Object.entries(op.responses || {}).map(([status, r]) => {
          const content = r.content || {};
          const types = Object.keys(content);
          return el('tr', {},
            el('td', { class: 'status-' + status[0] }, status),
            el('td', {}, md(r.description)),
            el('td', { class: 'constraint' }, types.map((t) => t + (content[t].schema ? ': ' + describe(doc, content[t].schema) : '')).join('; ')));
        })),
        tryIt(doc, method, path, op)));
  }

  function render(doc) {
    const info = doc.info || {};
    document.getElementById('title').textContent = (info.title || 'API') + ' ' + (info.version || '');
    const description = document.getElementById('description');
    description.textContent = '';
    description.append(...md(info.description));
    const root = document.getElementById('reference');
    root.textContent = '';
    const tags = (doc.tags || []).map((t) => t.name);
    const byTag = new Map(tags.map((t) => [t, []]));
    for (const [path, item] of Object.entries(doc.paths || {})) {
      for (const method of METHODS) {
        const op = item[method];
        if (!op) continue;
        const tag = (op.tags && op.tags[0]) || 'other';
        if (!byTag.has(tag)) byTag.set(tag, []);
        byTag.get(tag).push(operation(doc, method, path, op));
      }
    }
    const described = new Map((doc.tags || []).map((t) => [t.name, t.description]));
    for (const [tag, ops] of byTag) {
      if (!ops.length) continue;
      root.append(el('section', { id: 'tag-' + tag },
        el('h2', {}, tag), described.get(tag) ? el('p', { class: 'muted' }, md(described.get(tag))) : null, ops));
    }
  }

  async function load() {
    const root = document.getElementById('reference');
    try {
      const r = await fetch('/openapi.json', { headers: { Accept: 'application/json' } });
      if (!r.ok) throw new Error('HTTP ' + r.status);
      render(await r.json());
    } catch (e) {
      root.textContent = 'Could not load /openapi.json: ' + e;
    }
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', load);
  else load();
})();
