// Renders /docs without a browser, for `contract::the_docs_page_renders_code_and_marks_admin_routes`:
// runs the served docs.js against the served /openapi.json with a minimal DOM (elements, text
// nodes, attributes) and a fetch that answers the document, then prints what the page shows as
// JSON. Usage: node docs_page.js <docs.js> <openapi.json>
'use strict';
const fs = require('fs');
const [script, documentPath] = process.argv.slice(2);

class Node {}
class Text extends Node {
  constructor(text) { super(); this.text = String(text); }
  get textContent() { return this.text; }
}
class Element extends Node {
  constructor(tag) { super(); this.tag = tag; this.attrs = {}; this.children = []; this.value = ''; }
  setAttribute(k, v) { this.attrs[k] = String(v); }
  getAttribute(k) { return this.attrs[k]; }
  append(...nodes) { for (const n of nodes) this.children.push(n instanceof Node ? n : new Text(n)); }
  addEventListener() {}
  set className(v) { this.attrs.class = v; }
  get className() { return this.attrs.class || ''; }
  set textContent(t) { this.children = t === '' ? [] : [new Text(t)]; }
  get textContent() { return this.children.map((c) => c.textContent).join(''); }
}
const page = {
  title: new Element('h1'), description: new Element('p'),
  token: new Element('input'), reference: new Element('main'),
};
global.Node = Node;
global.document = {
  readyState: 'complete',
  createElement: (tag) => new Element(tag),
  createTextNode: (text) => new Text(text),
  getElementById: (id) => page[id],
  addEventListener() {},
};
global.fetch = async () => ({ ok: true, json: async () => JSON.parse(fs.readFileSync(documentPath, 'utf8')) });

function* walk(node) {
  yield node;
  if (node instanceof Element) for (const c of node.children) yield* walk(c);
}
const classes = (n) => (n instanceof Element ? n.className.split(/\s+/) : []);

eval(fs.readFileSync(script, 'utf8'));
setTimeout(() => {
  const roots = [page.description, page.reference];
  const shown = [];
  for (const root of roots) for (const n of walk(root)) if (n instanceof Text) shown.push(n.text);
  const operations = [];
  for (const n of walk(page.reference)) {
    if (!(n instanceof Element) || !n.attrs['data-operation']) continue;
    const summary = n.children.find((c) => c.tag === 'summary');
    const admin = [...walk(summary)].some((c) => classes(c).includes('admin-only'));
    operations.push({ key: n.attrs['data-operation'], admin });
  }
  const code = (root) => [...walk(root)].filter((n) => n.tag === 'code').map((n) => n.textContent);
  console.log(JSON.stringify({
    operations,
    with_backticks: shown.filter((t) => t.includes('`')),
    description_code: code(page.description),
    reference_code: code(page.reference),
  }));
}, 0);
