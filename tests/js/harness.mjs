// A minimal fake browser for assets/pixel.js: just enough window/document/navigator/location/history,
// cookie jar, timers, sendBeacon and fetch to drive the pixel through its public surface (`svc` and
// DOM events). Every side effect the pixel has on the outside world is recorded here.
import { readFileSync } from 'node:fs';
import vm from 'node:vm';
import { webcrypto } from 'node:crypto';

export const PIXEL_PATH = new URL('../../assets/pixel.js', import.meta.url);
export const PIXEL = readFileSync(PIXEL_PATH, 'utf8');

// The snippet a site pastes (docs/decisions.md §4), without the <script> tags.
export const SNIPPET = `
  window.svc = window.svc || function () { (svc.q = svc.q || []).push(arguments); };
  svc('init', 'TRACKER_ID');
`;
// The stub line alone, for pages that queue calls before init.
export const STUB = `window.svc = window.svc || function () { (svc.q = svc.q || []).push(arguments); };`;

export function ok(body, status = 200) {
  return { ok: status >= 200 && status < 300, status, json: async () => body };
}

/**
 * opts:
 *  href         page URL (default https://shop.example/p?utm_source=news)
 *  referrer     document.referrer
 *  cookie       initial document.cookie string
 *  src          src of the pixel's <script> (default https://collect.example/pixel.js)
 *  currentScript false: document.currentScript is null (fallback to <script> lookup)
 *  scripts      extra srcs of other <script> tags on the page
 *  beacon       function(url, body) => bool, or null: navigator.sendBeacon missing
 *  respond      function(call) => response | Promise (default: 200 {visitorId, sessionId, accepted})
 *  crypto       object to expose as window.crypto (default Node's webcrypto)
 *  storage      the object behind window.localStorage (default a new localStorage()); pass one
 *               to several browsers for page loads of one visitor; null: access to it throws
 *  cart         function(call, browser) => response | Promise for Shopify's POST /cart/update.js
 *               (default 200 {}); these calls go to rec.carts, not rec.fetches
 */
export function browser(opts = {}) {
  const o = {
    href: 'https://shop.example/p?utm_source=news',
    referrer: 'https://mail.example/',
    cookie: '',
    src: 'https://collect.example/pixel.js',
    currentScript: true,
    scripts: [],
    beacon: () => true,
    crypto: webcrypto,
    ...opts,
  };
  const rec = { fetches: [], beacons: [], cookieWrites: [], timers: [], carts: [] };
  const storage = o.storage === undefined ? localStorage() : o.storage;
  const cart = o.cart || (() => ok({}));
  const jar = new Map();
  for (const part of o.cookie.split(';')) {
    const i = part.indexOf('=');
    if (i > 0) jar.set(part.slice(0, i).trim(), part.slice(i + 1).trim());
  }
  const listeners = { window: {}, document: {} };
  const on = (where) => (type, fn) => { (listeners[where][type] ||= []).push(fn); };
  const location = {
    get href() { return cur.href; },
    get protocol() { return cur.protocol; },
    get origin() { return cur.origin; },
  };
  let cur = new URL(o.href);
  const go = (url) => { if (url != null) cur = new URL(String(url), cur); };
  const history = {
    length: 1,
    pushState(state, title, url) { go(url); this.length++; },
    replaceState(state, title, url) { go(url); },
  };
  const scriptEl = { src: o.src };
  const document = {
    referrer: o.referrer,
    visibilityState: 'visible',
    currentScript: o.currentScript ? scriptEl : null,
    get scripts() { return [...o.scripts.map((src) => ({ src })), scriptEl]; },
    get cookie() { return [...jar].map(([k, v]) => `${k}=${v}`).join('; '); },
    set cookie(s) {
      rec.cookieWrites.push(s);
      const [kv] = s.split(';');
      const i = kv.indexOf('=');
      // max-age=0 deletes the cookie, as a browser does
      if (/;\s*max-age=0(;|$)/i.test(s)) jar.delete(kv.slice(0, i).trim());
      else jar.set(kv.slice(0, i).trim(), kv.slice(i + 1).trim());
    },
    addEventListener: on('document'),
  };
  const navigator = {};
  if (o.beacon) navigator.sendBeacon = (url, body) => { rec.beacons.push({ url, body }); return o.beacon(url, body); };
  let nextTimer = 1;
  const respond = o.respond || ((call) => ok({ visitorId: call.json.visitorId, sessionId: 'sess-1', accepted: call.json.events.length }));
  const win = {
    document, navigator, location, history,
    crypto: o.crypto,
    URL,
    addEventListener: on('window'),
    setTimeout(fn, ms) { const id = nextTimer++; rec.timers.push({ id, fn, ms }); return id; },
    clearTimeout(id) { rec.timers = rec.timers.filter((t) => t.id !== id); },
    fetch(url, init) {
      const call = { url, init, json: JSON.parse(init.body) };
      if (url === '/cart/update.js') {
        rec.carts.push(call);
        return Promise.resolve().then(() => cart(call, b));
      }
      rec.fetches.push(call);
      return Promise.resolve().then(() => respond(call));
    },
  };
  Object.defineProperty(win, 'localStorage', {
    get() { if (!storage) throw new Error('SecurityError: storage is blocked'); return storage; },
  });
  win.window = win;
  const ctx = vm.createContext(win);
  const run = (code) => vm.runInContext(code, ctx);

  const b = {
    win, rec, run, history, document, storage,
    get cookie() { return document.cookie; },
    load() { run(PIXEL); return this; },
    // window.svc as the page sees it
    svc(...args) { return win.svc(...args); },
    // run every pending timer (the pixel's flush delay)
    tick() { const ts = rec.timers; rec.timers = []; for (const t of ts) t.fn(); },
    fire(where, type, ev = {}) { for (const fn of listeners[where][type] || []) fn(ev); },
    hide() { document.visibilityState = 'hidden'; this.fire('document', 'visibilitychange'); },
    back(url) { go(url); this.fire('window', 'popstate', {}); },
    // every event the pixel sent, over fetch and beacon, in order
    sentEvents() {
      return [...rec.fetches.map((f) => f.json), ...rec.beacons.map((b) => JSON.parse(b.body))].flatMap((b) => b.events);
    },
  };
  return b;
}

/** A stand-in for window.localStorage: its named properties are the items, stored as strings. */
export function localStorage() {
  return new Proxy({}, {
    set(items, key, value) { items[key] = String(value); return true; },
  });
}

// Let fetch promise chains settle.
export async function settle() {
  for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
}
